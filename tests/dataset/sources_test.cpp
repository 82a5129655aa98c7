#include "test_util.hpp"

#include <boost/test/unit_test.hpp>

#include <atomic>

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
