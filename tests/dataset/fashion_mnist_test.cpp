// Loads the real Fashion-MNIST training set (package dataset-fashion-mnist, installed by
// tools/setup). Skipped with a warning when the files are absent.

#include "test_util.hpp"

#include <boost/test/unit_test.hpp>

#include <actortrain/dataset/fashion_mnist.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>

using namespace actortrain::dataset;
using namespace actortrain::dataset::test;

namespace {

const std::string dir = "/usr/share/datasets/fashion-mnist/";

struct files_present {
  boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) const {
    boost::test_tools::assertion_result r =
        std::filesystem::exists(dir + "train-images-idx3-ubyte.gz") &&
        std::filesystem::exists(dir + "train-labels-idx1-ubyte.gz");
    r.message() << "Fashion-MNIST not found in " << dir << " (run tools/setup)";
    return r;
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(fashion_mnist)

BOOST_AUTO_TEST_CASE(training_set_loads_60000_images_in_unit_range_with_class_labels,
                     *boost::unit_test::precondition(files_present())) {
  auto d = from_idx(dir + "train-images-idx3-ubyte.gz", dir + "train-labels-idx1-ubyte.gz",
                    1.0f / 255.0f);
  BOOST_TEST(d.cardinality() == cardinality_info::known(60000));
  auto all = collect(d.batch(60000));
  BOOST_REQUIRE_EQUAL(all.size(), 1u);
  const auto& x = all[0].features.at(0);
  const auto& y = all[0].labels;
  BOOST_TEST(x.rows() == 60000);
  BOOST_TEST(x.cols() == 784);
  // std::minmax_element rather than Eigen's minCoeff: GCC 12 warns falsely about the
  // latter's AVX-512 code.
  const auto [xmin, xmax] = std::minmax_element(x.data(), x.data() + x.size());
  BOOST_TEST(*xmin >= 0.0f);
  BOOST_TEST(*xmax <= 1.0f);
  BOOST_TEST(*xmax > 0.99f);
  BOOST_TEST(y.rows() == 60000);
  BOOST_TEST(y.cols() == 1);
  const auto [ymin, ymax] = std::minmax_element(y.data(), y.data() + y.size());
  BOOST_TEST(*ymin == 0.0f);
  BOOST_TEST(*ymax == 9.0f);
  for (Eigen::Index i = 0; i < y.rows(); ++i)
    if (y(i, 0) != static_cast<float>(static_cast<int>(y(i, 0)))) BOOST_FAIL("non-integer label");
  // Fashion-MNIST is balanced: 6000 examples per class.
  std::vector<int> per_class(10, 0);
  for (Eigen::Index i = 0; i < y.rows(); ++i) ++per_class[static_cast<size_t>(y(i, 0))];
  BOOST_TEST(per_class == std::vector<int>(10, 6000), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(training_pipeline_batches_a_shuffled_epoch,
                     *boost::unit_test::precondition(files_present())) {
  auto d = from_idx(dir + "train-images-idx3-ubyte.gz", dir + "train-labels-idx1-ubyte.gz",
                    1.0f / 255.0f)
               .shuffle(60000, 1)
               .batch(128)
               .prefetch(2);
  BOOST_TEST(d.describe() ==
             "idx(train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz) -> shuffle(60000, "
             "seed=1) -> batch(128) -> prefetch(2)");
  BOOST_TEST(d.cardinality() == cardinality_info::known(469));
  int64_t rows = 0, batches = 0;
  auto it = d.iterate(2);
  while (auto b = it->next()) {
    rows += b->rows();
    ++batches;
  }
  BOOST_TEST(rows == 60000);
  BOOST_TEST(batches == 469);
}

// The dataset keeps the images as bytes and scales the rows it gathers: they must be the
// floats load_fashion_mnist gives (and from_idx gave when it held floats), bit for bit,
// or every seed's training would change.
BOOST_AUTO_TEST_CASE(dataset_rows_are_the_loaded_arrays_bit_for_bit,
                     *boost::unit_test::precondition(files_present())) {
  auto arrays = load_fashion_mnist(split::train, dir);
  auto all = collect(actortrain::dataset::fashion_mnist(split::train, dir).batch(60000));
  BOOST_REQUIRE_EQUAL(all.size(), 1u);
  const auto& x = all[0].features.at(0);
  BOOST_REQUIRE_EQUAL(x.rows(), arrays.images.rows());
  BOOST_REQUIRE_EQUAL(x.cols(), arrays.images.cols());
  BOOST_TEST(std::memcmp(x.data(), arrays.images.data(), sizeof(float) * static_cast<size_t>(x.size())) == 0);
  BOOST_TEST(std::memcmp(all[0].labels.data(), arrays.labels.data(),
                         sizeof(float) * static_cast<size_t>(arrays.labels.size())) == 0);
}

BOOST_AUTO_TEST_SUITE_END()
