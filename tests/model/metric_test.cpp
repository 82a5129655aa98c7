// Metrics: accuracy for multi-class and binary predictions, AUC on rankings of known
// quality, mean_loss weighting, and that merging states equals computing over all batches.

#include <boost/test/unit_test.hpp>

#include "gradient_check.hpp"

#include <actortrain/model/metric.hpp>

#include <cmath>
#include <stdexcept>
#include <vector>

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

// A binary problem of n examples: labels 0/1 and logits = separation * (label - 0.5) + noise.
struct binary_set {
  matrix logits;
  matrix labels;
};
binary_set make_binary(Eigen::Index n, float separation, uint64_t seed) {
  rng g{seed};
  binary_set s{matrix(n, 1), matrix(n, 1)};
  for (Eigen::Index r = 0; r < n; ++r) {
    s.labels(r, 0) = g.uniform() < 0.4f ? 1.0f : 0.0f;
    s.logits(r, 0) = separation * (s.labels(r, 0) - 0.5f) + g.normal();
  }
  return s;
}

// The exact ROC AUC: the fraction of (positive, negative) pairs ranked right, ties half.
double exact_auc(const binary_set& s) {
  double right = 0, pairs = 0;
  for (Eigen::Index i = 0; i < s.labels.rows(); ++i)
    for (Eigen::Index j = 0; j < s.labels.rows(); ++j)
      if (s.labels(i, 0) > 0.5f && s.labels(j, 0) < 0.5f) {
        pairs += 1;
        right += s.logits(i, 0) > s.logits(j, 0) ? 1.0 : s.logits(i, 0) == s.logits(j, 0) ? 0.5 : 0.0;
      }
  return right / pairs;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(model_metric)

BOOST_AUTO_TEST_CASE(accuracy_compares_the_argmax_with_class_ids_or_one_hot_labels) {
  auto m = accuracy();
  BOOST_TEST(m->name() == "accuracy");
  BOOST_TEST(m->result() == 0.0);
  const matrix pred = from_rows({{0.1f, 0.7f, 0.2f}, {2, 1, 0}, {0, 0, 5}, {1, 3, 2}});
  m->update(pred, from_rows({{1}, {0}, {1}, {1}}));
  BOOST_TEST(m->result() == 0.75, boost::test_tools::tolerance(1e-12));
  auto hot = accuracy();
  hot->update(pred, from_rows({{0, 1, 0}, {1, 0, 0}, {0, 1, 0}, {0, 0, 1}}));
  BOOST_TEST(hot->result() == 0.5, boost::test_tools::tolerance(1e-12));
  m->reset();
  BOOST_TEST(m->result() == 0.0);
  BOOST_CHECK_THROW(m->update(pred, matrix::Zero(4, 2)), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(accuracy_of_a_binary_logit_thresholds_at_zero) {
  auto m = accuracy();
  m->update(from_rows({{2}, {-1}, {0.5f}, {-3}}), from_rows({{1}, {0}, {0}, {0}}));
  BOOST_TEST(m->result() == 0.75, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(auc_is_one_for_a_perfect_ranking_and_zero_for_a_reversed_one) {
  const auto s = make_binary(1000, 20.0f, 1);  // classes 20 apart with unit noise
  auto m = auc();
  BOOST_TEST(m->name() == "auc");
  m->update(s.logits, s.labels);
  BOOST_TEST(m->result() > 0.999);
  auto rev = auc();
  rev->update(-s.logits, s.labels);
  BOOST_TEST(rev->result() < 0.001);
}

BOOST_AUTO_TEST_CASE(auc_is_one_half_for_a_random_ranking) {
  const auto s = make_binary(4000, 0.0f, 2);
  auto m = auc();
  m->update(s.logits, s.labels);
  BOOST_TEST(m->result() == 0.5, boost::test_tools::tolerance(0.06));
}

BOOST_AUTO_TEST_CASE(auc_integrates_the_roc_points_by_the_trapezoid_rule) {
  // Three thresholds (-eps, 0.5, 1 + eps): sigmoid <= 0.5 is bucket 0, above it bucket 1.
  // Positives: one low, two high; negatives: two low, one high. ROC points (0, 0),
  // (1/3, 2/3), (1, 1): area 1/9 + 5/9 = 2/3.
  auto m = auc(3);
  m->update(from_rows({{-1}, {2}, {3}, {-2}, {-3}, {1}}), from_rows({{1}, {1}, {1}, {0}, {0}, {0}}));
  BOOST_TEST(m->result() == 2.0 / 3.0, boost::test_tools::tolerance(1e-12));
  // Everything in one bucket: a tie, one half.
  auto tie = auc();
  tie->update(matrix::Zero(4, 1), from_rows({{1}, {0}, {1}, {0}}));
  BOOST_TEST(tie->result() == 0.5, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(auc_is_close_to_the_exact_pairwise_auc) {
  const auto s = make_binary(1500, 1.5f, 3);
  auto m = auc(1000);
  m->update(s.logits, s.labels);
  const double exact = exact_auc(s);
  BOOST_TEST(exact > 0.7);
  BOOST_TEST(exact < 0.95);
  BOOST_TEST(std::abs(m->result() - exact) < 5e-3);
  auto coarse = auc(200);
  coarse->update(s.logits, s.labels);
  BOOST_TEST(std::abs(coarse->result() - exact) < 2e-2);
  auto one_class = auc();
  one_class->update(from_rows({{1}, {2}}), from_rows({{1}, {1}}));
  BOOST_TEST(one_class->result() == 0.0);
  BOOST_CHECK_THROW(auc(1), std::invalid_argument);
  BOOST_CHECK_THROW(m->update(matrix::Zero(3, 2), matrix::Zero(3, 1)), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(merged_states_equal_the_metric_over_all_batches) {
  const auto s = make_binary(600, 1.0f, 4);
  const matrix multi_pred = random_matrix(600, 4, 5);
  matrix multi_ids(600, 1);
  for (Eigen::Index r = 0; r < 600; ++r) multi_ids(r, 0) = static_cast<float>(r % 4);
  std::vector<metric_ptr> kinds;
  kinds.push_back(accuracy());
  kinds.push_back(auc());
  kinds.push_back(mean_loss(binary_cross_entropy()));
  for (const auto& proto : kinds) {
    BOOST_TEST_CONTEXT(proto->name()) {
      auto all = proto->clone();
      auto a = proto->clone();
      auto b = proto->clone();
      // Batches of 100 and 50 rows: a takes the first 250 rows, b the rest.
      for (Eigen::Index start = 0; start < 600;) {
        const Eigen::Index size = start < 250 ? (start + 100 <= 250 ? 100 : 250 - start) : 50;
        const matrix p = s.logits.middleRows(start, size);
        const matrix y = s.labels.middleRows(start, size);
        all->update(p, y);
        (start < 250 ? a : b)->update(p, y);
        start += size;
      }
      a->merge(b->state());
      BOOST_TEST(a->result() == all->result(), boost::test_tools::tolerance(1e-12));
      const auto sa = a->state(), sall = all->state();
      BOOST_REQUIRE(sa.size() == sall.size());
      for (size_t i = 0; i < sa.size(); ++i) BOOST_TEST(sa[i] == sall[i], boost::test_tools::tolerance(1e-12));
      BOOST_TEST(a->result() != 0.0);
      BOOST_CHECK_THROW(a->merge(std::vector<double>(3, 0.0)), std::invalid_argument);
    }
  }
  // Multi-class accuracy merges the same way.
  auto all = accuracy(), a = accuracy(), b = accuracy();
  all->update(multi_pred, multi_ids);
  a->update(multi_pred.topRows(100), multi_ids.topRows(100));
  b->update(multi_pred.bottomRows(500), multi_ids.bottomRows(500));
  a->merge(b->state());
  BOOST_TEST(a->result() == all->result(), boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(mean_loss_weights_batches_by_their_example_counts) {
  auto m = mean_loss(mean_squared_error(), "mse");
  BOOST_TEST(m->name() == "mse");
  BOOST_TEST(mean_loss(mean_squared_error())->name() == "loss");
  // Batch of 2 with loss 1 (errors of 1) and a batch of 6 with loss 4 (errors of 2).
  m->update(matrix::Ones(2, 3), matrix::Zero(2, 3));
  m->update(matrix::Constant(6, 3, 2.0f), matrix::Zero(6, 3));
  BOOST_TEST(m->result() == (2 * 1.0 + 6 * 4.0) / 8, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(m->state() == (std::vector<double>{26.0, 8.0}), boost::test_tools::per_element());
  auto fresh = m->clone();
  BOOST_TEST(fresh->name() == "mse");
  BOOST_TEST(fresh->result() == 0.0);
  m->reset();
  BOOST_TEST(m->result() == 0.0);
  BOOST_CHECK_THROW(mean_loss(nullptr), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()
