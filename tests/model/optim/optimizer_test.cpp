// The optimizer base contract (hyperparameter table, argument checks, clone) and the
// make_optimizer spec parser.
#include <actortrain/model/optim/all.hpp>

#include <boost/test/unit_test.hpp>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

using namespace actortrain::model;

namespace {

/// The message of the std::invalid_argument that `f` throws ("" if none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(optim_optimizer)

BOOST_AUTO_TEST_CASE(hyperparams_are_sorted_by_name) {
  adam opt;
  const auto hp = opt.hyperparams();
  BOOST_TEST_REQUIRE(hp.size() == 7u);
  BOOST_TEST(hp[0].first == "beta_1");
  BOOST_TEST(hp[1].first == "beta_2");
  BOOST_TEST(hp[2].first == "ema_every");
  BOOST_TEST(hp[2].second == 1.0);
  BOOST_TEST(hp[3].first == "ema_momentum");
  BOOST_TEST(hp[4].first == "epsilon");
  BOOST_TEST(hp[5].first == "learning_rate");
  BOOST_TEST(hp[5].second == 0.001);
  BOOST_TEST(hp[6].first == "use_ema");
  BOOST_TEST(hp[6].second == 0.0);
  // The rule's own first (positional arguments), then averaging's (Keras's order, then
  // ema_every, which Keras does not have).
  BOOST_TEST(opt.hyperparam_names() == (std::vector<std::string>{"learning_rate", "beta_1", "beta_2", "epsilon",
                                                                  "use_ema", "ema_momentum", "ema_every"}));
}

BOOST_AUTO_TEST_CASE(set_hyperparam_rejects_unknown_names_and_bad_values) {
  sgd opt;
  auto unknown = error_of([&] { opt.set_hyperparam("lr", 0.1); });
  BOOST_TEST(contains(unknown, "sgd"));
  BOOST_TEST(contains(unknown, "'lr'"));
  BOOST_TEST(contains(unknown, "learning_rate"));  // lists the known ones
  auto negative = error_of([&] { opt.set_hyperparam("learning_rate", -1.0); });
  BOOST_TEST(contains(negative, "learning_rate"));
  BOOST_TEST(!error_of([&] { opt.set_hyperparam("learning_rate", std::nan("")); }).empty());
  BOOST_TEST(!error_of([&] { opt.set_hyperparam("nesterov", 0.5); }).empty());
  BOOST_TEST(opt.hyperparam("learning_rate") == 0.01);
  BOOST_CHECK_THROW(opt.hyperparam("nope"), std::invalid_argument);
}

// A ps shard's staleness-aware rate: every rule's step at lr_scale s is its step at
// learning rate s * lr, and a scale outside (0, 1] is refused before anything changes.
BOOST_AUTO_TEST_CASE(a_learning_rate_scale_is_the_same_as_a_smaller_learning_rate) {
  const std::vector<float> g{0.5f, -2.0f, 1.0f};
  for (const std::string spec : {"sgd(0.1)", "sgd(0.1, momentum=0.9)", "adam(0.1)", "adagrad(0.1)", "rmsprop(0.1)"}) {
    auto scaled = make_optimizer(spec);
    auto smaller = make_optimizer(spec);
    smaller->set_hyperparam("learning_rate", 0.025);
    std::vector<float> a{1, 2, 3}, b{1, 2, 3};
    auto sa = scaled->make_slots(3), sb = smaller->make_slots(3);
    for (int step = 0; step < 3; ++step) {
      scaled->apply_dense(a.data(), g.data(), 3, sa, 0.25);
      smaller->apply_dense(b.data(), g.data(), 3, sb);
    }
    for (size_t i = 0; i < 3; ++i) BOOST_TEST(a[i] == b[i], spec << " value " << i);
    const int64_t rows[] = {1};
    std::vector<float> ra{1, 2, 3, 4}, rb{1, 2, 3, 4};
    auto ta = scaled->make_slots(4), tb = smaller->make_slots(4);
    scaled->apply_rows(ra.data(), 2, rows, 1, g.data(), ta, 0.25);
    smaller->apply_rows(rb.data(), 2, rows, 1, g.data(), tb);
    for (size_t i = 0; i < 4; ++i) BOOST_TEST(ra[i] == rb[i], spec << " row value " << i);
    for (double bad : {0.0, -1.0, 1.5, std::nan("")}) {
      auto before = a;
      auto slots = sa;
      auto msg = error_of([&] { scaled->apply_dense(a.data(), g.data(), 3, sa, bad); });
      BOOST_TEST(contains(msg, "learning-rate scale"), spec << ": " << msg);
      BOOST_TEST((a == before));
      BOOST_TEST(sa.iterations == slots.iterations);
    }
  }
}

BOOST_AUTO_TEST_CASE(clone_is_independent) {
  adam opt;
  auto copy = opt.clone();
  copy->set_hyperparam("learning_rate", 0.5);
  BOOST_TEST(opt.hyperparam("learning_rate") == 0.001);
  BOOST_TEST(copy->hyperparam("learning_rate") == 0.5);
  BOOST_TEST(copy->slot_names() == opt.slot_names());
}

BOOST_AUTO_TEST_CASE(rejects_slots_of_the_wrong_shape_without_side_effects) {
  adam opt;
  std::vector<float> w{1, 2, 3};
  const std::vector<float> g{1, 1, 1};
  auto s = opt.make_slots(2);
  BOOST_CHECK_THROW(opt.apply_dense(w.data(), g.data(), 3, s), std::invalid_argument);
  slot_block none;
  BOOST_CHECK_THROW(opt.apply_dense(w.data(), g.data(), 3, none), std::invalid_argument);
  BOOST_TEST(s.iterations == 0);
  BOOST_TEST(w[0] == 1.0f);
  auto ok = opt.make_slots(3);
  BOOST_CHECK_THROW(opt.apply_rows(w.data(), 0, nullptr, 0, nullptr, ok), std::invalid_argument);
  BOOST_CHECK_THROW(opt.apply_rows(w.data(), 2, nullptr, 0, nullptr, ok), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(parser_accepts_names_keywords_and_positionals) {
  auto a = make_optimizer("adam");
  BOOST_TEST(a->describe() == adam().describe());
  auto b = make_optimizer("Adam(learning_rate=0.01)");
  BOOST_TEST(b->hyperparam("learning_rate") == 0.01);
  BOOST_TEST(b->hyperparam("beta_1") == 0.9);
  auto c = make_optimizer(" sgd ( learning_rate = 0.1 , momentum=0.9, nesterov=1 ) ");
  BOOST_TEST(c->name() == "sgd");
  BOOST_TEST(c->hyperparam("momentum") == 0.9);
  BOOST_TEST(c->hyperparam("nesterov") == 1.0);
  BOOST_TEST(c->slot_names() == std::vector<std::string>{"momentum"});
  auto d = make_optimizer("rmsprop(0.002, centered=true)");
  BOOST_TEST(d->hyperparam("learning_rate") == 0.002);
  BOOST_TEST(d->slot_names() == (std::vector<std::string>{"velocity", "average_gradient"}));
  auto e = make_optimizer("adagrad(epsilon=1e-8,)");
  BOOST_TEST(e->hyperparam("epsilon") == 1e-8);
  BOOST_TEST(make_optimizer("sgd()")->describe() == sgd().describe());
}

BOOST_AUTO_TEST_CASE(describe_round_trips_through_the_parser) {
  rmsprop_options o;
  o.momentum = 0.5;
  o.centered = true;
  o.learning_rate = 0.0125;
  for (const optimizer_ptr& opt :
       {make_sgd({0.3, 0.7, true}), make_adam({0.02, 0.8, 0.99, 1e-6}), make_adagrad({}), make_rmsprop(o)}) {
    auto again = make_optimizer(opt->describe());
    BOOST_TEST(again->describe() == opt->describe());
    BOOST_TEST(again->slot_names() == opt->slot_names());
  }
}

BOOST_AUTO_TEST_CASE(parser_rejects_with_the_bad_token_named) {
  auto unknown = error_of([] { make_optimizer("adamw"); });
  BOOST_TEST(contains(unknown, "'adamw'"));
  BOOST_TEST(contains(unknown, "adagrad, adam, rmsprop, sgd"));
  BOOST_TEST(contains(error_of([] { make_optimizer("adam(lr=0.1)"); }), "'lr'"));
  BOOST_TEST(contains(error_of([] { make_optimizer("adam(learning_rate=abc)"); }), "'abc'"));
  BOOST_TEST(contains(error_of([] { make_optimizer("adam(learning_rate=0.1"); }), "expected ',' or ')'"));
  BOOST_TEST(contains(error_of([] { make_optimizer("adam(learning_rate=0.1) x"); }), "'x'"));
  BOOST_TEST(contains(error_of([] { make_optimizer("adam(learning_rate=-1)"); }), "learning_rate"));
  BOOST_TEST(contains(error_of([] { make_optimizer("adam(beta_1=0.9, beta_1=0.8)"); }), "twice"));
  BOOST_TEST(contains(error_of([] { make_optimizer("adam(beta_1=0.9, 0.1)"); }), "positional"));
  BOOST_TEST(contains(error_of([] { make_optimizer("sgd(1,2,3,4,5,6,7)"); }), "too many"));
  BOOST_TEST(contains(error_of([] { make_optimizer("sgd(nesterov=2)"); }), "nesterov"));
  BOOST_TEST(contains(error_of([] { make_optimizer(""); }), "empty"));
  BOOST_TEST(contains(error_of([] { make_optimizer("(0.1)"); }), "expected a name"));
  BOOST_TEST(contains(error_of([] { make_optimizer("adam(,)"); }), "expected a value"));
}

// apply_dense_ahead: the same new values and slots as apply_dense, to the bit, for every
// built-in rule (their kernels run a piece at a time) and for a rule of the user's (the
// default keeps a copy); beside them, the values k updates ahead. The block is longer
// than a piece (2,048 floats) and not a multiple of it.
namespace {
// SGD by another name: only update_dense and update_rows, as a user writes a rule.
class users_sgd : public optimizer {
 public:
  users_sgd() : optimizer("users_sgd", {}) { declare("learning_rate", 0.1, value_range::non_negative); }
  optimizer_ptr clone() const override { return std::make_unique<users_sgd>(*this); }

 protected:
  void update_dense(float* values, const float* grads, size_t n, slot_block&, double lr_scale) const override {
    const auto lr = static_cast<float>(hp(0) * lr_scale);
    for (size_t i = 0; i < n; ++i) values[i] -= lr * grads[i];
  }
  void update_rows(float*, size_t, const int64_t*, size_t, const float*, slot_block&, double) const override {}
};
}  // namespace

BOOST_AUTO_TEST_CASE(apply_dense_ahead_is_apply_dense_and_the_extrapolation) {
  const size_t n = 5000;
  std::vector<float> w0(n), g(n);
  for (size_t i = 0; i < n; ++i) {
    w0[i] = std::sin(0.37f * static_cast<float>(i));
    g[i] = 0.1f * std::cos(0.11f * static_cast<float>(i)) + (i % 7 == 0 ? 0.0f : 0.01f);
  }
  std::vector<optimizer_ptr> rules;
  for (const char* spec : {"sgd(0.1)", "sgd(0.1, momentum=0.9, nesterov=true)", "adam(0.01)", "adagrad(0.1)",
                           "rmsprop(0.01, momentum=0.5, centered=true)"})
    rules.push_back(make_optimizer(spec));
  rules.push_back(std::make_unique<users_sgd>());
  const float k = 1.5f;
  for (auto& opt : rules) {
    BOOST_TEST_CONTEXT(opt->describe()) {
      std::vector<float> plain = w0, fused = w0, ahead(n, -1.0f), before(n);
      auto s1 = opt->make_slots(n), s2 = opt->make_slots(n);
      for (int step = 0; step < 3; ++step) {  // slots that are not fresh too
        before = fused;
        opt->apply_dense(plain.data(), g.data(), n, s1, 0.5);
        opt->apply_dense_ahead(fused.data(), g.data(), n, s2, 0.5, k, ahead.data());
      }
      BOOST_TEST((plain == fused));
      BOOST_TEST((s1.slots == s2.slots));
      BOOST_TEST(s1.iterations == s2.iterations);
      size_t off = 0;
      for (size_t i = 0; i < n; ++i)
        if (ahead[i] != fused[i] + k * (fused[i] - before[i])) ++off;
      BOOST_TEST(off == 0u);
      BOOST_TEST(ahead[n - 1] != fused[n - 1]);  // it did move
    }
  }
  auto opt = make_optimizer("adam(0.01)");
  auto s = opt->make_slots(n);
  std::vector<float> w = w0, ahead(n);
  BOOST_CHECK_THROW(opt->apply_dense_ahead(w.data(), g.data(), n, s, 1.0, NAN, ahead.data()), std::invalid_argument);
  BOOST_TEST(s.iterations == 0);  // rejected: nothing changed
  BOOST_TEST((w == w0));
}

// Averaging (use_ema): the values train exactly as without it, and the "average" slot
// is the moving average of the values after each apply, computed here on its own from
// the values each step left. The same through apply_dense_ahead, for every built-in rule.
BOOST_AUTO_TEST_CASE(use_ema_keeps_the_moving_average_of_the_values_and_trains_the_same) {
  const size_t n = 5000;  // more than one piece of the kernels, not a multiple of one
  std::vector<float> w0(n), g(n);
  for (size_t i = 0; i < n; ++i) {
    w0[i] = std::sin(0.37f * static_cast<float>(i));
    g[i] = 0.1f * std::cos(0.11f * static_cast<float>(i)) + 0.01f;
  }
  for (std::string spec : {"sgd(0.1", "sgd(0.1, momentum=0.9, nesterov=true", "adam(0.01", "adagrad(0.1",
                           "rmsprop(0.01, momentum=0.5, centered=true"}) {
    auto plain = make_optimizer(spec + ")");
    auto avg = make_optimizer(spec + ", use_ema=true, ema_momentum=0.75)");
    BOOST_TEST_CONTEXT(avg->describe()) {
      BOOST_TEST(avg->slot_names().back() == "average");
      BOOST_TEST(avg->num_slots() == plain->num_slots() + 1);
      BOOST_TEST(avg->average_slot() == static_cast<int>(plain->num_slots()));
      BOOST_TEST(plain->average_slot() == -1);
      std::vector<float> wp = w0, wa = w0, wb = w0, ahead(n);
      auto sp = plain->make_slots(n), sa = avg->make_slots(n, w0.data()), sb = avg->make_slots(n, w0.data());
      BOOST_TEST((sa.slots.back() == w0));  // it starts as the values
      std::vector<double> expected(n);
      for (int step = 1; step <= 4; ++step) {
        plain->apply_dense(wp.data(), g.data(), n, sp);
        avg->apply_dense(wa.data(), g.data(), n, sa);
        avg->apply_dense_ahead(wb.data(), g.data(), n, sb, 1.0, 2.0f, ahead.data());
        for (size_t i = 0; i < n; ++i) expected[i] = step == 1 ? wa[i] : 0.75 * expected[i] + 0.25 * wa[i];
      }
      BOOST_TEST((wa == wp));  // averaging does not change what trains
      BOOST_TEST((wb == wp));
      BOOST_TEST((sb.slots == sa.slots));
      for (size_t k = 0; k < sp.slots.size(); ++k) BOOST_TEST((sa.slots[k] == sp.slots[k]));
      size_t off = 0;
      double moved = 0;
      for (size_t i = 0; i < n; ++i) {
        if (std::abs(sa.slots.back()[i] - expected[i]) > 1e-6 * (1 + std::abs(expected[i]))) ++off;
        moved = std::max(moved, std::abs(static_cast<double>(sa.slots.back()[i]) - wa[i]));
      }
      BOOST_TEST(off == 0u);
      BOOST_TEST(moved > 1e-4);  // the average lags the values: it is not a copy of them
    }
  }
}

// ema_every = k: the average moves on applies 1, 1 + k, 1 + 2k, ... only, each time with
// the momentum to the k-th power; the applies between leave it as it was. Worked out
// here from the values each apply left, for a rule without slots and one with two.
BOOST_AUTO_TEST_CASE(ema_every_updates_the_average_on_every_kth_apply_with_the_momentum_to_the_kth) {
  const size_t n = 3000;
  std::vector<float> w0(n), g(n);
  for (size_t i = 0; i < n; ++i) {
    w0[i] = std::cos(0.23f * static_cast<float>(i));
    g[i] = 0.05f * std::sin(0.07f * static_cast<float>(i)) - 0.02f;
  }
  for (std::string spec : {"sgd(0.1", "adam(0.01"}) {
    auto plain = make_optimizer(spec + ")");
    auto every = make_optimizer(spec + ", use_ema=true, ema_momentum=0.8, ema_every=3)");
    BOOST_TEST_CONTEXT(every->describe()) {
      BOOST_TEST(contains(every->describe(), "ema_momentum=0.8, ema_every=3)"));
      std::vector<float> wp = w0, wa = w0, wb = w0, ahead(n);
      auto sp = plain->make_slots(n), sa = every->make_slots(n, w0.data()), sb = every->make_slots(n, w0.data());
      std::vector<double> expected(w0.begin(), w0.end());
      for (int step = 1; step <= 8; ++step) {
        plain->apply_dense(wp.data(), g.data(), n, sp);
        every->apply_dense(wa.data(), g.data(), n, sa);
        every->apply_dense_ahead(wb.data(), g.data(), n, sb, 1.0, 2.0f, ahead.data());
        const double m = 0.8 * 0.8 * 0.8;
        if (step == 1)
          expected.assign(wa.begin(), wa.end());
        else if ((step - 1) % 3 == 0)  // steps 4 and 7
          for (size_t i = 0; i < n; ++i) expected[i] = m * expected[i] + (1 - m) * wa[i];
        size_t off = 0;
        for (size_t i = 0; i < n; ++i)
          if (std::abs(sa.slots.back()[i] - expected[i]) > 1e-6 * (1 + std::abs(expected[i]))) ++off;
        BOOST_TEST(off == 0u, "step " << step << ": " << off << " averages off");
      }
      BOOST_TEST((wa == wp));  // what trains does not change
      BOOST_TEST((wb == wp));
      BOOST_TEST((sb.slots == sa.slots));
      BOOST_TEST(make_optimizer(every->describe())->describe() == every->describe());
    }
  }
  // It is a whole number >= 1, given or set.
  BOOST_TEST(contains(error_of([] { make_optimizer("adam(use_ema=true, ema_every=0)"); }), "ema_every"));
  BOOST_TEST(contains(error_of([] { make_optimizer("adam(use_ema=true, ema_every=2.5)"); }), "whole number"));
  auto opt = make_optimizer("adam(use_ema=true, ema_every=2)");
  BOOST_TEST(contains(error_of([&] { opt->set_hyperparam("ema_every", 0.5); }), "whole number"));
  opt->set_hyperparam("ema_every", 4);
  BOOST_TEST(opt->hyperparam("ema_every") == 4.0);
}

BOOST_AUTO_TEST_CASE(use_ema_is_fixed_refuses_rows_and_round_trips_through_the_parser) {
  auto opt = make_optimizer("adam(0.01, use_ema=true)");
  BOOST_TEST(opt->hyperparam("ema_momentum") == 0.99);  // Keras's default
  BOOST_TEST(opt->describe() == "adam(learning_rate=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-07, use_ema=true, "
                                "ema_momentum=0.99)");
  BOOST_TEST(make_optimizer(opt->describe())->describe() == opt->describe());
  BOOST_TEST(contains(error_of([&] { opt->set_hyperparam("use_ema", 0); }), "fixed at construction"));
  opt->set_hyperparam("ema_momentum", 0.5);
  BOOST_TEST(opt->hyperparam("ema_momentum") == 0.5);
  BOOST_TEST(contains(error_of([&] { opt->set_hyperparam("ema_momentum", 1.0); }), "ema_momentum"));
  BOOST_TEST(contains(error_of([] { make_optimizer("sgd(use_ema=true, ema_momentum=1)"); }), "ema_momentum"));
  // Without averaging the text is the one from before it existed.
  BOOST_TEST(make_optimizer("adam(0.01)")->describe() ==
             "adam(learning_rate=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-07)");
  // A row update is refused, before anything changes.
  std::vector<float> w(6, 1.0f), grad(3, 0.5f);
  auto s = opt->make_slots(6, w.data());
  const int64_t row = 1;
  auto why = error_of([&] { opt->apply_rows(w.data(), 3, &row, 1, grad.data(), s); });
  BOOST_TEST(contains(why, "use_ema averages dense blocks only"));
  BOOST_TEST(s.iterations == 0);
  BOOST_TEST((w == std::vector<float>(6, 1.0f)));
  // SGD without momentum: the average is its only slot, and momentum still cannot appear.
  auto plain = make_optimizer("sgd(0.1, use_ema=true)");
  BOOST_TEST(plain->slot_names() == (std::vector<std::string>{"average"}));
  BOOST_TEST(contains(error_of([&] { plain->set_hyperparam("momentum", 0.9); }), "no velocity slot"));
}

BOOST_AUTO_TEST_SUITE_END()
