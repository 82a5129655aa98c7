#pragma once
// Keras-like callbacks of a cluster's fit (cluster::add_callback). They run on the
// application's thread — the one in fit/join, where the event runner also drives the
// progress line and the metrics file — never inside an actor: a slow callback delays
// only the runner, and when the bounded event queue fills, step events are dropped and
// counted (event_queue::dropped) while training goes on. Like TensorFlow's
// ParameterServerStrategy the hooks see what the coordinator reports; unlike it they
// also see steps, failures and checkpoints.
//
// Built in: csv_logger (one row per epoch, as Keras's CSVLogger) and learning-rate
// schedules (step, exponential, cosine), set at each epoch's beginning with
// cluster::set_hyperparams (the callback runs as the epoch starts, so its first few
// steps may still use the previous rate); they are functions of the epoch, which a
// checkpoint keeps, so a resumed run continues the schedule where it was.
//
// Includes no CAF.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

namespace actortrain {

class cluster;

/// A step applied (its loss, the running epoch means, who computed it, how stale).
struct step_info {
  int64_t epoch = 0;
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

/// Sets hyperparameter "learning_rate" to schedule(epoch) at each epoch's beginning.
callback_ptr learning_rate_schedule(std::function<double(int64_t epoch)> schedule);
/// initial * drop^(floor(epoch / every)).
std::function<double(int64_t)> step_decay(double initial, double drop, int64_t every);
/// initial * rate^epoch.
std::function<double(int64_t)> exponential_decay(double initial, double rate);
/// minimum + (initial - minimum) * (1 + cos(pi * min(epoch, epochs) / epochs)) / 2.
std::function<double(int64_t)> cosine_decay(double initial, int64_t epochs, double minimum = 0);

}  // namespace actortrain
