// SGD with Keras's rules: plain, momentum and Nesterov against hand-computed steps; the
// lazy row path against the dense path; run-time hyperparameters.
#include <actortrain/model/optim/sgd.hpp>

#include <boost/test/unit_test.hpp>

#include <vector>

using namespace actortrain::model;

namespace {

// Gradients of the hand-computed three-step runs below (one weight starting at 1).
const float grads3[3] = {1.0f, 0.5f, -0.25f};

std::vector<float> run_three_steps(const optimizer& opt) {
  float w = 1.0f;
  auto s = opt.make_slots(1);
  std::vector<float> out;
  for (float g : grads3) {
    opt.apply_dense(&w, &g, 1, s);
    out.push_back(w);
  }
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(optim_sgd)

BOOST_AUTO_TEST_CASE(plain_step_subtracts_learning_rate_times_gradient) {
  sgd opt(sgd_options{0.1, 0.0, false});
  BOOST_TEST(opt.slot_names().empty());
  std::vector<float> w{1.0f, -2.0f, 0.5f};
  const std::vector<float> g{0.5f, 1.0f, -3.0f};
  auto s = opt.make_slots(w.size());
  opt.apply_dense(w.data(), g.data(), w.size(), s);
  BOOST_TEST(w[0] == 0.95f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(w[1] == -2.1f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(w[2] == 0.8f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(s.iterations == 1);
}

BOOST_AUTO_TEST_CASE(defaults_are_keras_defaults) {
  sgd opt;
  BOOST_TEST(opt.describe() == "sgd(learning_rate=0.01, momentum=0, nesterov=false)");
}

BOOST_AUTO_TEST_CASE(momentum_matches_keras_over_three_steps) {
  // v1 = -0.1            w1 = 0.9
  // v2 = 0.9 v1 - 0.05   = -0.14   w2 = 0.76
  // v3 = 0.9 v2 + 0.025  = -0.101  w3 = 0.659
  sgd opt(sgd_options{0.1, 0.9, false});
  BOOST_TEST(opt.slot_names() == std::vector<std::string>{"momentum"});
  const auto w = run_three_steps(opt);
  BOOST_TEST(w[0] == 0.9f, boost::test_tools::tolerance(1e-5f));
  BOOST_TEST(w[1] == 0.76f, boost::test_tools::tolerance(1e-5f));
  BOOST_TEST(w[2] == 0.659f, boost::test_tools::tolerance(1e-5f));
}

BOOST_AUTO_TEST_CASE(nesterov_matches_keras_over_three_steps) {
  // w += momentum * v - lr * g with the updated v:
  // w1 = 1     + 0.9 (-0.1)   - 0.1   = 0.81
  // w2 = 0.81  + 0.9 (-0.14)  - 0.05  = 0.634
  // w3 = 0.634 + 0.9 (-0.101) + 0.025 = 0.5681
  sgd opt(sgd_options{0.1, 0.9, true});
  const auto w = run_three_steps(opt);
  BOOST_TEST(w[0] == 0.81f, boost::test_tools::tolerance(1e-5f));
  BOOST_TEST(w[1] == 0.634f, boost::test_tools::tolerance(1e-5f));
  BOOST_TEST(w[2] == 0.5681f, boost::test_tools::tolerance(1e-5f));
}

BOOST_AUTO_TEST_CASE(apply_rows_equals_apply_dense_on_touched_rows) {
  for (const sgd_options& o : {sgd_options{0.1, 0.0, false}, sgd_options{0.1, 0.9, false},
                               sgd_options{0.1, 0.9, true}}) {
    sgd opt(o);
    // A block of 4 rows x 3; rows 1 and 3 get gradients twice.
    std::vector<float> block(12);
    for (size_t i = 0; i < block.size(); ++i) block[i] = 0.1f * static_cast<float>(i);
    const std::vector<float> original = block;
    const std::vector<int64_t> rows{1, 3};
    const std::vector<float> g{1.0f, 2.0f, 3.0f, -1.0f, -2.0f, -3.0f};
    auto s = opt.make_slots(block.size());
    // The same two rows as a dense block of their own.
    std::vector<float> dense{original.begin() + 3, original.begin() + 6};
    dense.insert(dense.end(), original.begin() + 9, original.begin() + 12);
    auto ds = opt.make_slots(dense.size());
    for (int step = 0; step < 2; ++step) {
      opt.apply_rows(block.data(), 3, rows.data(), rows.size(), g.data(), s);
      opt.apply_dense(dense.data(), g.data(), dense.size(), ds);
    }
    for (size_t c = 0; c < 3; ++c) {
      BOOST_TEST(block[3 + c] == dense[c], boost::test_tools::tolerance(1e-6f));
      BOOST_TEST(block[9 + c] == dense[3 + c], boost::test_tools::tolerance(1e-6f));
      BOOST_TEST(block[c] == original[c]);          // row 0 untouched
      BOOST_TEST(block[6 + c] == original[6 + c]);  // row 2 untouched
      if (!s.slots.empty()) {
        BOOST_TEST(s.slots[0][c] == 0.0f);  // untouched velocity stays 0
        BOOST_TEST(s.slots[0][3 + c] == ds.slots[0][c], boost::test_tools::tolerance(1e-6f));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(repeated_rows_are_summed_first) {
  sgd opt(sgd_options{0.5, 0.0, false});
  std::vector<float> block{0.0f, 0.0f, 0.0f, 0.0f};  // 2 rows x 2
  const std::vector<int64_t> rows{1, 0, 1};
  const std::vector<float> g{1.0f, 2.0f, 10.0f, 20.0f, 3.0f, 4.0f};
  auto s = opt.make_slots(0);
  opt.apply_rows(block.data(), 2, rows.data(), rows.size(), g.data(), s);
  BOOST_TEST(block[0] == -5.0f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(block[1] == -10.0f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(block[2] == -2.0f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(block[3] == -3.0f, boost::test_tools::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(set_hyperparam_changes_the_next_step) {
  sgd opt(sgd_options{0.1, 0.0, false});
  float w = 1.0f;
  const float g = 1.0f;
  auto s = opt.make_slots(1);
  opt.apply_dense(&w, &g, 1, s);
  opt.set_hyperparam("learning_rate", 0.01);
  BOOST_TEST(opt.hyperparam("learning_rate") == 0.01);
  opt.apply_dense(&w, &g, 1, s);
  BOOST_TEST(w == 0.89f, boost::test_tools::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(momentum_cannot_appear_without_its_slot) {
  sgd plain(sgd_options{0.1, 0.0, false});
  BOOST_CHECK_THROW(plain.set_hyperparam("momentum", 0.9), std::invalid_argument);
  BOOST_TEST(plain.hyperparam("momentum") == 0.0);
  sgd with(sgd_options{0.1, 0.9, false});
  with.set_hyperparam("momentum", 0.0);
  with.set_hyperparam("momentum", 0.5);
  BOOST_TEST(with.hyperparam("momentum") == 0.5);
}

BOOST_AUTO_TEST_CASE(bad_options_throw_naming_the_option) {
  try {
    sgd opt(sgd_options{-0.1, 0.0, false});
    BOOST_FAIL("no throw");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("learning_rate") != std::string::npos);
  }
  BOOST_CHECK_THROW(sgd(sgd_options{0.1, 1.5, false}), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()
