// Losses: values against hand computations, gradients against finite differences,
// stability at large logits, the two label forms of softmax cross-entropy, and errors.

#include <boost/test/unit_test.hpp>

#include "gradient_check.hpp"

#include <actortrain/model/loss.hpp>

#include <cmath>
#include <stdexcept>
#include <string>

using namespace actortrain::model;
using namespace actortrain::model::testing;

namespace {

matrix from_rows(std::initializer_list<std::initializer_list<float>> rows) {
  matrix m(static_cast<Eigen::Index>(rows.size()), static_cast<Eigen::Index>(rows.begin()->size()));
  Eigen::Index r = 0;
  for (auto row : rows) {
    Eigen::Index c = 0;
    for (float v : row) m(r, c++) = v;
    ++r;
  }
  return m;
}

template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Finite differences of compute() against the gradient it reports.
gradient_check_result check_loss(const loss& l, matrix pred, const matrix& labels) {
  matrix d;
  l.compute(pred, labels, &d);
  return check_gradients([&] { return l.compute(pred, labels, nullptr); }, {{"pred", &pred, d}});
}

// Class ids in [0, k) for n rows, and the same labels one-hot.
matrix class_ids(Eigen::Index n, Eigen::Index k, uint64_t seed) {
  rng g{seed};
  matrix ids(n, 1);
  for (Eigen::Index r = 0; r < n; ++r) ids(r, 0) = static_cast<float>(g.below(static_cast<uint64_t>(k)));
  return ids;
}
matrix one_hot(const matrix& ids, Eigen::Index k) {
  matrix m = matrix::Zero(ids.rows(), k);
  for (Eigen::Index r = 0; r < ids.rows(); ++r) m(r, static_cast<Eigen::Index>(ids(r, 0))) = 1.0f;
  return m;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(model_loss)

BOOST_AUTO_TEST_CASE(mean_squared_error_is_the_mean_over_all_elements) {
  auto l = mean_squared_error();
  BOOST_TEST(l->describe() == "mean_squared_error");
  const matrix p = from_rows({{1, 2}, {3, 4}});
  const matrix y = from_rows({{0, 2}, {1, 1}});
  matrix d;
  // Errors [1, 0; 2, 3]: squares sum to 14 over 4 elements.
  BOOST_TEST(l->compute(p, y, &d) == 3.5, boost::test_tools::tolerance(1e-12));
  BOOST_TEST((d - from_rows({{0.5f, 0}, {1, 1.5f}})).cwiseAbs().maxCoeff() < 1e-7f);
  matrix per;
  l->per_example(p, y, per);
  BOOST_TEST(per.rows() == 2);
  BOOST_TEST(per.cols() == 1);
  BOOST_TEST(per(0, 0) == 0.5f);
  BOOST_TEST(per(1, 0) == 6.5f);
}

BOOST_AUTO_TEST_CASE(softmax_cross_entropy_matches_hand_computation) {
  auto l = softmax_cross_entropy();
  BOOST_TEST(l->describe() == "softmax_cross_entropy");
  const matrix z = from_rows({{1, 2, 3}, {0, 0, 0}});
  const matrix ids = from_rows({{2}, {0}});
  const double lse0 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  const double l0 = lse0 - 3.0;
  const double l1 = std::log(3.0);
  matrix d;
  BOOST_TEST(l->compute(z, ids, &d) == (l0 + l1) / 2, boost::test_tools::tolerance(1e-6));
  // d = (softmax - one_hot) / n.
  BOOST_TEST(d(0, 2) == (std::exp(3.0 - lse0) - 1.0) / 2, boost::test_tools::tolerance(1e-5));
  BOOST_TEST(d(1, 1) == 1.0 / 6, boost::test_tools::tolerance(1e-5));
  matrix per;
  l->per_example(z, ids, per);
  BOOST_TEST(per(0, 0) == l0, boost::test_tools::tolerance(1e-5));
  BOOST_TEST(per(1, 0) == l1, boost::test_tools::tolerance(1e-5));
}

BOOST_AUTO_TEST_CASE(sparse_and_one_hot_labels_agree) {
  auto l = softmax_cross_entropy();
  const matrix z = random_matrix(16, 5, 1, -4.0f, 4.0f);
  const matrix ids = class_ids(16, 5, 2);
  matrix d_ids, d_hot;
  const double a = l->compute(z, ids, &d_ids);
  const double b = l->compute(z, one_hot(ids, 5), &d_hot);
  BOOST_TEST(a == b, boost::test_tools::tolerance(1e-6));
  BOOST_TEST((d_ids - d_hot).cwiseAbs().maxCoeff() < 1e-6f);
  matrix p_ids, p_hot;
  l->per_example(z, ids, p_ids);
  l->per_example(z, one_hot(ids, 5), p_hot);
  BOOST_TEST((p_ids - p_hot).cwiseAbs().maxCoeff() < 1e-5f);
  BOOST_TEST(p_ids.cast<double>().mean() == a, boost::test_tools::tolerance(1e-5));
}

BOOST_AUTO_TEST_CASE(gradients_match_finite_differences) {
  const matrix z = random_matrix(6, 4, 3, -2.0f, 2.0f);
  const matrix ids = class_ids(6, 4, 4);
  auto r = check_loss(*softmax_cross_entropy(), z, ids);
  BOOST_TEST(r.passed, r.worst);
  // Soft labels, rows not summing to one: the gradient keeps its sum(y) factor.
  const matrix soft = random_matrix(6, 4, 5, 0.0f, 1.0f);
  r = check_loss(*softmax_cross_entropy(), z, soft);
  BOOST_TEST(r.passed, r.worst);
  r = check_loss(*mean_squared_error(), z, random_matrix(6, 4, 6));
  BOOST_TEST(r.passed, r.worst);
  r = check_loss(*binary_cross_entropy(), z, soft);
  BOOST_TEST(r.passed, r.worst);
  BOOST_TEST(r.checked == 24);
}

BOOST_AUTO_TEST_CASE(softmax_cross_entropy_is_finite_for_logits_of_1000) {
  auto l = softmax_cross_entropy();
  const matrix z = from_rows({{1000, 0, -1000}, {1000, 1000, 1000}});
  const matrix ids = from_rows({{1}, {0}});
  matrix d;
  const double v = l->compute(z, ids, &d);
  BOOST_TEST(std::isfinite(v));
  // Row 0: lse = 1000, loss 1000; row 1: log 3.
  BOOST_TEST(v == (1000.0 + std::log(3.0)) / 2, boost::test_tools::tolerance(1e-5));
  BOOST_TEST(d.allFinite());
  BOOST_TEST(d(0, 0) == 0.5f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(d(0, 1) == -0.5f, boost::test_tools::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(binary_cross_entropy_matches_the_stable_formula) {
  auto l = binary_cross_entropy();
  BOOST_TEST(l->describe() == "binary_cross_entropy");
  const matrix x = from_rows({{0}, {2}, {1000}, {-1000}});
  const matrix z = from_rows({{1}, {0}, {1}, {1}});
  matrix d;
  const double want = (std::log(2.0) + 2.0 + std::log1p(std::exp(-2.0)) + 0.0 + 1000.0) / 4;
  BOOST_TEST(l->compute(x, z, &d) == want, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(d.allFinite());
  BOOST_TEST(d(0, 0) == -0.5f / 4, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(d(3, 0) == -1.0f / 4, boost::test_tools::tolerance(1e-6f));
  matrix per;
  l->per_example(x, z, per);
  BOOST_TEST(per(2, 0) == 0.0f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(per(3, 0) == 1000.0f, boost::test_tools::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(class_labels_are_validated_naming_the_row) {
  auto l = softmax_cross_entropy();
  const matrix z = random_matrix(3, 4, 1);
  for (float bad : {4.0f, -1.0f, 1.5f, std::nanf("")}) {
    BOOST_TEST_CONTEXT("label " << bad) {
      matrix ids = from_rows({{0}, {1}, {2}});
      ids(1, 0) = bad;
      auto msg = error_of([&] { l->compute(z, ids, nullptr); });
      BOOST_TEST(contains(msg, "row 1"), msg);
      BOOST_TEST(contains(msg, fmt::format("{}", bad)), msg);
      matrix per;
      BOOST_CHECK_THROW(l->per_example(z, ids, per), std::invalid_argument);
    }
  }
}

BOOST_AUTO_TEST_CASE(labels_that_do_not_fit_are_rejected_naming_both_shapes) {
  const matrix z = random_matrix(3, 4, 1);
  const matrix two_cols = matrix::Zero(3, 2);
  for (const auto& l : {softmax_cross_entropy(), mean_squared_error(), binary_cross_entropy()}) {
    BOOST_TEST_CONTEXT(l->describe()) {
      auto msg = error_of([&] { l->compute(z, two_cols, nullptr); });
      BOOST_TEST(contains(msg, "[3 x 4]"), msg);
      BOOST_TEST(contains(msg, "[3 x 2]"), msg);
    }
  }
  const matrix short_ids = matrix::Zero(2, 1);
  BOOST_CHECK_THROW(softmax_cross_entropy()->compute(z, short_ids, nullptr), std::invalid_argument);
  const matrix out_of_range = matrix::Constant(3, 4, 1.5f);
  auto msg = error_of([&] { binary_cross_entropy()->compute(z, out_of_range, nullptr); });
  BOOST_TEST(contains(msg, "row 0"), msg);
}

BOOST_AUTO_TEST_CASE(compute_reuses_a_gradient_buffer_of_the_right_shape) {
  auto l = softmax_cross_entropy();
  const matrix z = random_matrix(128, 10, 1);
  const matrix ids = class_ids(128, 10, 2);
  matrix d(128, 10);
  const float* before = d.data();
  l->compute(z, ids, &d);
  BOOST_TEST(d.data() == before);
}

BOOST_AUTO_TEST_SUITE_END()
