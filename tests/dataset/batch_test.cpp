#include "test_util.hpp"

#include <boost/test/unit_test.hpp>

using namespace actortrain::dataset;
using namespace actortrain::dataset::test;

namespace {

/// The same data without random access, so batch takes its sequential path.
dataset sequential(const dataset& d) {
  return d.filter([](const element&) { return true; });
}

}  // namespace

BOOST_AUTO_TEST_SUITE(batch)

BOOST_AUTO_TEST_CASE(keeps_the_remainder_by_default) {
  auto all = collect(numbers(10).batch(4));
  BOOST_TEST(row_counts(all) == (std::vector<int64_t>{4, 4, 2}));
  BOOST_TEST(ids(all) == (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  BOOST_TEST(all[2].labels(1, 0) == 90.0f);
  BOOST_TEST(all[2].features[0](1, 1) == 9.5f);
  BOOST_TEST(numbers(10).batch(4).cardinality() == cardinality_info::known(3));
}

BOOST_AUTO_TEST_CASE(drops_the_remainder_when_asked) {
  auto all = collect(numbers(10).batch(4, true));
  BOOST_TEST(row_counts(all) == (std::vector<int64_t>{4, 4}));
  BOOST_TEST(numbers(10).batch(4, true).cardinality() == cardinality_info::known(2));
  BOOST_TEST(numbers(8).batch(4, true).cardinality() == cardinality_info::known(2));
  BOOST_TEST(row_counts(collect(numbers(3).batch(4, true))).empty());
}

BOOST_AUTO_TEST_CASE(sequential_path_matches_the_gather_path) {
  for (bool drop : {false, true}) {
    auto fast = collect(numbers(11).batch(3, drop));
    auto slow = collect(sequential(numbers(11)).batch(3, drop));
    BOOST_TEST(same(fast, slow));
    BOOST_TEST(row_counts(slow) ==
               (drop ? std::vector<int64_t>{3, 3, 3} : std::vector<int64_t>{3, 3, 3, 2}));
  }
  BOOST_TEST(sequential(numbers(11)).batch(3).cardinality().kind == cardinality_kind::unknown);
}

BOOST_AUTO_TEST_CASE(batching_batches_concatenates_rows) {
  auto all = collect(numbers(10).batch(2).batch(3));
  BOOST_TEST(row_counts(all) == (std::vector<int64_t>{6, 4}));
  BOOST_TEST(ids(all) == (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  BOOST_TEST(same(all, collect(sequential(numbers(10).batch(2)).batch(3))));
}

BOOST_AUTO_TEST_CASE(gathers_rows_across_concatenated_parts) {
  // One-row elements: each part is gathered once and its rows scattered into place.
  auto rows = numbers(5).concatenate(numbers(4)).shuffle(9, 2);
  BOOST_TEST(same(collect(rows.batch(4)), collect(sequential(rows).batch(4))));
  // Multi-row elements: gathered run by run.
  auto batches = numbers(6).batch(2).concatenate(numbers(3).batch(3)).shuffle(4, 1);
  auto all = collect(batches.batch(3));
  BOOST_TEST(same(all, collect(sequential(batches).batch(3))));
  BOOST_REQUIRE_EQUAL(all.size(), 2u);
  BOOST_TEST(all[0].rows() + all[1].rows() == 9);
  // Across repetitions of a repeat.
  auto repeated = numbers(5).shuffle(5, 3).repeat(3).batch(4);
  BOOST_TEST(same(collect(repeated), collect(sequential(numbers(5)).shuffle(5, 3).repeat(3).batch(4))));
}

BOOST_AUTO_TEST_CASE(batches_an_infinite_dataset) {
  auto d = numbers(3).repeat().batch(2);
  BOOST_TEST(d.cardinality().is_infinite());
  BOOST_TEST(ids(d, 0, 0, 3) == (std::vector<float>{0, 1, 2, 0, 1, 2}));
}

BOOST_AUTO_TEST_CASE(labels_free_data_batches_with_zero_label_columns) {
  auto all = collect(from_tensor_slices({matrix::Ones(5, 3)}).batch(2));
  BOOST_REQUIRE_EQUAL(all.size(), 3u);
  BOOST_TEST(all[0].labels.rows() == 2);
  BOOST_TEST(all[0].labels.cols() == 0);
}

BOOST_AUTO_TEST_CASE(elements_of_different_shapes_cannot_be_batched) {
  auto d = numbers(4).map([](element e) {
    if (e.features[0](0, 0) == 2.0f) e.features[0] = matrix::Zero(1, 5);
    return e;
  });
  auto msg = error_of([&] { collect(d.batch(2)); });
  BOOST_TEST(msg == "batch(2): batch 1: cannot batch elements of different shapes: feature 0 "
                    "has 5 columns in one element and 2 in another",
             msg);
  BOOST_TEST(error_of([&] { collect(sequential(d).batch(2)); }) == msg);
  BOOST_CHECK_THROW(collect(sequential(d).batch(4)), std::runtime_error);
}

BOOST_AUTO_TEST_CASE(rejects_batch_size_below_one) {
  auto msg = error_of([] { numbers(3).batch(0); });
  BOOST_TEST(msg == "batch: batch_size must be >= 1, got 0");
  BOOST_CHECK_THROW(numbers(3).batch(-1), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()
