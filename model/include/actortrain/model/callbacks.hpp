#pragma once
// Keras-style callbacks: one interface for the one-process trainer (trainer.hpp) and the
// cluster (actortrain/actors/cluster/cluster.hpp). A callback is given to one fit call
// (fit_options::callbacks) or, on a cluster, to every later fit (cluster::add_callback).
// Its hooks see a `training`, Keras's `callback.model`: what a callback may ask of the
// fit it observes (stop it, read and set hyperparameters, keep the best state, write a
// checkpoint), the same calls on both.
//
// example[trainer]:
//   model::lambda_hooks print;
//   print.on_epoch_end = [](model::training&, int64_t epoch, const model::logs& l) {
//     std::printf("epoch %d: loss %.4f\n", static_cast<int>(epoch), l.at("loss"));
//   };
//   model::reduce_lr_options plateau;
//   plateau.patience = 2;
//   model::fit_options o;
//   o.epochs = 20;
//   o.validation = test.batch(1000);
//   o.callbacks = {std::make_shared<model::reduce_lr_on_plateau>(plateau),
//                  std::make_shared<model::terminate_on_nan>(), model::lambda_callback(print)};
//   auto h = t.fit(train, o);
//
// Where they run and when epoch ends wait for them: the trainer calls every hook on its
// own thread, between steps, so everything a hook asks for acts at once. A cluster calls
// them on the application's thread (the one in fit/join), never inside an actor, from
// its event stream; what that means for stop_training and hyperparameters — the epoch
// gate — is in actortrain/actors/cluster/callbacks.hpp.
//
// A cluster calls on_test_batch_* and on_predict_batch_* in evaluate() and predict(),
// begin and end together when a batch's answer arrives (its workers compute batches in
// parallel, and only an answered batch is known to exist; `batch` counts the answers
// from 0), not in fit's validation, whose on_test_begin/end it calls at the epoch's end. Hooks only a cluster
// calls: on_failure, on_checkpoint (its coordinated checkpoints).

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace actortrain::model {

/// An epoch's or a batch's values by name: "loss", metrics, "val_*".
using logs = std::map<std::string, double>;

/// A training step done (its loss, the running epoch means, who computed it, how stale).
struct step_info {
  int64_t epoch = 0;
  /// Steps applied in the run (the fit call), this one included (a cluster rolled back
  /// to a checkpoint counts from the checkpoint's step again).
  int64_t step = 0;
  uint32_t worker = 0;
  double loss = 0;
  int64_t examples = 0;
  uint64_t staleness = 0;
  logs values;
};

/// What failed or recovered in a cluster: kind is worker_lost, steps_requeued, ps_lost,
/// ps_restored, dataset_lost or dataset_rebuilt; `index` the worker, ps shard or
/// pipeline; `count` the re-queued steps or the step a restore rolled back to; `text` why.
struct failure_info {
  std::string kind;
  int64_t index = -1;
  int64_t count = 0;
  std::string text;
};

/// What a callback may ask of the training it observes.
class training {
 public:
  virtual ~training() = default;
  /// Ends training (Keras's model.stop_training = true). The trainer stops after the
  /// current step (the epoch's on_epoch_end still runs, with what it did); a cluster at
  /// the next epoch gate (from on_epoch_end: this epoch). A cluster throws
  /// std::logic_error when no callback of the run waits for epoch ends.
  virtual void stop_training() = 0;
  /// The optimizer's hyperparameters as the next step will use them ("learning_rate", ...).
  virtual std::map<std::string, double> hyperparams() const = 0;
  /// Changes hyperparameters from the next step on (a cluster: from the next step to
  /// reach the shards; at the epoch gate, before the next epoch's first). A name or
  /// value the optimizer refuses throws std::invalid_argument naming it and changes nothing.
  virtual void set_hyperparams(const std::map<std::string, double>& values) = 0;
  /// From on_epoch_end: keep a copy of the variables and optimizer state as this epoch
  /// left them (one kept state; a later call replaces it). A cluster throws
  /// std::logic_error elsewhere; the trainer keeps its state whenever asked.
  virtual void keep_state() = 0;
  /// When training ends, the variables go back to the kept state (if one was kept).
  virtual void restore_kept_state_at_end() = 0;
  /// Writes a checkpoint of the training state (values, optimizer slots and step) into
  /// `dir`, keeping its newest `keep`: the format trainer::restore, `actortrain inspect`
  /// and a cluster's resume read. The trainer writes it before returning; a cluster once
  /// no step is in flight (a failed write ends its run).
  virtual void save_checkpoint(const std::string& dir, int keep) = 0;
  /// The directory the training writes checkpoints of its own into ("" if none): a
  /// callback's checkpoints must go elsewhere.
  virtual std::string own_checkpoint_dir() const { return {}; }
  /// Whether the running fit has validation data. Then an epoch whose logs lack val_*
  /// keys did not validate (fit_options::validation_freq), and callbacks monitoring a
  /// val_* key skip it, as Keras's do; without validation data such a monitor is an error.
  virtual bool has_validation() const { return false; }
};

class callback {
 public:
  virtual ~callback() = default;
  /// True: a cluster's epoch ends wait for this callback (the epoch gate), so that its
  /// on_epoch_end may stop training, keep or restore state, or set the next epoch's
  /// hyperparameters before its first step. False (the default): it never holds a
  /// cluster up. The trainer always runs hooks between steps.
  virtual bool waits_for_epoch_end() const { return false; }
  virtual void on_train_begin(training&) {}
  /// `failed`: training ended with an error (fit throws it after the callbacks).
  virtual void on_train_end(training&, bool /*failed*/) {}
  virtual void on_epoch_begin(training&, int64_t /*epoch*/) {}
  /// `l`: the epoch's loss, metrics and, when it validated, val_* values.
  virtual void on_epoch_end(training&, int64_t /*epoch*/, const logs& /*l*/) {}
  /// Before a training step: the trainer's step `step` (this fit's, from 1) of `epoch`;
  /// a cluster's when the coordinator hands the step to a worker (`step`: the steps
  /// applied by then plus its place in the task, an estimate; a step re-run after a
  /// failure begins again, and so do the probes past the end of an epoch's data that
  /// find no batch). A cluster sends these only while a callback's wants_batch_begin()
  /// is true.
  virtual bool wants_batch_begin() const { return true; }
  virtual void on_train_batch_begin(training&, int64_t /*epoch*/, int64_t /*step*/) {}
  virtual void on_train_batch_end(training&, const step_info&) {}
  /// evaluate(), and fit's validation at an epoch's end.
  virtual void on_test_begin(training&) {}
  virtual void on_test_batch_begin(training&, int64_t /*batch*/) {}
  virtual void on_test_batch_end(training&, int64_t /*batch*/, const logs& /*running*/) {}
  virtual void on_test_end(training&, const logs& /*l*/) {}
  virtual void on_predict_begin(training&) {}
  virtual void on_predict_batch_begin(training&, int64_t /*batch*/) {}
  virtual void on_predict_batch_end(training&, int64_t /*batch*/) {}
  virtual void on_predict_end(training&) {}
  /// A cluster lost or recovered a part (failure_info).
  virtual void on_failure(training&, const failure_info&) {}
  /// A cluster committed a coordinated checkpoint at `step` in `dir`.
  virtual void on_checkpoint(training&, int64_t /*step*/, const std::string& /*dir*/) {}
};

using callback_ptr = std::shared_ptr<callback>;

/// Appends one CSV row per epoch to `path`: epoch,<keys in sorted order>; the header is
/// written when the file is new or empty. A file that cannot be written throws
/// std::runtime_error from on_train_begin, naming it.
callback_ptr csv_logger(std::string path);

/// Keras's EarlyStopping. After each epoch, `monitor` (a key of the epoch's logs:
/// "val_loss", "accuracy", ...) improves when it beats the best so far by more than
/// min_delta (lower is better, or higher with mode "max"; "auto": higher for names
/// holding "acc"); after `patience` epochs without improvement (0 acts as 1, as in
/// Keras), training stops. With restore_best, every improving epoch's state is kept and
/// training ends with it (keep_state, restore_kept_state_at_end). A monitor missing from
/// the logs fails the fit, naming the keys there. An epoch that ends again after a
/// cluster rolled back past the best one is the best again (its state is kept anew).
struct early_stopping_options {
  std::string monitor = "val_loss";
  int64_t patience = 0;
  double min_delta = 0;
  std::string mode = "auto";  ///< "min", "max" or "auto"
  bool restore_best = false;
};

class early_stopping : public callback {
 public:
  explicit early_stopping(early_stopping_options o);
  bool wants_batch_begin() const override { return false; }
  bool waits_for_epoch_end() const override { return true; }
  void on_train_begin(training&) override;
  void on_epoch_end(training&, int64_t epoch, const logs& l) override;
  /// The best value and its epoch (from 0; -1 before the first epoch), and the epoch
  /// after which training was stopped (-1: it was not).
  double best() const { return best_; }
  int64_t best_epoch() const { return best_epoch_; }
  int64_t stopped_epoch() const { return stopped_epoch_; }

 private:
  early_stopping_options o_;
  bool higher_ = false;
  double best_ = 0;
  int64_t best_epoch_ = -1, stopped_epoch_ = -1;
};

/// Keras's ModelCheckpoint (training::save_checkpoint: values, optimizer slots and step;
/// `actortrain inspect` reads them, trainer::restore and a cluster's resume load them):
/// with every_steps > 0, a checkpoint each time that many more steps were done; with
/// `monitor` set, one at each epoch end whose value is the best so far (mode as
/// early_stopping's). `dir` keeps the newest `keep`. Refuses the training's own
/// checkpoint directory (its checkpoints are kept by other rules).
struct model_checkpoint_options {
  std::string dir;
  int64_t every_steps = 0;
  std::string monitor;  ///< "" = none
  std::string mode = "auto";
  int keep = 1;
};

class model_checkpoint : public callback {
 public:
  explicit model_checkpoint(model_checkpoint_options o);
  bool wants_batch_begin() const override { return false; }
  /// With a monitor: the best epoch's checkpoint is its end state.
  bool waits_for_epoch_end() const override { return !o_.monitor.empty(); }
  void on_train_begin(training&) override;
  void on_train_batch_end(training&, const step_info&) override;
  void on_epoch_end(training&, int64_t epoch, const logs& l) override;
  /// Checkpoints asked for so far, and the epochs whose best value asked for one.
  int64_t asked() const { return asked_; }
  const std::vector<int64_t>& best_epochs() const { return best_epochs_; }

 private:
  model_checkpoint_options o_;
  bool higher_ = false;
  double best_ = 0;
  bool have_best_ = false;
  int64_t next_due_ = 0, asked_ = 0;
  std::vector<int64_t> best_epochs_;
};

/// Sets hyperparameter "learning_rate" to schedule(epoch) at each epoch's beginning
/// (Keras's LearningRateScheduler).
callback_ptr learning_rate_schedule(std::function<double(int64_t epoch)> schedule);
/// initial * drop^(floor(epoch / every)).
std::function<double(int64_t)> step_decay(double initial, double drop, int64_t every);
/// initial * rate^epoch.
std::function<double(int64_t)> exponential_decay(double initial, double rate);
/// minimum + (initial - minimum) * (1 + cos(pi * min(epoch, epochs) / epochs)) / 2.
std::function<double(int64_t)> cosine_decay(double initial, int64_t epochs, double minimum = 0);

/// Keras's ReduceLROnPlateau: when `monitor` has not improved (by more than min_delta,
/// mode as early_stopping's) for `patience` epochs, learning_rate becomes
/// max(learning_rate * factor, min_lr); then `cooldown` epochs pass before the count
/// starts again; reduced_after() and rates() say when and to what. A monitor missing from the logs fails the fit, naming the keys there.
struct reduce_lr_options {
  std::string monitor = "val_loss";
  double factor = 0.1;  ///< in (0, 1)
  int64_t patience = 10;
  std::string mode = "auto";
  double min_delta = 1e-4;
  int64_t cooldown = 0;
  double min_lr = 0;
};

class reduce_lr_on_plateau : public callback {
 public:
  explicit reduce_lr_on_plateau(reduce_lr_options o);
  bool wants_batch_begin() const override { return false; }
  bool waits_for_epoch_end() const override { return true; }
  void on_train_begin(training&) override;
  void on_epoch_end(training&, int64_t epoch, const logs& l) override;
  /// The epochs (from 0) after which it lowered the rate, and the rates it set.
  const std::vector<int64_t>& reduced_after() const { return reduced_after_; }
  const std::vector<double>& rates() const { return rates_; }

 private:
  reduce_lr_options o_;
  bool higher_ = false;
  bool have_best_ = false;
  double best_ = 0;
  int64_t wait_ = 0, cooldown_left_ = 0;
  std::vector<int64_t> reduced_after_;
  std::vector<double> rates_;
};

/// Keras's TerminateOnNaN: a step whose loss is NaN or infinite stops training
/// (training::stop_training: the trainer after that step, a cluster at that epoch's end).
/// terminated_at() is the step (-1: none).
class terminate_on_nan : public callback {
 public:
  bool wants_batch_begin() const override { return false; }
  bool waits_for_epoch_end() const override { return true; }
  void on_train_begin(training&) override { at_ = -1; }
  void on_train_batch_end(training&, const step_info&) override;
  int64_t terminated_at() const { return at_; }

 private:
  int64_t at_ = -1;
};

/// Keras's LambdaCallback: each hook a function, or empty to do nothing there.
struct lambda_hooks {
  std::function<void(training&)> on_train_begin;
  std::function<void(training&, bool failed)> on_train_end;
  std::function<void(training&, int64_t epoch)> on_epoch_begin;
  std::function<void(training&, int64_t epoch, const logs&)> on_epoch_end;
  std::function<void(training&, int64_t epoch, int64_t step)> on_train_batch_begin;
  std::function<void(training&, const step_info&)> on_train_batch_end;
  /// True: a cluster's epoch ends wait for the hooks (callback::waits_for_epoch_end).
  bool waits_for_epoch_end = false;
};
/// (Its wants_batch_begin() is whether on_train_batch_begin is set.)
callback_ptr lambda_callback(lambda_hooks hooks);

}  // namespace actortrain::model
