// Partitioners give TF's partition counts and row ranges; placement is round-robin over
// ps shards by a counter that continues across variables; row lookups.
#include <actortrain/model/partitioner.hpp>

#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

using namespace actortrain::model;

namespace {

variable_spec var(const std::string& name, int64_t rows, int64_t cols, bool sparse = false) {
  return variable_spec{name, shape2{rows, cols}, zeros(), sparse};
}

std::vector<int64_t> sizes(const std::vector<row_range>& ranges) {
  std::vector<int64_t> out;
  for (const auto& r : ranges) out.push_back(r.rows());
  return out;
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(partitioners)

BOOST_AUTO_TEST_CASE(split_rows_gives_the_first_partitions_one_extra_row) {
  BOOST_TEST(sizes(split_rows(10, 3)) == (std::vector<int64_t>{4, 3, 3}));
  BOOST_TEST(sizes(split_rows(11, 3)) == (std::vector<int64_t>{4, 4, 3}));
  BOOST_TEST(sizes(split_rows(9, 3)) == (std::vector<int64_t>{3, 3, 3}));
  const auto r = split_rows(10, 3);
  BOOST_TEST(r[0].begin == 0);
  BOOST_TEST(r[0].end == 4);
  BOOST_TEST(r[1].begin == 4);
  BOOST_TEST(r[2].end == 10);
  BOOST_CHECK_THROW(split_rows(3, 4), std::invalid_argument);
  BOOST_CHECK_THROW(split_rows(3, 0), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(fixed_shards_never_exceeds_the_rows) {
  fixed_shards p(3);
  BOOST_TEST(p.num_partitions({10, 5}) == 3);
  BOOST_TEST(p.num_partitions({2, 5}) == 2);
  BOOST_TEST(p.num_partitions({1, 1000}) == 1);
  BOOST_TEST(p.describe() == "fixed_shards(num_shards=3)");
}

BOOST_AUTO_TEST_CASE(min_size_follows_tf_rounding) {
  // 784 x 300 floats = 940800 bytes; / 256 KiB = 3.59 -> 4 shards when allowed.
  BOOST_TEST(min_size().num_partitions({784, 300}) == 1);  // TF's default max_shards = 1
  BOOST_TEST(min_size(256 << 10, 10).num_partitions({784, 300}) == 4);
  BOOST_TEST(min_size(256 << 10, 3).num_partitions({784, 300}) == 3);
  // 300 KiB with a 256 KiB minimum: ceil(1.17) = 2 partitions (TF rounds up).
  BOOST_TEST(min_size(256 << 10, 8).num_partitions({300, 256}) == 2);
  // Small variables stay whole; never more partitions than rows.
  BOOST_TEST(min_size(256 << 10, 8).num_partitions({1, 10}) == 1);
  BOOST_TEST(min_size(4, 100).num_partitions({3, 10}) == 3);
}

BOOST_AUTO_TEST_CASE(max_size_keeps_partitions_under_the_limit) {
  // Rows of 300 floats = 1200 bytes; 100 KB -> 83 rows per shard -> ceil(784 / 83) = 10.
  BOOST_TEST(max_size(100000).num_partitions({784, 300}) == 10);
  BOOST_TEST(max_size(100000, 4).num_partitions({784, 300}) == 4);
  // A row larger than the limit still makes one partition per row.
  BOOST_TEST(max_size(100).num_partitions({5, 300}) == 5);
  BOOST_TEST(max_size(1 << 30).num_partitions({784, 300}) == 1);
}

BOOST_AUTO_TEST_CASE(invalid_arguments_name_the_value) {
  BOOST_TEST(error_of([] { fixed_shards(0); }).find("num_shards") != std::string::npos);
  BOOST_TEST(error_of([] { min_size(0); }).find("min_shard_bytes") != std::string::npos);
  BOOST_TEST(error_of([] { min_size(10, 0); }).find("max_shards") != std::string::npos);
  BOOST_TEST(error_of([] { max_size(0); }).find("max_shard_bytes") != std::string::npos);
  BOOST_TEST(error_of([] { max_size(10, -1); }).find("max_shards") != std::string::npos);
  const std::vector<variable_spec> vars{var("w", 4, 4)};
  const auto e = error_of([&] { place(vars, nullptr, 0); });
  BOOST_TEST(e.find("num_ps") != std::string::npos);
  BOOST_TEST(e.find("0") != std::string::npos);
  BOOST_CHECK_THROW(place({var("w", 4, 4), var("w", 2, 2)}, nullptr, 1), std::invalid_argument);
  BOOST_CHECK_THROW(place({var("w", 0, 4)}, nullptr, 1), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(placement_is_round_robin_continuing_across_variables) {
  // Declaration order: a (10 rows -> 3 partitions), b (1 row -> 1), c (8 rows -> 3).
  const std::vector<variable_spec> vars{var("a", 10, 4), var("b", 1, 4), var("c", 8, 2)};
  fixed_shards p(3);
  const auto pl = place(vars, &p, 2);
  BOOST_TEST(pl.num_ps() == 2);
  BOOST_TEST(pl.num_partitions() == 7u);
  const auto& a = pl.variable(0);
  BOOST_TEST_REQUIRE(a.partitions.size() == 3u);
  BOOST_TEST(a.partitions[0].ps == 0);
  BOOST_TEST(a.partitions[1].ps == 1);
  BOOST_TEST(a.partitions[2].ps == 0);
  BOOST_TEST(a.partitions[1].row_begin == 4);
  BOOST_TEST(a.partitions[1].row_end == 7);
  BOOST_TEST(pl.variable(1).partitions[0].ps == 1);  // the counter went on from a
  const auto& c = pl.variable(2);
  BOOST_TEST(c.partitions[0].ps == 0);
  BOOST_TEST(c.partitions[1].ps == 1);
  BOOST_TEST(c.partitions[2].ps == 0);
  BOOST_TEST(sizes({{c.partitions[0].row_begin, c.partitions[0].row_end},
                    {c.partitions[1].row_begin, c.partitions[1].row_end},
                    {c.partitions[2].row_begin, c.partitions[2].row_end}}) ==
             (std::vector<int64_t>{3, 3, 2}));
  const auto on0 = pl.partitions_on(0);
  const auto on1 = pl.partitions_on(1);
  BOOST_TEST(on0.size() == 4u);
  BOOST_TEST(on1.size() == 3u);
  BOOST_TEST(on1[0].variable == 0);
  BOOST_TEST(on1[0].index == 1);
  BOOST_TEST(on1[1].variable == 1);
  BOOST_CHECK_THROW(pl.partitions_on(2), std::out_of_range);
}

BOOST_AUTO_TEST_CASE(no_partitioner_places_whole_variables_round_robin) {
  const std::vector<variable_spec> vars{var("k1", 784, 300), var("b1", 1, 300), var("k2", 300, 10),
                                        var("b2", 1, 10)};
  const auto pl = place(vars, nullptr, 3);
  std::vector<int> ps;
  for (const auto& v : pl.variables()) {
    BOOST_TEST(v.partitions.size() == 1u);
    BOOST_TEST(v.partitions[0].row_end == v.shape.rows);
    ps.push_back(v.partitions[0].ps);
  }
  BOOST_TEST(ps == (std::vector<int>{0, 1, 2, 0}));
  BOOST_TEST(pl.find("k2") == &pl.variable(2));
  BOOST_TEST(pl.find("nope") == nullptr);
}

BOOST_AUTO_TEST_CASE(locate_row_finds_partition_and_local_row) {
  const std::vector<variable_spec> vars{var("emb", 10, 8, true)};
  fixed_shards p(3);  // rows 0-3, 4-6, 7-9
  const auto pl = place(vars, &p, 2);
  BOOST_TEST(pl.variable(0).sparse);
  const auto r0 = pl.locate_row(0, 0);
  BOOST_TEST(r0.partition == 0);
  BOOST_TEST(r0.local_row == 0);
  const auto r4 = pl.locate_row(0, 4);
  BOOST_TEST(r4.partition == 1);
  BOOST_TEST(r4.local_row == 0);
  BOOST_TEST(r4.ps == 1);
  const auto r9 = pl.locate_row(0, 9);
  BOOST_TEST(r9.partition == 2);
  BOOST_TEST(r9.local_row == 2);
  BOOST_TEST(r9.ps == 0);
  BOOST_CHECK_THROW(pl.locate_row(0, 10), std::out_of_range);
  BOOST_CHECK_THROW(pl.locate_row(0, -1), std::out_of_range);
  BOOST_CHECK_THROW(pl.locate_row(1, 0), std::out_of_range);
}

BOOST_AUTO_TEST_CASE(group_rows_splits_a_lookup_by_partition) {
  const std::vector<variable_spec> vars{var("emb", 10, 8, true)};
  fixed_shards p(3);
  const auto pl = place(vars, &p, 3);
  const auto groups = pl.group_rows(0, {9, 1, 8, 1});
  BOOST_TEST_REQUIRE(groups.size() == 2u);
  BOOST_TEST(groups[0].partition == 0);
  BOOST_TEST(groups[0].local_rows == (std::vector<int64_t>{1, 1}));
  BOOST_TEST(groups[0].positions == (std::vector<size_t>{1, 3}));
  BOOST_TEST(groups[1].partition == 2);
  BOOST_TEST(groups[1].ps == 2);
  BOOST_TEST(groups[1].local_rows == (std::vector<int64_t>{2, 1}));
  BOOST_TEST(groups[1].positions == (std::vector<size_t>{0, 2}));
}

BOOST_AUTO_TEST_CASE(make_partitioner_parses_specs) {
  BOOST_TEST(!make_partitioner("none"));
  BOOST_TEST(make_partitioner("fixed_shards(3)")->describe() == "fixed_shards(num_shards=3)");
  BOOST_TEST(make_partitioner("min_size(max_shards=4)")->describe() ==
             "min_size(min_shard_bytes=262144, max_shards=4)");
  BOOST_TEST(make_partitioner("max_size(1048576)")->describe() ==
             "max_size(max_shard_bytes=1048576, max_shards=0)");
  auto round = make_partitioner(min_size(1000, 2).describe());
  BOOST_TEST(round->describe() == min_size(1000, 2).describe());
  BOOST_TEST(error_of([] { make_partitioner("fixed_shards(1.5)"); }).find("'1.5'") != std::string::npos);
  BOOST_TEST(error_of([] { make_partitioner("fixed_shards()"); }).find("num_shards") != std::string::npos);
  BOOST_TEST(error_of([] { make_partitioner("round_robin(2)"); }).find("'round_robin'") != std::string::npos);
  BOOST_TEST(error_of([] { make_partitioner("fixed_shards(0)"); }).find("num_shards") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
