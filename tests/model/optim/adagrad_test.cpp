// Adagrad: the accumulator's initial value, one step by hand, and lazy rows.
#include <actortrain/model/optim/adagrad.hpp>

#include <boost/test/unit_test.hpp>

#include <cmath>
#include <vector>

using namespace actortrain::model;

BOOST_AUTO_TEST_SUITE(optim_adagrad)

BOOST_AUTO_TEST_CASE(accumulator_starts_at_initial_value) {
  adagrad opt;
  BOOST_TEST(opt.describe() == "adagrad(learning_rate=0.001, initial_accumulator_value=0.1, epsilon=1e-07)");
  const auto s = opt.make_slots(3);
  BOOST_TEST(s.slots.size() == 1u);
  for (float a : s.slots[0]) BOOST_TEST(a == 0.1f);
}

BOOST_AUTO_TEST_CASE(one_step_matches_hand_computation) {
  // a = 0.1 + g^2; w -= lr g / sqrt(a + eps). With lr = 0.1:
  //  g = 0.5: a = 0.35, w = 1 - 0.05 / sqrt(0.3500001) = 0.9154846
  //  g = -2:  a = 4.1,  w = 1 + 0.2 / sqrt(4.1000001)  = 1.0987730
  adagrad_options o;
  o.learning_rate = 0.1;
  adagrad opt(o);
  std::vector<float> w{1.0f, 1.0f};
  const std::vector<float> g{0.5f, -2.0f};
  auto s = opt.make_slots(2);
  opt.apply_dense(w.data(), g.data(), 2, s);
  BOOST_TEST(s.slots[0][0] == 0.35f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(s.slots[0][1] == 4.1f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(w[0] == 1.0 - 0.05 / std::sqrt(0.3500001), boost::test_tools::tolerance(1e-6));
  BOOST_TEST(w[1] == 1.0 + 0.2 / std::sqrt(4.1000001), boost::test_tools::tolerance(1e-6));
  BOOST_TEST(w[0] == 0.9154846f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(w[1] == 1.0987730f, boost::test_tools::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(rows_change_only_touched_rows_and_their_accumulators) {
  adagrad opt;
  std::vector<float> block(4 * 3, 1.0f);  // 4 rows x 3
  auto s = opt.make_slots(block.size());
  const std::vector<int64_t> rows{2, 0};
  const std::vector<float> g{1, 2, 3, 4, 5, 6};  // row 2 gets 1,2,3; row 0 gets 4,5,6
  opt.apply_rows(block.data(), 3, rows.data(), 2, g.data(), s);
  for (size_t c = 0; c < 3; ++c) {
    // Untouched rows 1 and 3: values and accumulators exactly as before.
    BOOST_TEST(block[3 + c] == 1.0f);
    BOOST_TEST(block[9 + c] == 1.0f);
    BOOST_TEST(s.slots[0][3 + c] == 0.1f);
    BOOST_TEST(s.slots[0][9 + c] == 0.1f);
    // Touched rows: accumulator 0.1 + g^2, value moved against g.
    const float g2 = g[c], g0 = g[3 + c];
    BOOST_TEST(s.slots[0][6 + c] == 0.1f + g2 * g2, boost::test_tools::tolerance(1e-6f));
    BOOST_TEST(s.slots[0][c] == 0.1f + g0 * g0, boost::test_tools::tolerance(1e-6f));
    BOOST_TEST(block[6 + c] < 1.0f);
    BOOST_TEST(block[c] < 1.0f);
  }
}

BOOST_AUTO_TEST_CASE(initial_accumulator_value_is_fixed_at_construction) {
  adagrad opt;
  BOOST_CHECK_THROW(opt.set_hyperparam("initial_accumulator_value", 0.5), std::invalid_argument);
  opt.set_hyperparam("learning_rate", 0.5);
  BOOST_TEST(opt.hyperparam("learning_rate") == 0.5);
  adagrad_options bad;
  bad.initial_accumulator_value = -1.0;
  BOOST_CHECK_THROW(adagrad{bad}, std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()
