// RMSprop: one step by hand in the plain, momentum and centered forms; fixed slots.
#include <actortrain/model/optim/rmsprop.hpp>

#include <boost/test/unit_test.hpp>

#include <cmath>
#include <vector>

using namespace actortrain::model;

namespace {

rmsprop_options options(double momentum, bool centered) {
  rmsprop_options o;
  o.learning_rate = 0.01;
  o.momentum = momentum;
  o.centered = centered;
  return o;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(optim_rmsprop)

BOOST_AUTO_TEST_CASE(defaults_are_keras_defaults) {
  rmsprop opt;
  BOOST_TEST(opt.describe() ==
             "rmsprop(learning_rate=0.001, rho=0.9, momentum=0, epsilon=1e-07, centered=false)");
  BOOST_TEST(opt.slot_names() == std::vector<std::string>{"velocity"});
}

BOOST_AUTO_TEST_CASE(one_step_matches_hand_computation) {
  // v = 0.1 g^2 = 0.025 for g = 0.5; w = 1 - 0.01 * 0.5 / sqrt(0.025 + 1e-7) = 0.96837743
  rmsprop opt(options(0.0, false));
  float w = 1.0f;
  const float g = 0.5f;
  auto s = opt.make_slots(1);
  opt.apply_dense(&w, &g, 1, s);
  BOOST_TEST(s.slots[0][0] == 0.025f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(w == 1.0 - 0.005 / std::sqrt(0.0250001), boost::test_tools::tolerance(1e-6));
  BOOST_TEST(w == 0.96837743f, boost::test_tools::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(momentum_accumulates_the_scaled_step) {
  // Step 1 as above: mom = inc1 = 0.0316226; step 2 with g = 0.5 again:
  // v = 0.9 * 0.025 + 0.025 = 0.0475, inc2 = 0.005 / sqrt(0.0475001), mom = 0.9 inc1 + inc2.
  rmsprop opt(options(0.9, false));
  BOOST_TEST(opt.slot_names() == (std::vector<std::string>{"velocity", "momentum"}));
  float w = 1.0f;
  const float g = 0.5f;
  auto s = opt.make_slots(1);
  opt.apply_dense(&w, &g, 1, s);
  opt.apply_dense(&w, &g, 1, s);
  const double inc1 = 0.005 / std::sqrt(0.0250001);
  const double inc2 = 0.005 / std::sqrt(0.0475001);
  const double mom = 0.9 * inc1 + inc2;
  BOOST_TEST(s.slots[1][0] == mom, boost::test_tools::tolerance(1e-5));
  BOOST_TEST(w == 1.0 - inc1 - mom, boost::test_tools::tolerance(1e-6));
}

BOOST_AUTO_TEST_CASE(centered_divides_by_the_variance_estimate) {
  // v = 0.025, mg = 0.1 * 0.5 = 0.05, d = 0.025 - 0.0025 + 1e-7.
  rmsprop opt(options(0.0, true));
  BOOST_TEST(opt.slot_names() == (std::vector<std::string>{"velocity", "average_gradient"}));
  float w = 1.0f;
  const float g = 0.5f;
  auto s = opt.make_slots(1);
  opt.apply_dense(&w, &g, 1, s);
  BOOST_TEST(s.slots[1][0] == 0.05f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(w == 1.0 - 0.005 / std::sqrt(0.0225001), boost::test_tools::tolerance(1e-6));
}

BOOST_AUTO_TEST_CASE(centered_and_new_momentum_are_rejected_at_run_time) {
  rmsprop opt(options(0.0, false));
  BOOST_CHECK_THROW(opt.set_hyperparam("centered", 1.0), std::invalid_argument);
  BOOST_CHECK_THROW(opt.set_hyperparam("momentum", 0.9), std::invalid_argument);
  BOOST_CHECK_THROW(opt.set_hyperparam("rho", 1.0), std::invalid_argument);
  opt.set_hyperparam("rho", 0.5);
  BOOST_TEST(opt.hyperparam("rho") == 0.5);
}

BOOST_AUTO_TEST_CASE(lazy_rows_keep_untouched_velocity) {
  rmsprop opt(options(0.9, true));
  std::vector<float> block{1, 1, 1, 1};  // 2 rows x 2
  auto s = opt.make_slots(4);
  const int64_t row = 1;
  const std::vector<float> g{0.5f, -0.5f};
  opt.apply_rows(block.data(), 2, &row, 1, g.data(), s);
  BOOST_TEST(block[0] == 1.0f);
  BOOST_TEST(block[1] == 1.0f);
  for (const auto& slot : s.slots) {
    BOOST_TEST(slot[0] == 0.0f);
    BOOST_TEST(slot[2] != 0.0f);
  }
}

BOOST_AUTO_TEST_SUITE_END()
