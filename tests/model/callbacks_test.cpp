// Keras callbacks and fit options on the one-process trainer: the order of the hooks,
// callbacks per fit call, ReduceLROnPlateau, TerminateOnNaN, the lambda callback, early
// stopping with restore, checkpoints, validation_split / validation_freq /
// initial_epoch / class_weight with Keras's meaning. The checks read what the trainer
// did (its variables, its optimizer, the history, files written); the few that read a
// callback's own record (model_checkpoint::asked, reduce_lr_on_plateau::reduced_after)
// stand beside one of those.

#include <boost/test/unit_test.hpp>

#include <actortrain/model/all.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gradient_check.hpp"

using namespace actortrain::model;
using testing::random_matrix;

namespace {

fit_options quiet(int epochs) {
  fit_options o;
  o.epochs = epochs;
  o.verbose = 0;
  return o;
}

// Three classes, separable: the class is which of the first three columns is largest.
struct three_classes {
  matrix x, y;
  explicit three_classes(int64_t n, uint64_t seed = 3) {
    x = random_matrix(n, 4, seed);
    y.resize(n, 1);
    for (int64_t i = 0; i < n; ++i) {
      Eigen::Index c = 0;
      x.row(i).head(3).maxCoeff(&c);
      y(i, 0) = static_cast<float>(c);
    }
  }
};

trainer classifier(uint64_t seed = 2, double lr = 0.02) {
  trainer t{model::sequential(4, {layers::dense(16, layers::activation::relu), layers::dense(3)}), make_adam({lr}),
            softmax_cross_entropy(), seed};
  t.add_metric(accuracy());
  return t;
}

// Records every hook as a word, with its epoch or batch where it has one.
struct recorder : callback {
  std::vector<std::string> seen;
  int64_t batch_begins = 0, batch_ends = 0, test_batches = 0, predict_batches = 0;
  std::vector<int64_t> begin_steps, end_steps;
  void on_train_begin(training&) override { seen.push_back("train_begin"); }
  void on_train_end(training&, bool failed) override { seen.push_back(failed ? "train_failed" : "train_end"); }
  void on_epoch_begin(training&, int64_t e) override { seen.push_back("epoch_begin " + std::to_string(e)); }
  void on_epoch_end(training&, int64_t e, const logs& l) override {
    seen.push_back("epoch_end " + std::to_string(e) + (l.count("val_loss") ? " val" : ""));
  }
  void on_train_batch_begin(training&, int64_t, int64_t step) override {
    ++batch_begins;
    begin_steps.push_back(step);
  }
  void on_train_batch_end(training&, const step_info& s) override {
    ++batch_ends;
    end_steps.push_back(s.step);
  }
  void on_test_begin(training&) override { seen.push_back("test_begin"); }
  void on_test_batch_end(training&, int64_t, const logs&) override { ++test_batches; }
  void on_test_end(training&, const logs& l) override { seen.push_back(l.count("loss") ? "test_end" : "test_end?"); }
  void on_predict_begin(training&) override { seen.push_back("predict_begin"); }
  void on_predict_batch_end(training&, int64_t) override { ++predict_batches; }
  void on_predict_end(training&) override { seen.push_back("predict_end"); }
};

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (auto& w : v) s += (s.empty() ? "" : ", ") + w;
  return s;
}

// A training whose state a test sets: for the decisions of a callback alone.
struct scripted_training : training {
  std::map<std::string, double> hp{{"learning_rate", 1.0}};
  bool stopped = false;
  void stop_training() override { stopped = true; }
  std::map<std::string, double> hyperparams() const override { return hp; }
  void set_hyperparams(const std::map<std::string, double>& v) override {
    for (auto& [k, x] : v) hp[k] = x;
  }
  void keep_state() override {}
  void restore_kept_state_at_end() override {}
  void save_checkpoint(const std::string&, int) override {}
};

// x and y in batches of `batch`, in order: a batch_source that is not built from tensors.
struct rows_impl final : batch_source::impl {
  matrix x, y;
  int64_t per_batch = 1;
  batch_count count() const override { return {(x.rows() + per_batch - 1) / per_batch, false}; }
  std::unique_ptr<batch_iterator> iterate(uint64_t) const override {
    struct it final : batch_iterator {
      const rows_impl* r;
      int64_t at = 0;
      explicit it(const rows_impl* rr) : r(rr) {}
      std::optional<batch> next() override {
        if (at >= r->x.rows()) return std::nullopt;
        const int64_t n = std::min<int64_t>(r->per_batch, r->x.rows() - at);
        batch b;
        b.features = {r->x.middleRows(at, n)};
        b.labels = r->y.middleRows(at, n);
        at += n;
        return b;
      }
    };
    return std::make_unique<it>(this);
  }
};

batch_source rows_source(const matrix& x, const matrix& y, int64_t batch) {
  auto r = std::make_shared<rows_impl>();
  r->x = x;
  r->y = y;
  r->per_batch = batch;
  return batch_source{r};
}

std::string temp_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("actortrain_callbacks_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  return d.string();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(callbacks_suite)

BOOST_AUTO_TEST_CASE(hooks_run_in_keras_order_and_validation_follows_validation_freq) {
  three_classes d{200};
  auto t = classifier();
  auto rec = std::make_shared<recorder>();
  auto o = quiet(4);
  o.batch_size = 50;
  o.validation_split = 0.25;  // the last 50 rows; the first 150 train (3 steps of 50)
  o.validation_freq = 2;
  o.callbacks = {rec};
  auto h = t.fit(d.x, d.y, o);
  BOOST_TEST(joined(rec->seen) ==
             "train_begin, epoch_begin 0, epoch_end 0, epoch_begin 1, test_begin, test_end, epoch_end 1 val, "
             "epoch_begin 2, epoch_end 2, epoch_begin 3, test_begin, test_end, epoch_end 3 val, train_end");
  BOOST_TEST(rec->batch_begins == 12);
  BOOST_TEST(rec->batch_ends == 12);
  BOOST_TEST(rec->begin_steps.front() == 1);
  BOOST_TEST(rec->begin_steps == rec->end_steps, boost::test_tools::per_element());  // each begins, then ends
  BOOST_TEST(rec->end_steps.back() == 12);  // this fit's steps
  BOOST_TEST(rec->test_batches == 2);  // one batch of 50 per validation
  BOOST_TEST(h["loss"].size() == 4u);
  BOOST_TEST(h["val_loss"].size() == 2u);  // Keras: val_* only for the epochs that validated
}

BOOST_AUTO_TEST_CASE(validation_epochs_name_the_epochs_to_validate_after) {
  three_classes d{120};
  auto t = classifier();
  auto rec = std::make_shared<recorder>();
  auto o = quiet(5);
  o.batch_size = 40;
  o.validation_split = 0.25;
  o.validation_epochs = {1, 4};
  o.callbacks = {rec};
  auto h = t.fit(d.x, d.y, o);
  std::vector<std::string> ends;
  for (auto& s : rec->seen)
    if (s.rfind("epoch_end", 0) == 0) ends.push_back(s);
  BOOST_TEST(joined(ends) == "epoch_end 0 val, epoch_end 1, epoch_end 2, epoch_end 3 val, epoch_end 4");
  BOOST_TEST(h["val_accuracy"].size() == 2u);
}

BOOST_AUTO_TEST_CASE(callbacks_belong_to_one_fit_call) {
  three_classes d{100};
  auto t = classifier();
  auto rec = std::make_shared<recorder>();
  auto o = quiet(2);
  o.batch_size = 50;
  o.callbacks = {rec};
  t.fit(d.x, d.y, o);
  BOOST_TEST(rec->batch_ends == 4);
  t.fit(d.x, d.y, quiet(2));  // a later fit without it: it hears nothing
  BOOST_TEST(rec->batch_ends == 4);
  BOOST_TEST(rec->seen.back() == "train_end");
}

BOOST_AUTO_TEST_CASE(evaluate_and_predict_run_the_test_and_predict_hooks) {
  three_classes d{100};
  auto t = classifier();
  auto rec = std::make_shared<recorder>();
  auto bs = rows_source(d.x, d.y, 50);
  auto ev = t.evaluate(bs, 0, {rec});
  auto pred = t.predict(bs, {rec});
  BOOST_TEST(joined(rec->seen) == "test_begin, test_end, predict_begin, predict_end");
  BOOST_TEST(rec->test_batches == 2);
  BOOST_TEST(rec->predict_batches == 2);
  BOOST_TEST(pred.rows() == 100);
  BOOST_TEST(ev.at("loss") == t.evaluate({d.x}, d.y, 25).at("loss"), boost::test_tools::tolerance(1e-5));
  BOOST_CHECK_THROW(t.evaluate(bs, 0, {nullptr}), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(reduce_lr_on_plateau_decides_as_keras_does) {
  reduce_lr_options o;
  o.monitor = "val_loss";
  o.factor = 0.5;
  o.patience = 2;
  o.cooldown = 1;
  o.min_lr = 0.2;
  o.min_delta = 0.01;
  reduce_lr_on_plateau cb{o};
  scripted_training s;
  cb.on_train_begin(s);
  // Keras's order: 1.0 is the best; 0.995 is not better by min_delta (wait 1); again:
  // patience 2 reached -> 0.5 after epoch 2, cooldown 1. Epoch 3 ends the cooldown and
  // counts (wait 1), epoch 4 lowers to 0.25; epoch 6 to max(0.125, min_lr) = 0.2; then
  // nothing is left to lower.
  std::vector<double> vals = {1.0, 0.995, 0.995, 0.999, 0.999, 0.999, 0.999, 0.999, 0.999, 0.999, 0.999, 0.5};
  for (size_t e = 0; e < vals.size(); ++e) cb.on_epoch_end(s, static_cast<int64_t>(e), {{"val_loss", vals[e]}});
  BOOST_TEST(cb.reduced_after() == (std::vector<int64_t>{2, 4, 6}), boost::test_tools::per_element());
  BOOST_TEST(cb.rates() == (std::vector<double>{0.5, 0.25, 0.2}), boost::test_tools::per_element());
  BOOST_TEST(s.hp.at("learning_rate") == 0.2);
  BOOST_CHECK_THROW(cb.on_epoch_end(s, 12, {{"loss", 1.0}}), std::runtime_error);  // no val_loss: says so
  BOOST_CHECK_THROW(reduce_lr_on_plateau(reduce_lr_options{"loss", 1.5}), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(reduce_lr_on_plateau_lowers_the_trainers_learning_rate) {
  three_classes d{100};
  auto t = classifier(2, 0.04);
  reduce_lr_options o;
  o.monitor = "loss";
  o.mode = "max";  // a falling loss never "improves": every epoch after the first lowers the rate
  o.patience = 1;
  o.factor = 0.5;
  auto cb = std::make_shared<reduce_lr_on_plateau>(o);
  auto f = quiet(4);
  f.callbacks = {cb};
  t.fit(d.x, d.y, f);
  BOOST_TEST(t.optim().hyperparam("learning_rate") == 0.04 * 0.125, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(cb->reduced_after().size() == 3u);
}

BOOST_AUTO_TEST_CASE(terminate_on_nan_stops_after_the_step_whose_loss_is_not_finite) {
  matrix x = random_matrix(256, 5, 1);
  matrix y = random_matrix(256, 1, 2) * 100.0f;
  trainer t{model::sequential(5, {layers::dense(1)}), make_sgd({1e4}), mean_squared_error(), 1};
  auto nan = std::make_shared<terminate_on_nan>();
  auto rec = std::make_shared<recorder>();
  auto o = quiet(50);
  o.batch_size = 8;
  o.callbacks = {nan, rec};
  auto h = t.fit(x, y, o);
  BOOST_TEST(nan->terminated_at() > 0);
  BOOST_TEST(t.steps() == nan->terminated_at());  // not one step more
  BOOST_TEST(h["loss"].size() < 50u);
  BOOST_TEST(!std::isfinite(h["loss"].back()));
  BOOST_TEST(rec->seen.back() == "train_end");
}

BOOST_AUTO_TEST_CASE(a_lambda_callback_runs_the_functions_it_was_given) {
  three_classes d{90};
  auto t = classifier();
  int begins = 0, ends = 0;
  std::vector<int64_t> epochs;
  lambda_hooks hooks;
  hooks.on_train_batch_begin = [&](training&, int64_t, int64_t) { ++begins; };
  hooks.on_train_batch_end = [&](training&, const step_info& s) { ends += s.examples > 0; };
  hooks.on_epoch_end = [&](training& tr, int64_t e, const logs&) {
    epochs.push_back(e);
    if (e == 1) tr.stop_training();
  };
  auto o = quiet(5);
  o.batch_size = 30;
  o.callbacks = {lambda_callback(hooks)};
  auto h = t.fit(d.x, d.y, o);
  BOOST_TEST(begins == 6);
  BOOST_TEST(ends == 6);
  BOOST_TEST(epochs == (std::vector<int64_t>{0, 1}), boost::test_tools::per_element());
  BOOST_TEST(h["loss"].size() == 2u);
  BOOST_TEST(t.steps() == 6);
}

BOOST_AUTO_TEST_CASE(early_stopping_restores_the_best_epochs_variables) {
  three_classes d{100};
  auto t = classifier(5);
  early_stopping_options o;
  o.monitor = "loss";
  o.mode = "max";  // the first epoch stays the best
  o.patience = 2;
  o.restore_best = true;
  auto es = std::make_shared<early_stopping>(o);
  auto f = quiet(10);
  f.batch_size = 20;
  f.shuffle = false;
  f.callbacks = {es};
  auto h = t.fit(d.x, d.y, f);
  BOOST_TEST(es->stopped_epoch() == 2);
  BOOST_TEST(h["loss"].size() == 3u);
  // The same trainer, one epoch: its variables are what the stopped fit went back to.
  auto ref = classifier(5);
  auto g = quiet(1);
  g.batch_size = 20;
  g.shuffle = false;
  ref.fit(d.x, d.y, g);
  BOOST_TEST((t.variable("dense/kernel") - ref.variable("dense/kernel")).cwiseAbs().maxCoeff() == 0.0f);
  BOOST_TEST((t.variable("dense_1/bias") - ref.variable("dense_1/bias")).cwiseAbs().maxCoeff() == 0.0f);
}

BOOST_AUTO_TEST_CASE(model_checkpoint_and_csv_logger_write_what_the_trainer_holds) {
  three_classes d{100};
  auto t = classifier();
  auto dir = temp_dir("ckpt");
  std::filesystem::create_directories(dir);
  model_checkpoint_options mo;
  mo.dir = dir + "/every";
  mo.every_steps = 4;
  mo.keep = 2;
  auto mc = std::make_shared<model_checkpoint>(mo);
  auto f = quiet(3);
  f.batch_size = 25;  // 12 steps: checkpoints at 4, 8, 12; the newest 2 kept
  f.callbacks = {mc, csv_logger(dir + "/log.csv")};
  t.fit(d.x, d.y, f);
  BOOST_TEST(mc->asked() == 3);
  auto& fs = posix_file_system();
  auto kept = list_checkpoints(fs, mo.dir);
  BOOST_REQUIRE(kept.size() == 2u);
  BOOST_TEST(kept.back().step == 12);
  auto back = classifier(77);
  back.restore(mo.dir);
  BOOST_TEST((back.variable("dense/kernel") - t.variable("dense/kernel")).cwiseAbs().maxCoeff() == 0.0f);
  std::ifstream csv(dir + "/log.csv");
  std::string line;
  int rows = 0;
  std::getline(csv, line);
  BOOST_TEST(line == "epoch,accuracy,loss");
  while (std::getline(csv, line)) ++rows;
  BOOST_TEST(rows == 3);
  std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(a_throwing_callback_ends_fit_with_its_error_and_the_others_hear_the_failure) {
  three_classes d{60};
  auto t = classifier();
  auto rec = std::make_shared<recorder>();
  lambda_hooks boom;
  boom.on_epoch_end = [](training&, int64_t e, const logs&) {
    if (e == 1) throw std::runtime_error("the log disk is full");
  };
  auto o = quiet(5);
  o.batch_size = 30;
  o.callbacks = {rec, lambda_callback(boom)};
  BOOST_CHECK_EXCEPTION(t.fit(d.x, d.y, o), std::runtime_error,
                        [](const std::runtime_error& e) { return std::string(e.what()) == "the log disk is full"; });
  BOOST_TEST(rec->seen.back() == "train_failed");
  BOOST_TEST(t.steps() == 4);
}

BOOST_AUTO_TEST_CASE(initial_epoch_continues_the_epoch_count) {
  three_classes d{60};
  auto t = classifier();
  auto rec = std::make_shared<recorder>();
  std::ostringstream out;
  auto o = quiet(5);
  o.verbose = 2;
  o.out = &out;
  o.initial_epoch = 3;
  o.batch_size = 30;
  o.callbacks = {rec};
  auto h = t.fit(d.x, d.y, o);
  BOOST_TEST(h["loss"].size() == 2u);
  BOOST_TEST(joined(rec->seen) == "train_begin, epoch_begin 3, epoch_end 3, epoch_begin 4, epoch_end 4, train_end");
  BOOST_TEST(out.str().find("Epoch 4/5") != std::string::npos, out.str());
  BOOST_TEST(out.str().find("Epoch 1/5") == std::string::npos, out.str());
  o.initial_epoch = 5;
  BOOST_CHECK_THROW(t.fit(d.x, d.y, o), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(validation_split_holds_out_the_last_rows_before_shuffling) {
  three_classes d{100};
  auto t = classifier();
  auto o = quiet(3);
  o.batch_size = 16;
  o.validation_split = 0.3;  // rows 70..99
  auto h = t.fit(d.x, d.y, o);
  auto held_out = t.evaluate({d.x.bottomRows(30)}, d.y.bottomRows(30), 30);
  BOOST_TEST(h.last("val_loss") == held_out.at("loss"), boost::test_tools::tolerance(1e-6));
  BOOST_TEST(h.last("val_accuracy") == held_out.at("accuracy"), boost::test_tools::tolerance(1e-9));
  BOOST_TEST(t.steps() == 3 * 5);  // 70 rows in batches of 16
  // A dataset: refused, as Keras does, saying what to do instead.
  BOOST_CHECK_EXCEPTION(t.fit(rows_source(d.x, d.y, 10), o), std::invalid_argument, [](const std::invalid_argument& e) {
    return std::string(e.what()).find("validation_split is for fit(x, y) with tensors") != std::string::npos &&
           std::string(e.what()).find("fit_options::validation") != std::string::npos;
  });
  // Too few rows to split.
  o.validation_split = 0.5;
  BOOST_CHECK_THROW(t.fit(d.x.topRows(1), d.y.topRows(1), o), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(class_weight_scales_each_examples_loss_by_its_class) {
  // The loss: weighted per-example losses over the rows; the gradient row by row.
  three_classes d{8};
  matrix pred = random_matrix(8, 3, 11);
  auto plain = softmax_cross_entropy();
  auto weighted = class_weighted(plain, {{0, 2.0}, {1, 0.0}, {2, 1.0}});
  matrix per, g_plain, g_w;
  plain->per_example(pred, d.y, per);
  plain->compute(pred, d.y, &g_plain);
  double expect = 0;
  for (int r = 0; r < 8; ++r) expect += (d.y(r, 0) == 0 ? 2.0 : d.y(r, 0) == 1 ? 0.0 : 1.0) * per(r, 0);
  BOOST_TEST(weighted->compute(pred, d.y, &g_w) == expect / 8, boost::test_tools::tolerance(1e-6));
  for (int r = 0; r < 8; ++r) {
    const float w = d.y(r, 0) == 0 ? 2.0f : d.y(r, 0) == 1 ? 0.0f : 1.0f;
    BOOST_TEST((g_w.row(r) - w * g_plain.row(r)).cwiseAbs().maxCoeff() < 1e-7f);
  }
  BOOST_CHECK_EXCEPTION(class_weighted(plain, {{0, 1.0}})->compute(pred, d.y, nullptr), std::invalid_argument,
                        [](const std::invalid_argument& e) {
                          return std::string(e.what()).find("no weight for class") != std::string::npos;
                        });

  // In fit: a class weighted 0 is never learnt; with weights 1 it is.
  three_classes big{600, 21};
  auto recall0 = [&](std::map<int64_t, double> w) {
    auto t = classifier(4, 0.05);
    auto o = quiet(15);
    o.batch_size = 50;
    o.class_weight = std::move(w);
    t.fit(big.x, big.y, o);
    matrix p = t.predict({big.x}, 100);
    int hit = 0, n = 0;
    for (int i = 0; i < 600; ++i) {
      if (big.y(i, 0) != 0) continue;
      ++n;
      Eigen::Index c = 0;
      p.row(i).maxCoeff(&c);
      hit += c == 0;
    }
    return static_cast<double>(hit) / n;
  };
  const double learnt = recall0({{0, 1.0}, {1, 1.0}, {2, 1.0}});
  const double ignored = recall0({{0, 0.0}, {1, 1.0}, {2, 1.0}});
  BOOST_TEST(learnt > 0.8);
  BOOST_TEST(ignored < 0.2);
}

BOOST_AUTO_TEST_CASE(bad_fit_options_are_refused_naming_the_field) {
  three_classes d{20};
  auto t = classifier();
  auto expect = [&](fit_options o, const std::string& words) {
    o.verbose = 0;
    BOOST_CHECK_EXCEPTION(t.fit(d.x, d.y, o), std::invalid_argument, [&](const std::invalid_argument& e) {
      bool ok = std::string(e.what()).find(words) != std::string::npos;
      if (!ok) BOOST_TEST_MESSAGE("message: " << e.what());
      return ok;
    });
  };
  fit_options o;
  o.validation_freq = 0;
  expect(o, "validation_freq = 0 < 1");
  o = {};
  o.validation_epochs = {0};
  expect(o, "validation_epochs holds 0");
  o = {};
  o.class_weight = {{1, -1.0}};
  expect(o, "class_weight[1] = -1");
  o = {};
  o.callbacks = {nullptr};
  expect(o, "callbacks[0] is null");
  o = {};
  o.validation_split = 1.0;
  expect(o, "validation_split = 1");
  o = {};
  o.initial_epoch = -1;
  expect(o, "initial_epoch = -1 < 0");
  BOOST_TEST(t.steps() == 0);  // nothing trained on the way
}

// Keras: an epoch that did not validate (validation_freq) is skipped by a val_* monitor;
// without any validation data the monitor is an error naming the keys there.
BOOST_AUTO_TEST_CASE(a_val_monitor_skips_epochs_that_did_not_validate) {
  three_classes d{100};
  auto t = classifier();
  early_stopping_options eo;
  eo.monitor = "val_loss";
  eo.mode = "max";  // a falling val_loss never improves: stops after `patience` validated epochs
  eo.patience = 1;
  auto es = std::make_shared<early_stopping>(eo);
  auto o = quiet(8);
  o.batch_size = 25;
  o.validation_split = 0.2;
  o.validation_freq = 2;  // epochs 1, 3, 5, 7 (from 0) validate
  o.callbacks = {es};
  auto h = t.fit(d.x, d.y, o);
  BOOST_TEST(es->best_epoch() == 1);
  BOOST_TEST(es->stopped_epoch() == 3);  // the next validated epoch
  BOOST_TEST(h["loss"].size() == 4u);
  o.validation_split = 0;
  BOOST_CHECK_EXCEPTION(t.fit(d.x, d.y, o), std::runtime_error, [](const std::runtime_error& e) {
    return std::string(e.what()).find("no 'val_loss' in the logs of epoch 1") != std::string::npos;
  });
}

BOOST_AUTO_TEST_CASE(a_csv_logger_serves_one_fit_after_another) {
  three_classes d{60};
  auto t = classifier();
  auto dir = temp_dir("csv_again");
  std::filesystem::create_directories(dir);
  auto log = csv_logger(dir + "/log.csv");
  auto o = quiet(2);
  o.batch_size = 30;
  o.callbacks = {log};
  t.fit(d.x, d.y, o);
  t.fit(d.x, d.y, o);
  std::ifstream in(dir + "/log.csv");
  std::string line;
  int headers = 0, rows = 0;
  while (std::getline(in, line)) (line.rfind("epoch,", 0) == 0 ? headers : rows)++;
  BOOST_TEST(headers == 1);
  BOOST_TEST(rows == 4);
  std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_SUITE_END()
