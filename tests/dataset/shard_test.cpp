#include "test_util.hpp"

#include <boost/test/unit_test.hpp>

#include <algorithm>

using namespace actortrain::dataset;
using namespace actortrain::dataset::test;

BOOST_AUTO_TEST_SUITE(shard)

BOOST_AUTO_TEST_CASE(shards_partition_the_data_exactly_once) {
  for (int64_t n : {0, 1, 7, 12}) {
    for (int64_t shards : {1, 2, 3, 5}) {
      std::vector<int> seen(static_cast<size_t>(n), 0);
      for (int64_t index = 0; index < shards; ++index) {
        auto d = numbers(n).shard(shards, index);
        auto got = ids(d);
        for (float id : got) {
          BOOST_TEST(static_cast<int64_t>(id) % shards == index);
          ++seen.at(static_cast<size_t>(id));
        }
        BOOST_TEST(d.cardinality() == cardinality_info::known(static_cast<int64_t>(got.size())));
      }
      BOOST_TEST(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }),
                 "n=" << n << " shards=" << shards);
    }
  }
}

BOOST_AUTO_TEST_CASE(sequential_shard_matches_random_access_shard) {
  auto seq = numbers(11).filter([](const element&) { return true; });
  for (int64_t index = 0; index < 3; ++index) {
    BOOST_TEST(ids(seq.shard(3, index)) == ids(numbers(11).shard(3, index)));
    BOOST_TEST(ids(seq.shard(3, index), 0, 2) == ids(numbers(11).shard(3, index), 0, 2));
  }
  BOOST_TEST(seq.shard(3, 0).cardinality().kind == cardinality_kind::unknown);
}

BOOST_AUTO_TEST_CASE(shards_an_infinite_dataset) {
  auto d = numbers(4).repeat().shard(3, 1);
  BOOST_TEST(d.cardinality().is_infinite());
  BOOST_TEST(ids(d, 0, 0, 4) == (std::vector<float>{1, 0, 3, 2}));
}

BOOST_AUTO_TEST_CASE(rejects_bad_shard_arguments) {
  auto msg = error_of([] { numbers(4).shard(3, 3); });
  BOOST_TEST(msg == "shard: index must be in [0, num_shards) = [0, 3), got 3");
  BOOST_CHECK_THROW(numbers(4).shard(0, 0), std::invalid_argument);
  BOOST_CHECK_THROW(numbers(4).shard(2, -1), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()
