#pragma once
// Boost.Test + CAF's deterministic test coordinator. CAF's dsl.hpp reports through its
// own test engine, which does not exist under Boost (its CHECK macros would crash), so
// its check macros are routed to Boost's before dsl.hpp is read. Include this header in
// exactly one translation unit per test executable (it also instantiates CAF's engine).

#include <boost/test/unit_test.hpp>

#include <caf/all.hpp>
#include <caf/test/unit_test.hpp>
#undef CAF_CHECK
#undef CAF_CHECK_EQUAL
#undef CAF_REQUIRE
#undef CAF_REQUIRE_EQUAL
#undef CAF_FAIL
#undef CAF_MESSAGE
#define CAF_CHECK(...) BOOST_CHECK(__VA_ARGS__)
#define CAF_CHECK_EQUAL(x, y) BOOST_CHECK((x) == (y))
#define CAF_REQUIRE(...) BOOST_REQUIRE(__VA_ARGS__)
#define CAF_REQUIRE_EQUAL(x, y) BOOST_REQUIRE((x) == (y))
#define CAF_FAIL(msg) BOOST_FAIL(msg)
#define CAF_MESSAGE(msg) BOOST_TEST_MESSAGE(msg)
#define FAIL(msg) BOOST_FAIL(msg)
#include <caf/test/dsl.hpp>

#define CAF_TEST_NO_MAIN
#include <caf/test/unit_test_impl.hpp>

#include <actortrain/actors/core/configure.hpp>

namespace actortrain::testing {

/// A config with ActorTrain's types and hooks, for test_coordinator_fixture.
struct test_config : caf::actor_system_config {
  test_config() { actortrain::configure(*this); }
};

using fixture = test_coordinator_fixture<test_config>;

}  // namespace actortrain::testing
