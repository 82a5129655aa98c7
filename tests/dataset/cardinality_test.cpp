#include "test_util.hpp"

#include <boost/test/unit_test.hpp>

using namespace actortrain::dataset;
using namespace actortrain::dataset::test;

namespace {

const cardinality_info unknown = cardinality_info::unknown();
const cardinality_info infinite = cardinality_info::infinite();
cardinality_info known(int64_t n) { return cardinality_info::known(n); }

dataset unknown_length(int64_t n) {
  return numbers(n).filter([](const element&) { return true; });
}

/// Counts the elements of one pass (only for finite datasets).
int64_t count(const dataset& d) { return static_cast<int64_t>(collect(d).size()); }

}  // namespace

BOOST_AUTO_TEST_SUITE(cardinality)

BOOST_AUTO_TEST_CASE(every_node_kind_reports_tf_data_cardinality) {
  auto d = numbers(10);
  struct row {
    dataset ds;
    cardinality_info expected;
  };
  const std::vector<row> rows = {
      {d, known(10)},
      {d.map([](element e) { return e; }), known(10)},
      {d.map([](element e, uint64_t) { return e; }, 1), known(10)},
      {d.filter([](const element&) { return true; }), unknown},
      {d.batch(3), known(4)},
      {d.batch(3, true), known(3)},
      {d.shuffle(4, 1), known(10)},
      {d.repeat(3), known(30)},
      {d.repeat(0), known(0)},
      {d.repeat(), infinite},
      {numbers(0).repeat(), known(0)},
      {unknown_length(4).repeat(2), unknown},
      {unknown_length(4).repeat(), infinite},
      {d.shard(3, 0), known(4)},
      {d.shard(3, 2), known(3)},
      {d.take(4), known(4)},
      {d.take(40), known(10)},
      {d.skip(4), known(6)},
      {d.skip(40), known(0)},
      {d.cache(), known(10)},
      {d.prefetch(2), known(10)},
      {d.concatenate(d), known(20)},
      {d.concatenate(unknown_length(2)), unknown},
      {unknown_length(3).batch(2), unknown},
      {unknown_length(3).take(2), unknown},
      {unknown_length(3).skip(2), unknown},
      {unknown_length(3).shard(2, 0), unknown},
      {d.repeat().batch(4), infinite},
      {d.repeat().take(25), known(25)},
      {d.repeat().skip(5), infinite},
      {d.repeat().shard(2, 1), infinite},
      {d.repeat().shuffle(3, 1), infinite},
  };
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto got = rows[i].ds.cardinality();
    BOOST_TEST(got == rows[i].expected,
               "row " << i << " (" << rows[i].ds.describe() << "): got " << to_string(got)
                      << ", expected " << to_string(rows[i].expected));
    if (got.is_known()) BOOST_TEST(count(rows[i].ds) == got.n, "row " << i);
  }
}

BOOST_AUTO_TEST_CASE(to_string_names_each_kind) {
  BOOST_TEST(to_string(known(3)) == "3");
  BOOST_TEST(to_string(unknown) == "unknown");
  BOOST_TEST(to_string(infinite) == "infinite");
}

BOOST_AUTO_TEST_SUITE_END()
