#include "test_util.hpp"

#include <boost/test/unit_test.hpp>

#include <atomic>
#include <memory>
#include <thread>

using namespace actortrain::dataset;
using namespace actortrain::dataset::test;

BOOST_AUTO_TEST_SUITE(cache)

BOOST_AUTO_TEST_CASE(materializes_the_upstream_once) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  auto d = numbers(6)
               .map([calls](element e) {
                 ++*calls;
                 return e;
               })
               .cache();
  BOOST_TEST(*calls == 0);
  BOOST_TEST(ids(d) == ids(numbers(6)));
  BOOST_TEST(*calls == 6);
  BOOST_TEST(ids(d, 3) == ids(numbers(6)));
  BOOST_TEST(ids(d.shuffle(6, 1)).size() == 6u);
  BOOST_TEST(*calls == 6);
}

BOOST_AUTO_TEST_CASE(freezes_the_first_order_of_a_reshuffling_upstream) {
  auto shuffled = numbers(30).shuffle(30, 4);
  auto cached = shuffled.cache();
  BOOST_TEST(ids(cached, 0) == ids(shuffled, 0));
  BOOST_TEST(ids(cached, 1) == ids(shuffled, 0));
  BOOST_TEST(ids(cached, 1) != ids(shuffled, 1));
  // Shuffling after the cache reshuffles every epoch.
  auto reshuffled = numbers(30).cache().shuffle(30, 4);
  BOOST_TEST(ids(reshuffled, 1) == ids(shuffled, 1));
}

BOOST_AUTO_TEST_CASE(holds_the_epoch_zero_pass_whichever_epoch_comes_first) {
  auto shuffled = numbers(30).shuffle(30, 4);
  auto cached = shuffled.cache();
  BOOST_TEST(ids(cached, 7) == ids(shuffled, 0));
}

BOOST_AUTO_TEST_CASE(caches_batches_and_unknown_length_data) {
  auto d = numbers(7).filter([](const element&) { return true; }).batch(3).cache();
  BOOST_TEST(row_counts(collect(d)) == (std::vector<int64_t>{3, 3, 1}));
  BOOST_TEST(ids(d.batch(2)) == ids(numbers(7)));
  BOOST_TEST(row_counts(collect(d, 0, 2)) == (std::vector<int64_t>{1}));
}

BOOST_AUTO_TEST_CASE(concurrent_first_iterations_materialize_once) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  auto d = numbers(50)
               .map([calls](element e) {
                 ++*calls;
                 return e;
               })
               .cache()
               .shuffle(50, 2)
               .batch(8);
  std::vector<std::vector<float>> got(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t) threads.emplace_back([&, t] { got[t] = ids(d, 3); });
  for (auto& t : threads) t.join();
  BOOST_TEST(*calls == 50);
  for (const auto& g : got) BOOST_TEST(g == ids(numbers(50).shuffle(50, 2).batch(8), 3));
}

BOOST_AUTO_TEST_CASE(refuses_an_infinite_upstream) {
  auto d = numbers(3).repeat().cache();
  BOOST_CHECK_THROW(d.iterate(), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()
