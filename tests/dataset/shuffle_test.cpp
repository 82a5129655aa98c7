#include "test_util.hpp"

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <numeric>

using namespace actortrain::dataset;
using namespace actortrain::dataset::test;

namespace {

std::vector<float> iota(int n) {
  std::vector<float> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0.0f);
  return v;
}

std::vector<float> sorted(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v;
}

dataset sequential(const dataset& d) {
  return d.filter([](const element&) { return true; });
}

}  // namespace

BOOST_AUTO_TEST_SUITE(shuffle)

BOOST_AUTO_TEST_CASE(same_seed_gives_the_same_order) {
  BOOST_TEST(ids(numbers(50).shuffle(50, 7)) == ids(numbers(50).shuffle(50, 7)));
  BOOST_TEST(ids(numbers(50).shuffle(10, 7), 3) == ids(numbers(50).shuffle(10, 7), 3));
}

BOOST_AUTO_TEST_CASE(different_seeds_give_different_orders) {
  auto a = ids(numbers(50).shuffle(50, 7));
  auto b = ids(numbers(50).shuffle(50, 8));
  BOOST_TEST(a != b);
  BOOST_TEST(a != iota(50));
}

BOOST_AUTO_TEST_CASE(full_buffer_is_a_permutation) {
  for (uint64_t seed : {1u, 2u, 3u}) {
    auto order = ids(numbers(100).shuffle(1000, seed));
    BOOST_TEST(sorted(order) == iota(100));  // every element exactly once
  }
}

BOOST_AUTO_TEST_CASE(small_buffer_keeps_every_element_once_and_stays_local) {
  auto order = ids(numbers(100).shuffle(5, 4));
  BOOST_TEST(sorted(order) == iota(100));
  // With a buffer of 5, output k is one of the first k + 5 inputs.
  for (size_t k = 0; k < order.size(); ++k) BOOST_TEST(order[k] < static_cast<float>(k + 5));
  BOOST_TEST(order != iota(100));
}

BOOST_AUTO_TEST_CASE(buffer_of_one_is_the_identity) {
  BOOST_TEST(ids(numbers(20).shuffle(1, 99)) == iota(20));
}

BOOST_AUTO_TEST_CASE(reshuffles_each_epoch_by_default) {
  auto d = numbers(40).shuffle(40, 3);
  BOOST_TEST(ids(d, 0) != ids(d, 1));
  BOOST_TEST(ids(d, 1) != ids(d, 2));
  BOOST_TEST(ids(d, 1) == ids(d, 1));
  BOOST_TEST(sorted(ids(d, 1)) == iota(40));
}

BOOST_AUTO_TEST_CASE(keeps_epoch_zero_order_without_reshuffle) {
  auto d = numbers(40).shuffle(40, 3, false);
  BOOST_TEST(ids(d, 1) == ids(d, 0));
  BOOST_TEST(ids(d, 5) == ids(d, 0));
  BOOST_TEST(ids(d, 0) == ids(numbers(40).shuffle(40, 3), 0));
}

BOOST_AUTO_TEST_CASE(element_buffer_path_gives_the_index_path_order) {
  for (bool reshuffle : {true, false}) {
    for (int64_t buffer : {1, 4, 40, 100}) {
      auto fast = collect(numbers(40).shuffle(buffer, 11, reshuffle), 2);
      auto slow = collect(sequential(numbers(40)).shuffle(buffer, 11, reshuffle), 2);
      BOOST_TEST(same(fast, slow));
    }
    auto slow = sequential(numbers(40)).shuffle(40, 11, reshuffle);
    BOOST_TEST((ids(slow, 0) == ids(slow, 1)) == !reshuffle);
  }
}

// The node keeps the last epoch's order for every accessor of that epoch (a dataset
// shard seeks whenever requests arrive out of order): seeks into epochs taken in turn,
// and iterators of two epochs open at once, each give their epoch's order, as the element
// path (which keeps nothing) gives it.
BOOST_AUTO_TEST_CASE(seeks_across_epochs_give_each_epochs_order) {
  auto d = numbers(60).shuffle(20, 9);
  auto slow = sequential(numbers(60)).shuffle(20, 9);
  std::vector<std::vector<float>> want;
  for (uint64_t e = 0; e < 3; ++e) want.push_back(ids(slow, e));
  BOOST_TEST(want[0] != want[1]);
  const std::pair<uint64_t, uint64_t> seeks[] = {{0, 10}, {1, 5}, {0, 30}, {1, 0}, {2, 59}, {0, 0}, {2, 7}};
  for (auto [e, start] : seeks) {
    auto got = ids(d, e, start);
    BOOST_TEST(got == std::vector<float>(want[e].begin() + static_cast<long>(start), want[e].end()));
  }
  auto a = d.iterate(0, 0);
  auto b = d.iterate(1, 3);
  for (size_t k = 0; k < 50; ++k) {
    auto x = a->next();
    auto y = b->next();
    BOOST_REQUIRE(x && y);
    BOOST_TEST(x->features[0](0, 0) == want[0][k]);
    BOOST_TEST(y->features[0](0, 0) == want[1][k + 3]);
  }
}

BOOST_AUTO_TEST_CASE(shuffles_an_infinite_dataset_by_streaming) {
  auto d = numbers(10).repeat().shuffle(8, 5);
  BOOST_TEST(d.cardinality().is_infinite());
  auto first = ids(d, 0, 0, 30);
  BOOST_TEST(first.size() == 30u);
  BOOST_TEST(first != ids(numbers(10).repeat(), 0, 0, 30));
  BOOST_TEST(ids(d, 0, 12, 18) == std::vector<float>(first.begin() + 12, first.end()));
  // The same order when the upstream has no random access.
  BOOST_TEST(ids(sequential(numbers(10)).repeat().shuffle(8, 5), 0, 0, 30) == first);
}

BOOST_AUTO_TEST_CASE(keeps_cardinality_and_rejects_empty_buffer) {
  BOOST_TEST(numbers(7).shuffle(3, 1).cardinality() == cardinality_info::known(7));
  BOOST_CHECK_THROW(numbers(7).shuffle(0, 1), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()
