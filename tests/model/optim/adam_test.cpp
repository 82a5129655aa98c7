// Adam with Keras's bias correction and epsilon-hat placement, and lazy Adam on rows.
#include <actortrain/model/optim/adam.hpp>

#include <boost/test/unit_test.hpp>

#include <cmath>
#include <vector>

using namespace actortrain::model;

namespace {

/// The update of adam.hpp in double precision, one weight at a time.
struct reference_adam {
  double lr, b1, b2, eps;
  double m = 0, v = 0, w;
  int t = 0;
  void step(double g) {
    ++t;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    const double lr_t = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
    w -= lr_t * m / (std::sqrt(v) + eps);
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(optim_adam)

BOOST_AUTO_TEST_CASE(defaults_are_keras_defaults) {
  adam opt;
  BOOST_TEST(opt.describe() == "adam(learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-07)");
  BOOST_TEST(opt.slot_names() == (std::vector<std::string>{"m", "v"}));
}

BOOST_AUTO_TEST_CASE(applies_bias_correction_on_first_step) {
  // t = 1: m = 0.1 g, v = 0.001 g^2, lr_t = lr sqrt(0.001) / 0.1, so the step is
  // lr * |g| / (|g| + eps / sqrt(0.001)) ~ lr * sign(g) whatever the gradient's scale.
  adam opt;
  std::vector<float> w{1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
  const std::vector<float> g{0.5f, -2.0f, 100.0f, -1e-2f, 1e-3f};
  auto s = opt.make_slots(w.size());
  opt.apply_dense(w.data(), g.data(), w.size(), s);
  for (size_t i = 0; i < w.size(); ++i) {
    const double moved = 1.0 - w[i];
    const double expected = 0.001 * (g[i] > 0 ? 1.0 : -1.0);
    BOOST_TEST(moved == expected, boost::test_tools::tolerance(0.004));  // 1e-3 gradient: 0.3% short
  }
  BOOST_TEST(s.iterations == 1);
  BOOST_TEST(s.slots[0][0] == 0.05f, boost::test_tools::tolerance(1e-6f));        // m
  BOOST_TEST(s.slots[1][0] == 0.00025f, boost::test_tools::tolerance(1e-5f));     // v
}

BOOST_AUTO_TEST_CASE(two_steps_match_hand_computation) {
  // lr = 0.01, w0 = 1, g1 = 0.5, g2 = -0.2:
  //  t=1: m = 0.05, v = 0.00025, lr_t = 0.01 sqrt(0.001)/0.1 = 0.0031622777,
  //       w1 = 1 - 0.0031622777 * 0.05 / (0.0158113883 + 1e-7) = 0.9900000632
  //  t=2: m = 0.045 - 0.02 = 0.025, v = 0.00024975 + 0.00004 = 0.00028975,
  //       lr_t = 0.01 sqrt(1 - 0.998001) / (1 - 0.81) = 0.0023531673,
  //       w2 = w1 - 0.0023531673 * 0.025 / (0.0170220445 + 1e-7) = 0.9865440251
  adam_options o;
  o.learning_rate = 0.01;
  adam opt(o);
  float w = 1.0f;
  auto s = opt.make_slots(1);
  const float g1 = 0.5f, g2 = -0.2f;
  opt.apply_dense(&w, &g1, 1, s);
  BOOST_TEST(w == 0.9900000632f, boost::test_tools::tolerance(1e-6f));
  opt.apply_dense(&w, &g2, 1, s);
  BOOST_TEST(w == 0.9865440251f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(s.slots[0][0] == 0.025f, boost::test_tools::tolerance(1e-5f));
  BOOST_TEST(s.slots[1][0] == 0.00028975f, boost::test_tools::tolerance(1e-4f));

  reference_adam ref{0.01, 0.9, 0.999, 1e-7, 0, 0, 1.0};
  ref.step(0.5);
  ref.step(-0.2);
  BOOST_TEST(static_cast<double>(w) == ref.w, boost::test_tools::tolerance(1e-6));
}

BOOST_AUTO_TEST_CASE(many_dense_steps_track_the_double_reference) {
  adam opt;
  const size_t n = 1000;  // long enough for the vectorized loop body and its tail
  std::vector<float> w(n, 0.5f);
  std::vector<reference_adam> ref(n, reference_adam{0.001, 0.9, 0.999, 1e-7, 0, 0, 0.5});
  auto s = opt.make_slots(n);
  std::vector<float> g(n);
  for (int step = 0; step < 20; ++step) {
    for (size_t i = 0; i < n; ++i) g[i] = std::sin(0.37f * static_cast<float>(i * 7 + step));
    opt.apply_dense(w.data(), g.data(), n, s);
    for (size_t i = 0; i < n; ++i) ref[i].step(g[i]);
  }
  for (size_t i = 0; i < n; i += 37)
    BOOST_TEST(static_cast<double>(w[i]) == ref[i].w, boost::test_tools::tolerance(1e-5));
}

BOOST_AUTO_TEST_CASE(lazy_rows_leave_untouched_rows_and_moments_alone) {
  adam opt;
  std::vector<float> block{1, 2, 3, 4, 5, 6};  // 3 rows x 2
  auto s = opt.make_slots(block.size());
  const std::vector<int64_t> rows{0, 2};
  const std::vector<float> g{0.5f, -0.5f, 1.0f, 2.0f};
  opt.apply_rows(block.data(), 2, rows.data(), 2, g.data(), s);
  opt.apply_rows(block.data(), 2, rows.data(), 2, g.data(), s);
  BOOST_TEST(block[2] == 3.0f);
  BOOST_TEST(block[3] == 4.0f);
  BOOST_TEST(s.slots[0][2] == 0.0f);
  BOOST_TEST(s.slots[1][3] == 0.0f);
  // A touched row equals a dense block of that row alone after the same steps.
  std::vector<float> row0{1, 2};
  auto rs = opt.make_slots(2);
  opt.apply_dense(row0.data(), g.data(), 2, rs);
  opt.apply_dense(row0.data(), g.data(), 2, rs);
  BOOST_TEST(block[0] == row0[0], boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(block[1] == row0[1], boost::test_tools::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(empty_row_update_advances_the_step_count) {
  adam opt;
  std::vector<float> block{1, 2};
  auto s = opt.make_slots(2);
  opt.apply_rows(block.data(), 2, nullptr, 0, nullptr, s);
  BOOST_TEST(s.iterations == 1);
  BOOST_TEST(block[0] == 1.0f);
}

BOOST_AUTO_TEST_CASE(rejects_rows_outside_the_block_without_changing_anything) {
  adam opt;
  std::vector<float> block{1, 2, 3, 4};
  auto s = opt.make_slots(4);
  const std::vector<int64_t> rows{0, 2};
  const std::vector<float> g{1, 1, 1, 1};
  BOOST_CHECK_THROW(opt.apply_rows(block.data(), 2, rows.data(), 2, g.data(), s), std::out_of_range);
  BOOST_TEST(s.iterations == 0);
  BOOST_TEST(block[0] == 1.0f);
  const std::vector<int64_t> negative{-1};
  BOOST_CHECK_THROW(opt.apply_rows(block.data(), 2, negative.data(), 1, g.data(), s), std::out_of_range);
}

BOOST_AUTO_TEST_CASE(rejects_betas_outside_unit_interval) {
  adam_options o;
  o.beta_1 = 1.0;
  BOOST_CHECK_THROW(adam{o}, std::invalid_argument);
  adam opt;
  try {
    opt.set_hyperparam("beta_2", -0.1);
    BOOST_FAIL("no throw");
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    BOOST_TEST(what.find("adam") != std::string::npos);
    BOOST_TEST(what.find("beta_2") != std::string::npos);
  }
  BOOST_TEST(opt.hyperparam("beta_2") == 0.999);
}

BOOST_AUTO_TEST_SUITE_END()
