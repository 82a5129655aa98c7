#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// Keras-like callbacks of a cluster's fit (cluster::add_callback). They run on the
// application's thread — the one in fit/join, where the event runner also drives the
// progress line and the metrics file — never inside an actor. A callback never holds
// training up: a slow one delays only the runner, and when the bounded event queue
// (cluster_spec::event_queue_capacity) fills, step events are dropped and counted
// (fit_result::dropped_events) while training goes on. The exception is one that asks
// for it: when a callback's waits_for_epoch_end() is true (early stopping, schedules,
// best-model checkpoints), epoch ends are synchronous, as in Keras and in TensorFlow's
// ParameterServerStrategy: the coordinator waits at each epoch's end (the epoch gate,
// cluster.hpp) until on_epoch_end and the next on_epoch_begin have run — at most the
// request timeout — so what they do (cluster::stop_training, keep_state,
// set_hyperparams, checkpoint_async) acts on exactly that epoch's end state.
//
// Built in: early_stopping (monitor, patience, min_delta, restore best through the ps
// shards' kept state), learning-rate schedules (step, exponential, cosine; set with
// cluster::set_hyperparams at the gate, so every step of an epoch uses its rate; the
// rate is a function of the epoch, which checkpoints keep with the optimizer's
// hyperparameters, so a resumed run continues the schedule where it was),
// model_checkpoint (every N steps, or at the best monitored value) and csv_logger (one
// row per epoch, as Keras's CSVLogger).
//
// Includes no CAF.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace actortrain {

class cluster;

/// A step applied (its loss, the running epoch means, who computed it, how stale).
struct step_info {
  int64_t epoch = 0;
  /// Steps applied in the run, this one included (after a ps restore it counts from the
  /// checkpoint's step again).
  int64_t step = 0;
  uint32_t worker = 0;
  double loss = 0;
  int64_t examples = 0;
  uint64_t staleness = 0;
  std::map<std::string, double> values;
};

/// What failed or recovered: kind is worker_lost, steps_requeued, ps_lost, ps_restored,
/// dataset_lost or dataset_rebuilt; `index` the worker, ps shard or pipeline; `count` the
/// re-queued steps or the step a restore rolled back to; `text` why.
struct failure_info {
  std::string kind;
  int64_t index = -1;
  int64_t count = 0;
  std::string text;
};

class callback {
 public:
  virtual ~callback() = default;
  /// True: epoch ends wait for this callback (the epoch gate), so that its on_epoch_end
  /// may stop training, keep or restore state, or set the next epoch's hyperparameters
  /// before its first step. False (the default): it never holds training up.
  virtual bool waits_for_epoch_end() const { return false; }
  virtual void on_train_begin(cluster&) {}
  /// `failed`: the run ended with an error (join throws it after the callbacks).
  virtual void on_train_end(cluster&, bool /*failed*/) {}
  virtual void on_epoch_begin(cluster&, int64_t /*epoch*/) {}
  /// `logs`: the epoch's loss, metrics and val_* values.
  virtual void on_epoch_end(cluster&, int64_t /*epoch*/, const std::map<std::string, double>& /*logs*/) {}
  virtual void on_step_end(cluster&, const step_info&) {}
  virtual void on_failure(cluster&, const failure_info&) {}
  virtual void on_checkpoint(cluster&, int64_t /*step*/, const std::string& /*dir*/) {}
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
/// Keras), training stops
/// (cluster::stop_training). With restore_best, every improving epoch's state is kept
/// by the shards and the run ends with it (cluster::keep_state,
/// restore_kept_state_at_end). A monitor missing from the logs fails the run, naming the
/// keys there. An epoch that ends again after a ps restore rolled the run back past the
/// best one is the best again (its state is kept anew).
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
  bool waits_for_epoch_end() const override { return true; }
  void on_train_begin(cluster&) override;
  void on_epoch_end(cluster&, int64_t epoch, const std::map<std::string, double>& logs) override;
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

/// Keras's ModelCheckpoint, in the cluster's checkpoint format (cluster::checkpoint_async:
/// values, optimizer slots and run state; `actortrain inspect` reads them, fit resumes
/// them): with every_steps > 0, a checkpoint each time that many more steps were applied;
/// with `monitor` set, one at each epoch end whose value is the best so far (mode as
/// early_stopping's). `dir` keeps the newest `keep`. Refuses the cluster's own
/// checkpoint_dir (its checkpoints are kept by other rules).
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
  /// With a monitor: the best epoch's checkpoint is its end state.
  bool waits_for_epoch_end() const override { return !o_.monitor.empty(); }
  void on_train_begin(cluster&) override;
  void on_step_end(cluster&, const step_info&) override;
  void on_epoch_end(cluster&, int64_t epoch, const std::map<std::string, double>& logs) override;
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

/// Sets hyperparameter "learning_rate" to schedule(epoch) at each epoch's beginning.
callback_ptr learning_rate_schedule(std::function<double(int64_t epoch)> schedule);
/// initial * drop^(floor(epoch / every)).
std::function<double(int64_t)> step_decay(double initial, double drop, int64_t every);
/// initial * rate^epoch.
std::function<double(int64_t)> exponential_decay(double initial, double rate);
/// minimum + (initial - minimum) * (1 + cos(pi * min(epoch, epochs) / epochs)) / 2.
std::function<double(int64_t)> cosine_decay(double initial, int64_t epochs, double minimum = 0);

}  // namespace actortrain
