#include "test_util.hpp"

#include <boost/test/unit_test.hpp>

#include <atomic>
#include <set>

using namespace actortrain::dataset;
using namespace actortrain::dataset::test;

BOOST_AUTO_TEST_SUITE(sources)

BOOST_AUTO_TEST_CASE(tensor_slices_yield_one_row_per_element) {
  auto all = collect(numbers(3));
  BOOST_REQUIRE_EQUAL(all.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    BOOST_TEST(all[i].rows() == 1);
    BOOST_TEST(all[i].features.size() == 1u);
    BOOST_TEST(all[i].features[0].cols() == 2);
    BOOST_TEST(all[i].features[0](0, 1) == static_cast<float>(i) + 0.5f);
    BOOST_TEST(all[i].labels(0, 0) == 10.0f * static_cast<float>(i));
  }
  BOOST_TEST(numbers(3).cardinality() == cardinality_info::known(3));
}

BOOST_AUTO_TEST_CASE(tensor_slices_with_several_inputs_and_no_labels) {
  matrix a = matrix::Constant(4, 3, 1.0f);
  matrix b = matrix::Constant(4, 1, 2.0f);
  auto all = collect(from_tensor_slices({a, b}));
  BOOST_REQUIRE_EQUAL(all.size(), 4u);
  BOOST_TEST(all[0].features.size() == 2u);
  BOOST_TEST(all[0].features[1](0, 0) == 2.0f);
  BOOST_TEST(all[0].labels.rows() == 1);
  BOOST_TEST(all[0].labels.cols() == 0);
}

BOOST_AUTO_TEST_CASE(tensor_slices_reject_disagreeing_row_counts_naming_shapes) {
  matrix x(5, 2), y(4, 1), z(6, 3);
  auto msg = error_of([&] { from_tensor_slices({x}, y); });
  BOOST_TEST(msg.find("[4 x 1]") != std::string::npos, msg);
  BOOST_TEST(msg.find("[5 x 2]") != std::string::npos, msg);
  BOOST_CHECK_THROW(from_tensor_slices({x}, y), std::invalid_argument);
  msg = error_of([&] { from_tensor_slices({x, z}, matrix()); });
  BOOST_TEST(msg.find("features[1] is [6 x 3]") != std::string::npos, msg);
  BOOST_CHECK_THROW(from_tensor_slices({}, matrix()), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(from_tensors_yields_the_whole_element_once) {
  element e;
  e.features.push_back(matrix::Constant(3, 2, 7.0f));
  e.labels = matrix::Constant(3, 1, 1.0f);
  auto all = collect(from_tensors(e));
  BOOST_REQUIRE_EQUAL(all.size(), 1u);
  BOOST_TEST(same(all[0], e));
  BOOST_TEST(from_tensors(e).cardinality() == cardinality_info::known(1));
  element bad = e;
  bad.labels = matrix(2, 1);
  BOOST_CHECK_THROW(from_tensors(bad), std::invalid_argument);
}

namespace {

// n examples: input 0 two float features [i, -i], input 1 two 64-bit ids [2^40 + i,
// 2^62 + 3 i] (no float holds them), label [i].
element with_ids(int64_t n) {
  element e;
  e.features.push_back(matrix(n, 2));
  e.features.emplace_back(n, 0);
  e.ids.resize(2);
  e.ids[1].resize(n, 2);
  e.labels.resize(n, 1);
  for (int64_t i = 0; i < n; ++i) {
    e.features[0](i, 0) = static_cast<float>(i);
    e.features[0](i, 1) = -static_cast<float>(i);
    e.ids[1](i, 0) = (int64_t{1} << 40) + i;
    e.ids[1](i, 1) = (int64_t{1} << 62) + 3 * i;
    e.labels(i, 0) = static_cast<float>(i);
  }
  return e;
}

// Whether every row of `b` is example i of with_ids for the i its label names.
bool rows_agree(const element& b) {
  for (Eigen::Index r = 0; r < b.rows(); ++r) {
    auto i = static_cast<int64_t>(b.labels(r, 0));
    if (b.features[0](r, 0) != static_cast<float>(i) || b.features[1].cols() != 0 || !b.is_ids(1) ||
        b.is_ids(0) || b.ids[1](r, 0) != (int64_t{1} << 40) + i || b.ids[1](r, 1) != (int64_t{1} << 62) + 3 * i)
      return false;
  }
  return true;
}

}  // namespace

BOOST_AUTO_TEST_CASE(int64_ids_travel_with_their_rows_through_the_pipeline) {
  auto data = from_tensor_slices(with_ids(50));
  BOOST_TEST(data.describe().find("features [2, 2 ids]") != std::string::npos, data.describe());
  auto one = collect(data);
  BOOST_REQUIRE_EQUAL(one.size(), 50u);
  for (const auto& e : one) BOOST_TEST(rows_agree(e));
  // Shuffled, sharded, mapped, cached, batched: each row keeps its ids.
  auto piped = data.shard(2, 1).shuffle(16, 3).map([](element e) { return e; }).cache().batch(7);
  size_t rows = 0;
  std::set<float> seen;
  for (const auto& b : collect(piped)) {
    BOOST_TEST(rows_agree(b));
    for (Eigen::Index r = 0; r < b.rows(); ++r) seen.insert(b.labels(r, 0));
    rows += static_cast<size_t>(b.rows());
  }
  BOOST_TEST(rows == 25u);
  BOOST_TEST(seen.size() == 25u);
  // The ids count in the digest: one changed id changes it.
  auto a = one[3], b = one[3];
  b.ids[1](0, 1) += 1;
  BOOST_TEST(element_digest(a) != element_digest(b));
  BOOST_TEST(element_digest(a) == element_digest(one[3]));
}

BOOST_AUTO_TEST_CASE(elements_of_ids_and_of_floats_do_not_stack) {
  auto e = with_ids(2);
  element f = e;
  f.features[1] = matrix::Zero(2, 2);
  f.ids.clear();
  auto msg = error_of([&] { collect(from_tensors(e).concatenate(from_tensors(f)).batch(2)); });
  BOOST_TEST(msg.find("feature 1 is int64 ids in one element and floats in another") != std::string::npos, msg);
  element both = e;
  both.features[1] = matrix::Zero(2, 1);
  msg = error_of([&] { from_tensor_slices(both); });
  BOOST_TEST(msg.find("input 1 is given both as ids and as [2 x 1] floats") != std::string::npos, msg);
  // A map that gives an element's ids another row count: refused when batched.
  auto broken = from_tensor_slices(e).map([](element x) {
    x.ids[1].conservativeResize(2, 2);
    return x;
  });
  msg = error_of([&] { collect(broken.batch(2)); });
  BOOST_TEST(msg.find("cannot batch an element with 1 rows whose id input 1 has 2") != std::string::npos, msg);
  // An id input's float matrix may be left empty (0 x 0): it gets the ids' rows.
  element loose = e;
  loose.features[1] = matrix();
  BOOST_TEST(collect(from_tensor_slices(loose)).size() == 2u);
  std::swap(loose.features[0], loose.features[1]);  // ids first
  std::swap(loose.ids[0], loose.ids[1]);
  loose.ids.resize(1);
  BOOST_TEST(collect(from_tensor_slices(loose).batch(2)).at(0).ids[0].rows() == 2);
  element short_ids = e;
  short_ids.ids[1].conservativeResize(1, 2);
  msg = error_of([&] { from_tensor_slices(short_ids); });
  BOOST_TEST(msg.find("ids[1] is [1 x 2] but features[0] is [2 x 2]") != std::string::npos, msg);
}

BOOST_AUTO_TEST_CASE(a_generated_source_makes_element_i_from_i_when_read) {
  std::atomic<int> calls{0};
  auto gen = generate(
    1000000000,
    [&calls](uint64_t i) {
      ++calls;
      element e;
      e.features.emplace_back(1, 0);
      e.ids.resize(1);
      e.ids[0] = id_matrix::Constant(1, 1, static_cast<int64_t>(i * 7919));
      e.labels = matrix::Constant(1, 1, static_cast<float>(i % 2));
      return e;
    },
    "draws");
  BOOST_TEST(gen.cardinality() == cardinality_info::known(1000000000));
  BOOST_TEST(gen.describe().find("generated(draws, 1000000000 elements)") != std::string::npos, gen.describe());
  // A shard far into it reads only what it yields.
  auto part = collect(gen.shard(4, 3).skip(100000000).take(3));
  BOOST_REQUIRE_EQUAL(part.size(), 3u);
  BOOST_TEST(part[0].ids[0](0, 0) == static_cast<int64_t>((4 * 100000000 + 3) * 7919ull));
  BOOST_TEST(part[2].ids[0](0, 0) == static_cast<int64_t>((4 * 100000002 + 3) * 7919ull));
  BOOST_TEST(calls.load() == 3);
  // The same element on every read.
  BOOST_TEST(same(collect(gen.take(5).batch(5)), collect(gen.take(5).batch(5))));
  // An element whose matrices disagree on their rows is refused where it is read, named.
  auto ragged = generate(3, [](uint64_t i) {
    element e;
    e.features.push_back(matrix::Zero(1, 2));
    e.labels = matrix::Zero(i == 1 ? 2 : 1, 1);
    return e;
  });
  auto msg = error_of([&] { collect(ragged.batch(3)); });
  BOOST_TEST(msg.find("generated(fn, 3 elements): element 1: labels are [2 x 1] but features[0] is [1 x 2]") !=
               std::string::npos,
             msg);
  BOOST_CHECK_THROW(generate(-1, [](uint64_t) { return element{}; }), std::invalid_argument);
  BOOST_CHECK_THROW(generate(3, nullptr), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(default_dataset_is_empty) {
  dataset d;
  BOOST_TEST(d.cardinality() == cardinality_info::known(0));
  BOOST_TEST(!d.iterate()->next());
}

BOOST_AUTO_TEST_CASE(end_of_data_repeats_and_position_counts_elements) {
  auto it = numbers(2).iterate();
  BOOST_TEST(it->position() == 0u);
  BOOST_TEST(it->next().has_value());
  BOOST_TEST(it->next().has_value());
  BOOST_TEST(it->position() == 2u);
  BOOST_TEST(!it->next());
  BOOST_TEST(!it->next());
  BOOST_TEST(it->position() == 2u);
}

BOOST_AUTO_TEST_CASE(iterator_outlives_its_dataset_handle) {
  std::unique_ptr<iterator> it;
  {
    auto d = numbers(5).map([](element e) { return e; }).batch(2);
    it = d.iterate();
  }
  size_t n = 0;
  while (it->next()) ++n;
  BOOST_TEST(n == 3u);
}

BOOST_AUTO_TEST_CASE(concatenate_appends_and_seeks) {
  auto d = numbers(3).concatenate(numbers(2));
  BOOST_TEST(ids(d) == (std::vector<float>{0, 1, 2, 0, 1}));
  BOOST_TEST(ids(d, 0, 2) == (std::vector<float>{2, 0, 1}));
  BOOST_TEST(d.cardinality() == cardinality_info::known(5));
  // The same through the sequential path.
  auto seq = numbers(3).filter([](const element&) { return true; }).concatenate(numbers(2));
  BOOST_TEST(ids(seq, 0, 2) == (std::vector<float>{2, 0, 1}));
  BOOST_TEST(seq.cardinality().kind == cardinality_kind::unknown);
  BOOST_TEST(numbers(3).concatenate(numbers(1).repeat()).cardinality().is_infinite());
}

BOOST_AUTO_TEST_CASE(from_files_concatenates_and_reads_each_file_once_lazily) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  auto d = from_files({"a", "b", "c"}, [calls](const std::string& f) {
    ++*calls;
    return numbers(f == "a" ? 2 : f == "b" ? 1 : 3);
  });
  BOOST_TEST(*calls == 0);
  BOOST_TEST(d.describe() == "files(a, b, c)");
  BOOST_TEST(d.cardinality() == cardinality_info::known(6));
  BOOST_TEST(*calls == 3);
  BOOST_TEST(ids(d.batch(4)) == (std::vector<float>{0, 1, 0, 0, 1, 2}));
  BOOST_TEST(ids(d.shuffle(6, 3)).size() == 6u);
  BOOST_TEST(*calls == 3);
  BOOST_CHECK_THROW(from_files({}, [](const std::string&) { return dataset(); }),
                    std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(from_files_reader_errors_surface_when_iterating) {
  auto d = from_files({"x"}, [](const std::string& f) -> dataset {
    throw file_error(f, "cannot open: no such file");
  });
  auto msg = error_of([&] { d.iterate()->next(); });
  BOOST_TEST(msg == "x: cannot open: no such file");
}

BOOST_AUTO_TEST_CASE(describe_names_the_pipeline) {
  auto d = numbers(10).shuffle(10, 1).batch(4).prefetch(2);
  BOOST_TEST(d.describe() ==
             "tensor_slices(10 rows, features [2], labels 1) -> shuffle(10, seed=1) -> batch(4) "
             "-> prefetch(2)");
  BOOST_TEST(numbers(2).concatenate(numbers(3)).take(4).describe() ==
             "concatenate(tensor_slices(2 rows, features [2], labels 1), tensor_slices(3 rows, "
             "features [2], labels 1)) -> take(4)");
}

BOOST_AUTO_TEST_SUITE_END()
