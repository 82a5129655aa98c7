// The local trainer: fit / evaluate / predict on datasets and tensors, Keras's
// steps_per_epoch semantics, repeated fit calls, and recovery of a planted model.

#include <boost/test/unit_test.hpp>

#include <actortrain/dataset/all.hpp>
#include <actortrain/model/all.hpp>

#include <cctype>
#include <sstream>

#include "gradient_check.hpp"

using namespace actortrain::model;
namespace ds = actortrain::dataset;
using testing::random_matrix;

namespace {

// y = x W* + b* + noise: a planted linear model whose answer the test knows.
struct planted {
  matrix x, y, w;
  float b = 0.5f;
  explicit planted(int64_t n, uint64_t seed = 42) {
    x = random_matrix(n, 5, seed);
    w.resize(5, 1);
    w << 1.5f, -2.0f, 0.5f, 3.0f, -1.0f;
    matrix noise = random_matrix(n, 1, seed + 1, -0.01f, 0.01f);
    y = (x * w).array() + b;
    y += noise;
  }
};

fit_options quiet(int epochs) {
  fit_options o;
  o.epochs = epochs;
  o.verbose = 0;
  return o;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(trainer_suite)

BOOST_AUTO_TEST_CASE(recovers_a_planted_linear_model) {
  planted p{1000};
  trainer t{model::sequential(5, {layers::dense(1)}), make_adam({0.05}), mean_squared_error(), 3};
  auto o = quiet(40);
  o.batch_size = 32;
  auto h = t.fit(p.x, p.y, o);
  const matrix& w = t.variable("dense/kernel");
  BOOST_TEST((w - p.w).cwiseAbs().maxCoeff() < 0.05, "learned W =\n" << w << "\nplanted W* =\n" << p.w);
  BOOST_TEST(std::abs(t.variable("dense/bias")(0, 0) - p.b) < 0.05);
  BOOST_TEST(h["loss"].size() == 40u);
  BOOST_TEST(h["loss"].back() < 1e-3);
}

BOOST_AUTO_TEST_CASE(repeated_fit_calls_keep_training_as_in_the_tutorial_loop) {
  planted p{1000, 7};
  trainer t{model::sequential(5, {layers::dense(10), layers::dense(1)}), make_adam({1e-3}), mean_squared_error(), 1};
  auto data = ds::from_tensor_slices({p.x}, p.y).shuffle(10, 1).repeat().batch(20);
  fit_options o = quiet(5);
  o.steps_per_epoch = 10;
  std::vector<double> losses;
  for (int call = 0; call < 20; ++call) losses.push_back(t.fit(data, o).last("loss"));
  BOOST_TEST(t.steps() == 20 * 5 * 10);
  // Each call is new training, not a restart: the loss keeps falling after the first call.
  BOOST_TEST(losses.back() < 0.5 * losses[1]);
  for (size_t k = 2; k < losses.size(); ++k) BOOST_TEST(losses[k] < losses[k - 1] * 1.02, "call " << k);
}

BOOST_AUTO_TEST_CASE(steps_per_epoch_on_finite_data_stops_when_it_runs_out) {
  planted p{100};
  trainer t{model::sequential(5, {layers::dense(1)}), make_sgd({0.01}), mean_squared_error()};
  auto data = ds::from_tensor_slices({p.x}, p.y).batch(10);  // 10 batches in all
  fit_options o = quiet(5);
  o.steps_per_epoch = 4;
  std::ostringstream out;
  o.out = &out;
  o.verbose = 2;
  auto h = t.fit(data, o);
  BOOST_TEST(t.steps() == 10);  // 4 + 4 + 2, then the data is gone
  BOOST_TEST(h["loss"].size() == 3u);
  BOOST_TEST(out.str().find("ran out of data") != std::string::npos, out.str());
}

BOOST_AUTO_TEST_CASE(an_infinite_dataset_needs_steps_per_epoch) {
  planted p{50};
  trainer t{model::sequential(5, {layers::dense(1)}), make_sgd({0.01}), mean_squared_error()};
  auto data = ds::from_tensor_slices({p.x}, p.y).batch(10).repeat();
  BOOST_CHECK_THROW(t.fit(data, quiet(1)), std::invalid_argument);
  BOOST_CHECK_THROW(t.evaluate(data), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(without_steps_per_epoch_each_epoch_is_one_pass) {
  planted p{100};
  trainer t{model::sequential(5, {layers::dense(1)}), make_sgd({0.01}), mean_squared_error()};
  t.fit(ds::from_tensor_slices({p.x}, p.y).batch(30), quiet(3));
  BOOST_TEST(t.steps() == 3 * 4);
}

BOOST_AUTO_TEST_CASE(evaluate_and_predict_agree) {
  matrix x = random_matrix(300, 4, 5);
  matrix y(300, 1);
  for (int i = 0; i < 300; ++i) y(i, 0) = x(i, 0) + x(i, 1) > 0 ? 1.f : 0.f;
  trainer t{model::sequential(4, {layers::dense(8, layers::activation::relu), layers::dense(2)}), make_adam({0.01}),
            softmax_cross_entropy(), 2};
  t.add_metric(accuracy());
  auto h = t.fit(x, y, quiet(30));
  auto r = t.evaluate({x}, y, 64);
  matrix pred = t.predict({x}, 64);
  BOOST_TEST(pred.rows() == 300);
  BOOST_TEST(pred.cols() == 2);
  int correct = 0;
  for (int i = 0; i < 300; ++i) {
    Eigen::Index arg;
    pred.row(i).maxCoeff(&arg);
    correct += arg == static_cast<Eigen::Index>(y(i, 0));
  }
  BOOST_TEST(r.at("accuracy") == correct / 300.0, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(r.at("accuracy") > 0.9);
  BOOST_TEST(softmax_cross_entropy()->compute(pred, y, nullptr) == r.at("loss"), boost::test_tools::tolerance(1e-4));
  BOOST_TEST(h.has("accuracy"));
}

BOOST_AUTO_TEST_CASE(training_is_deterministic_for_a_seed) {
  planted p{200};
  auto run = [&](uint64_t seed) {
    trainer t{model::sequential(5, {layers::dense(4, layers::activation::relu), layers::dropout(0.3f), layers::dense(1)}),
              make_adam({0.01}), mean_squared_error(), seed};
    auto o = quiet(3);
    t.fit(p.x, p.y, o);
    return t.variable("dense/kernel");
  };
  BOOST_TEST((run(9) == run(9)));
  BOOST_TEST((run(9) != run(10)));
}

BOOST_AUTO_TEST_CASE(data_that_does_not_fit_the_model_is_an_error) {
  trainer t{model::sequential(5, {layers::dense(1)}), make_sgd({0.01}), mean_squared_error()};
  auto bad = ds::from_tensor_slices({random_matrix(10, 4, 1)}, matrix::Zero(10, 1)).batch(5);
  BOOST_CHECK_THROW(t.fit(bad, quiet(1)), std::invalid_argument);
  auto two = ds::from_tensor_slices({random_matrix(10, 5, 1), random_matrix(10, 5, 2)}, matrix::Zero(10, 1)).batch(5);
  BOOST_CHECK_THROW(t.fit(two, quiet(1)), std::invalid_argument);
  BOOST_CHECK_THROW(trainer(model{}, make_sgd({0.1}), mean_squared_error()), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(progress_lines_report_loss_metrics_and_throughput) {
  planted p{64};
  trainer t{model::sequential(5, {layers::dense(1)}), make_sgd({0.01}), mean_squared_error()};
  std::ostringstream out;
  fit_options o = quiet(2);
  o.verbose = 1;
  o.out = &out;
  o.validation = ds::from_tensor_slices({p.x}, p.y).batch(32);
  t.fit(ds::from_tensor_slices({p.x}, p.y).batch(16), o);
  auto s = out.str();
  BOOST_TEST(s.find("Epoch 2/2") != std::string::npos, s);
  BOOST_TEST(s.find("4/4 [") != std::string::npos, s);
  BOOST_TEST(s.find("val_loss:") != std::string::npos, s);
  BOOST_TEST(s.find("samples/s") != std::string::npos, s);
}

// The trainer takes any batch_source (model/batch_source.hpp), not only datasets: one
// written by hand that yields the batches a dataset yields trains to the same values, and
// as_dataset tells a converted dataset from it.
BOOST_AUTO_TEST_CASE(any_batch_source_trains_as_the_dataset_of_its_batches) {
  planted p{100};
  auto data = ds::from_tensor_slices({p.x}, p.y).batch(25);
  struct by_hand final : batch_source::impl {
    matrix x, y;
    bool infinite = false;
    struct rows final : batch_iterator {
      const by_hand* src;
      Eigen::Index next_row = 0;
      explicit rows(const by_hand* s) : src(s) {}
      std::optional<batch> next() override {
        if (next_row >= src->x.rows()) return std::nullopt;
        batch b{{src->x.middleRows(next_row, 25)}, src->y.middleRows(next_row, 25)};
        next_row += 25;
        return b;
      }
    };
    std::unique_ptr<batch_iterator> iterate(uint64_t) const override { return std::make_unique<rows>(this); }
    batch_count count() const override { return infinite ? batch_count{-1, true} : batch_count{4, false}; }
  };
  auto src = std::make_shared<by_hand>();
  src->x = p.x;
  src->y = p.y;
  auto make = [] { return trainer{model::sequential(5, {layers::dense(1)}), make_sgd({0.01}), mean_squared_error(), 4}; };
  trainer a = make(), b = make();
  auto ha = a.fit(data, quiet(3));
  auto hb = b.fit(batch_source{src}, quiet(3));
  BOOST_TEST(ha["loss"] == hb["loss"], boost::test_tools::per_element());
  BOOST_TEST((a.variable("dense/kernel") == b.variable("dense/kernel")));
  BOOST_TEST(b.steps() == 3 * 4);
  BOOST_TEST(!ds::as_dataset(batch_source{src}));
  BOOST_TEST(ds::as_dataset(data)->describe() == data.describe());
  src->infinite = true;
  BOOST_CHECK_THROW(b.evaluate(batch_source{src}), std::invalid_argument);
}

// use_ema: the values train as without it, validation during fit sees their moving
// average (Keras's SwapEMAWeights), and fit ends with the model at the average (Keras's
// finalize_variable_values). The average is worked out here from the weights a run
// without averaging had after each step, and the validation loss from it.
BOOST_AUTO_TEST_CASE(use_ema_validates_on_the_average_and_ends_with_it) {
  planted p{400, 11};
  const matrix vx = random_matrix(100, 5, 99);
  const matrix vy = ((vx * p.w).array() + p.b).matrix();
  double evaluated_in_fit = -1;  // evaluate() at the last epoch's end, before fit ends
  auto run = [&](bool use_ema, std::vector<std::pair<matrix, float>>* steps) {
    sgd_options o;
    o.learning_rate = 0.05;
    o.use_ema = use_ema;
    o.ema_momentum = 0.9;
    auto t = std::make_unique<trainer>(model::sequential(5, {layers::dense(1)}), make_sgd(o), mean_squared_error(), 3);
    auto f = quiet(3);
    f.batch_size = 32;
    f.validation = ds::from_tensor_slices({vx}, vy).batch(50);
    lambda_hooks hooks;
    if (steps)
      hooks.on_train_batch_end = [&, tp = t.get()](training&, const step_info&) {
        steps->emplace_back(tp->variable("dense/kernel"), tp->variable("dense/bias")(0, 0));
      };
    else
      hooks.on_epoch_end = [&, tp = t.get()](training&, int64_t epoch, const logs&) {
        if (epoch == 2) evaluated_in_fit = tp->evaluate({vx}, vy, 50).at("loss");
      };
    f.callbacks.push_back(lambda_callback(hooks));
    auto h = t->fit(p.x, p.y, f);
    return std::make_pair(std::move(t), h);
  };
  std::vector<std::pair<matrix, float>> steps;
  auto [plain, plain_h] = run(false, &steps);
  auto [avg, avg_h] = run(true, nullptr);
  BOOST_REQUIRE(steps.size() == 39u);  // 13 steps an epoch
  matrix w = steps[0].first;
  double b = steps[0].second;
  for (size_t k = 1; k < steps.size(); ++k) {
    w = 0.9f * w + 0.1f * steps[k].first;
    b = 0.9 * b + 0.1 * steps[k].second;
  }
  const matrix& ended = avg->variable("dense/kernel");
  BOOST_TEST((ended - w).cwiseAbs().maxCoeff() < 1e-5, "ended with\n" << ended << "\naverage\n" << w);
  BOOST_TEST(std::abs(avg->variable("dense/bias")(0, 0) - b) < 1e-5);
  BOOST_TEST((plain->variable("dense/kernel") - w).cwiseAbs().maxCoeff() > 1e-3);  // the values are not it
  auto mse = [&](const matrix& kernel, double bias) {
    return (((vx * kernel).array() + static_cast<float>(bias)) - vy.array()).square().mean();
  };
  BOOST_TEST(avg_h["val_loss"].back() == mse(w, b), boost::test_tools::tolerance(1e-4));
  BOOST_TEST(evaluated_in_fit == mse(w, b), boost::test_tools::tolerance(1e-4));  // evaluate() too
  BOOST_TEST(plain_h["val_loss"].back() == mse(steps.back().first, steps.back().second),
             boost::test_tools::tolerance(1e-4));
  BOOST_TEST(avg_h["loss"] == plain_h["loss"]);  // training moved the values the same way
  // A variable updated by rows cannot keep an average: refused when the trainer is made.
  auto why = [] {
    try {
      graph g;
      auto ids = g.input(2, "ids");
      trainer t{model::functional(g, {ids}, g.apply(layers::embedding(10, 3), ids)),
                make_optimizer("adam(0.01, use_ema=true)"), mean_squared_error(), 1};
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  }();
  BOOST_TEST(why.find("'embedding/embeddings' is updated by rows") != std::string::npos, why);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_CASE(the_bar_shows_the_time_left_while_an_epoch_runs_and_not_at_its_end) {
  std::ostringstream out;
  progress_printer p{out, 1, /*is_terminal=*/true};
  p.begin_epoch(0, 2, 100);
  p.update(10, 640, {{"loss", 0.5}});
  auto drawn = out.str();
  auto at = drawn.find("ETA: ");
  BOOST_REQUIRE_MESSAGE(at != std::string::npos, drawn);
  // 90 steps left at the pace of the first 10: a whole number of seconds.
  auto rest = drawn.substr(at + 5);
  BOOST_TEST(std::isdigit(static_cast<unsigned char>(rest[0])));
  BOOST_TEST(rest.find('s') < rest.find(" - loss"), drawn);
  p.end_epoch(100, 6400, {{"loss", 0.4}});
  auto final_line = out.str().substr(out.str().rfind('\r'));
  BOOST_TEST(final_line.find("ETA") == std::string::npos, final_line);
}

BOOST_AUTO_TEST_CASE(a_line_per_epoch_names_its_epoch) {
  std::ostringstream out;
  progress_printer p{out, 2, /*is_terminal=*/false};
  p.begin_epoch(2, 10, 469);
  p.end_epoch(469, 60000, {{"loss", 0.3}});
  BOOST_TEST(out.str().rfind("Epoch 3/10 - 469/469 [", 0) == 0u, out.str());
  BOOST_TEST(out.str().find("ETA") == std::string::npos, out.str());
}
