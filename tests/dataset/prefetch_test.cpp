#include "test_util.hpp"

#include <actortrain/model/fpu.hpp>

#include <boost/test/unit_test.hpp>

#include <atomic>
#include <thread>

using namespace actortrain::dataset;
using namespace actortrain::dataset::test;

BOOST_AUTO_TEST_SUITE(prefetch)

BOOST_AUTO_TEST_CASE(yields_the_same_sequence_as_without) {
  auto d = numbers(50).shuffle(50, 3).batch(7);
  for (int64_t buffer : {1, 2, 16}) {
    BOOST_TEST(same(collect(d.prefetch(buffer), 1), collect(d, 1)));
    BOOST_TEST(same(collect(d.prefetch(buffer), 0, 3), collect(d, 0, 3)));
  }
  BOOST_TEST(same(collect(d.prefetch(2).prefetch(1)), collect(d)));
}

BOOST_AUTO_TEST_CASE(rethrows_an_upstream_exception_at_its_position) {
  auto d = numbers(10)
               .map([](element e) {
                 if (e.features[0](0, 0) == 5.0f) throw std::runtime_error("bad record 5");
                 return e;
               })
               .prefetch(3);
  auto it = d.iterate();
  for (int i = 0; i < 5; ++i) {
    auto e = it->next();
    BOOST_REQUIRE(e.has_value());
    BOOST_TEST(e->features[0](0, 0) == static_cast<float>(i));
  }
  BOOST_TEST(it->position() == 5u);
  BOOST_CHECK_EXCEPTION(it->next(), std::runtime_error,
                        [](const std::runtime_error& e) { return std::string(e.what()) == "bad record 5"; });
  BOOST_TEST(it->position() == 5u);
  BOOST_TEST(!it->next());
  // Resuming after the bad record with a fresh iterator works.
  auto rest = ids(d, 0, 6);
  BOOST_TEST(rest == (std::vector<float>{6, 7, 8, 9}));
}

BOOST_AUTO_TEST_CASE(destroying_an_iterator_mid_stream_returns) {
  // The producer is blocked on a full queue of an endless stream; the destructor must stop it.
  auto d = numbers(4).repeat().prefetch(2);
  for (int round = 0; round < 20; ++round) {
    auto it = d.iterate();
    BOOST_TEST(it->next().has_value());
  }
  // Also before the consumer ever asked for an element, and with nested prefetches.
  for (int round = 0; round < 20; ++round) auto it = d.prefetch(1).iterate(3, 17);
}

BOOST_AUTO_TEST_CASE(runs_the_upstream_on_a_flush_to_zero_thread) {
  auto caller = std::this_thread::get_id();
  auto d = numbers(3)
               .map([caller](element e) {
                 e.labels(0, 0) = std::this_thread::get_id() != caller &&
                                          actortrain::model::flush_to_zero_enabled()
                                      ? 1.0f
                                      : 0.0f;
                 return e;
               })
               .prefetch(1);
  for (const auto& e : collect(d)) BOOST_TEST(e.labels(0, 0) == 1.0f);
}

BOOST_AUTO_TEST_CASE(iterators_run_concurrently) {
  auto d = numbers(200).shuffle(200, 1).batch(8).prefetch(2);
  const auto expected = ids(d, 1);
  std::vector<std::vector<float>> got(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t) threads.emplace_back([&, t] { got[t] = ids(d, 1); });
  for (auto& t : threads) t.join();
  for (const auto& g : got) BOOST_TEST(g == expected);
}

BOOST_AUTO_TEST_CASE(rejects_empty_buffer) {
  BOOST_CHECK_THROW(numbers(3).prefetch(0), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()
