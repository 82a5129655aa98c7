// The ps shard actor on CAF's test coordinator: what the actor adds to its shard store
// (shard_store_test.cpp tests the decisions): requests through the mailbox, the store's
// failures as errors of category actortrain, pulls shared through messages without a
// copy, a synchronous round closed (and fenced) by message.

#include <actortrain/actors/core/errors.hpp>
#include <actortrain/actors/ps/ps_shard.hpp>
#include <actortrain/model/optim/sgd.hpp>

#include "partition_state.hpp"

// Last: CAF's test DSL defines macros (inject, expect) that clash with ordinary names.
#include "caf_test.hpp"

using namespace actortrain;
using model::matrix;

namespace {

struct ps_fixture : testing::fixture {
  ps_shard_actor ps;
  caf::error last_error;

  ps_fixture() {
    ps = spawn_ps_shard(sys, *model::make_sgd({1.0}), ps_shard_options{});
    init_request req;
    req.f.coordinator_epoch = 1;
    req.partitions.push_back(testing::start_state(partition_key{0, 0}, "dense/kernel", false, matrix::Zero(2, 3)));
    req.partitions.push_back(testing::start_state(partition_key{1, 0}, "emb/embeddings", true, matrix::Zero(5, 2)));
    BOOST_REQUIRE(ask<caf::ok_atom>(init_atom::value, req));
  }

  ~ps_fixture() { caf::anon_send_exit(ps, caf::exit_reason::user_shutdown); }

  template <class T, class... Ts>
  caf::optional<T> ask(Ts&&... xs) {
    auto rh = self->request(ps, std::chrono::seconds(10), std::forward<Ts>(xs)...);
    sched.run();
    caf::optional<T> out;
    rh.receive([&](T& x) { out = std::move(x); }, [&](caf::error& e) { last_error = e; });
    return out;
  }

  static fence epochs(uint64_t c, uint64_t worker = fence::no_worker, uint64_t gen = 0) {
    fence f;
    f.coordinator_epoch = c;
    f.worker = static_cast<uint32_t>(worker);
    f.worker_generation = gen;
    return f;
  }

  push_request push_of(uint64_t position, matrix g, uint64_t read_version = 0, fence f = epochs(1)) {
    push_request r;
    r.f = f;
    r.step = step_id{1, 0, position};
    r.example_count = 4;
    r.dense.push_back(dense_slice{partition_key{0, 0}, read_version, tensor{std::move(g)}});
    r.digests = {1000 + position};
    return r;
  }

  matrix kernel() {
    pull_request p;
    p.f = epochs(0);  // an observer's read: passes any fence
    p.partitions.push_back(partition_key{0, 0});
    auto r = ask<pull_reply>(pull_atom::value, p);
    BOOST_REQUIRE(r);
    return *r->values.at(0).value.value;
  }

  ps_stats stats() { return *ask<ps_stats>(stats_atom::value); }
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(ps_shard, ps_fixture)

BOOST_AUTO_TEST_CASE(a_push_is_applied_once_and_a_repeated_step_id_is_acknowledged_as_duplicate) {
  auto first = ask<push_reply>(push_atom::value, push_of(7, matrix::Ones(2, 3)));
  BOOST_REQUIRE(first);
  BOOST_TEST(to_string(first->status) == "applied");
  BOOST_TEST(kernel().isApproxToConstant(-1.0f));  // SGD lr 1: w -= g
  auto again = ask<push_reply>(push_atom::value, push_of(7, matrix::Ones(2, 3)));
  BOOST_REQUIRE(again);
  BOOST_TEST(to_string(again->status) == "duplicate");
  BOOST_TEST(kernel().isApproxToConstant(-1.0f));  // not applied twice
  auto s = stats();
  BOOST_TEST(s.applied == 1u);
  BOOST_TEST(s.duplicates == 1u);
}

BOOST_AUTO_TEST_CASE(a_wrong_shape_is_rejected_naming_variable_and_shapes_and_nothing_changes) {
  auto r = ask<push_reply>(push_atom::value, push_of(1, matrix::Ones(3, 3)));
  BOOST_TEST(!r);
  auto text = describe(last_error);
  BOOST_TEST(text.find("invalid_gradient") != std::string::npos, text);
  BOOST_TEST(text.find("dense/kernel") != std::string::npos, text);
  BOOST_TEST(text.find("[3 x 3]") != std::string::npos, text);
  BOOST_TEST(text.find("[2 x 3]") != std::string::npos, text);
  BOOST_TEST(kernel().isZero());
  BOOST_TEST(stats().rejected == 1u);
}

BOOST_AUTO_TEST_CASE(a_message_with_an_older_fence_is_rejected) {
  BOOST_REQUIRE(ask<push_reply>(push_atom::value, push_of(1, matrix::Ones(2, 3), 0, epochs(3))));
  BOOST_TEST(!static_cast<bool>(ask<push_reply>(push_atom::value, push_of(2, matrix::Ones(2, 3), 0, epochs(2)))));
  BOOST_TEST(describe(last_error).find("fenced_out") != std::string::npos, describe(last_error));
  BOOST_TEST(stats().fenced == 1u);
  BOOST_TEST(kernel().isApproxToConstant(-1.0f));
}

BOOST_AUTO_TEST_CASE(a_reader_keeps_the_version_it_pulled_while_the_shard_moves_on) {
  pull_request p;
  p.f = epochs(1);
  p.partitions.push_back(partition_key{0, 0});
  auto held = ask<pull_reply>(pull_atom::value, p);  // holds version 0
  BOOST_REQUIRE(held);
  BOOST_REQUIRE(ask<push_reply>(push_atom::value, push_of(1, matrix::Ones(2, 3))));
  BOOST_TEST(held->values[0].value.value->isZero());  // copy-on-write: unchanged
  BOOST_TEST(kernel().isApproxToConstant(-1.0f));
}

BOOST_AUTO_TEST_CASE(a_shard_without_partitions_says_so) {
  auto fresh = spawn_ps_shard(sys, *model::make_sgd({1.0}), ps_shard_options{});
  auto rh = self->request(fresh, std::chrono::seconds(10), pull_atom::value, pull_request{});
  sched.run();
  std::string text;
  rh.receive([](pull_reply&) {}, [&](caf::error& e) { text = describe(e); });
  BOOST_TEST(text.find("not_initialized") != std::string::npos, text);
  caf::anon_send_exit(fresh, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_SUITE_END()

// A shard of a synchronous cluster: pushes are held, and a round applies their
// example-weighted mean once.
struct sync_fixture : ps_fixture {
  sync_fixture() {
    caf::anon_send_exit(ps, caf::exit_reason::user_shutdown);
    ps_shard_options o;
    o.policy = hold_for_round();
    ps = spawn_ps_shard(sys, *model::make_sgd({1.0}), o);
    init_request req;
    req.f.coordinator_epoch = 1;
    req.partitions.push_back(testing::start_state(partition_key{0, 0}, "dense/kernel", false, matrix::Zero(2, 3)));
    req.partitions.push_back(testing::start_state(partition_key{1, 0}, "emb/embeddings", true, matrix::Zero(5, 2)));
    BOOST_REQUIRE(ask<caf::ok_atom>(init_atom::value, req));
  }

  round_request round_of(std::vector<uint64_t> positions, int64_t examples) {
    round_request r;
    r.f = epochs(1);
    r.round = 1;
    for (auto p : positions) r.steps.push_back(step_id{1, 0, p});
    r.example_count = examples;
    return r;
  }
};

BOOST_FIXTURE_TEST_CASE(a_round_closed_by_message_applies_what_is_held, sync_fixture) {
  auto held = ask<push_reply>(push_atom::value, push_of(0, matrix::Ones(2, 3)));
  BOOST_REQUIRE(held);
  BOOST_TEST(to_string(held->status) == "held");
  BOOST_TEST(kernel().isZero());
  auto r = ask<round_reply>(round_atom::value, round_of({0}, 4));
  BOOST_REQUIRE(r);
  BOOST_TEST(r->applied == 1u);
  BOOST_TEST(kernel().isApproxToConstant(-1.0f));
}

BOOST_FIXTURE_TEST_CASE(a_restore_drops_held_pushes_and_old_rounds_are_fenced, sync_fixture) {
  BOOST_REQUIRE(ask<push_reply>(push_atom::value, push_of(0, matrix::Ones(2, 3))));
  init_request req;
  req.f.coordinator_epoch = 1;
  req.f.recovery_epoch = 1;
  req.partitions.push_back(testing::start_state(partition_key{0, 0}, "dense/kernel", false, matrix::Zero(2, 3)));
  BOOST_REQUIRE(ask<caf::ok_atom>(init_atom::value, req));
  BOOST_TEST(stats().held == 0u);
  BOOST_TEST(!ask<round_reply>(round_atom::value, round_of({0}, 4)));  // the old epochs' manifest
  BOOST_TEST(describe(last_error).find("fenced_out") != std::string::npos, describe(last_error));
  BOOST_TEST(kernel().isZero());
}
