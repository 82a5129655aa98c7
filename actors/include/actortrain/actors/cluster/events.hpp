#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// The coordinator's event stream. The coordinator never runs user code: it pushes
// events into a bounded queue, and a runner on the application's thread drains it —
// progress output, callbacks and the JSON-lines metrics writer run there. When the
// queue is full, step events are dropped and counted (a slow callback slows only the
// runner, never training); lifecycle events (epoch, worker, run) are always kept.
// No CAF in this header.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <iosfwd>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace actortrain {

enum class event_kind : uint8_t {
  run_begin,       ///< a fit started (run, epochs)
  epoch_begin,     ///< epoch started (expected steps in `count`, -1 unknown)
  step_done,       ///< one step applied (step, worker, loss, examples, staleness, values)
  step_begun,      ///< a step handed to `worker` (pipeline, position; total = the run's
                   ///< steps applied so far): only with run_spec::step_begin_events, not
                   ///< in the metrics file
  epoch_done,      ///< epoch ended (values: loss, metrics, val_*)
  worker_joined,   ///< worker, generation
  worker_lost,     ///< worker, generation, text = why
  steps_requeued,  ///< count steps of a lost worker back in the queue
  dataset_lost,    ///< the dataset shard of `pipeline` is gone; its steps wait for a new one (count 1: a validation pipeline)
  dataset_rebuilt, ///< a new dataset shard serves `pipeline` (from the same positions; count 1: validation)
  checkpoint_done, ///< ("checkpoint") a coordinated checkpoint committed: step in `count`, directory in `text`;
                   ///< values pause_seconds, bytes_to_coordinator (tensor bytes the shards
                   ///< sent for it: 0 with checkpoint_shared)
  ps_lost,         ///< ps shard `count` is gone (text = why); training pauses until it is respawned
  ps_restored,     ///< every shard rolled back to the checkpoint of step `count` (directory in
                   ///< `text`, values: recovery_seconds, steps_lost) under a new recovery epoch
  resumed,         ///< a fit continues the run of the checkpoint of step `count` (directory in `text`)
  evaluation_done, ///< values of an evaluate() call
  warning,         ///< text
  run_done,        ///< the run ended: values/history in `history`, or text = error
  step_no_data,    ///< scheduled step `ticket` found no batch: its pipeline's data had ended
                   ///< in this epoch (`pipeline`)
  eval_batch_begun,  ///< a batch of evaluate() or predict() answered by `worker`, just before
                     ///< its eval_batch_done (`count`: the n-th answered, from 0); only with
                     ///< eval_spec::batch_events, not in the metrics file, dropped like step
                     ///< events when the queue is full
  eval_batch_done,   ///< the same batch (values: evaluate's running loss and metrics)
};

const char* to_string(event_kind k);

struct event {
  event_kind kind = event_kind::warning;
  uint64_t run = 0;
  int64_t epoch = -1;
  uint32_t pipeline = 0;
  uint64_t position = 0;
  uint32_t worker = 0;
  uint64_t generation = 0;
  double loss = 0;
  int64_t examples = 0;
  int64_t count = 0;
  /// step_done: the version staleness of the step (max over its slices of the
  /// partition's version when applied minus the version the step read).
  uint64_t staleness = 0;
  /// step_done in sync mode: the round (from 1); `loss` is then the round's loss.
  uint64_t round = 0;
  /// step_done: steps the run's shards hold, this one included (a roll-back lowers it).
  uint64_t total = 0;
  /// epoch_done with the epoch gate: the gate's id (every gate has its own, also the same
  /// epoch's end again after a roll-back); the application's decision names it.
  uint64_t gate = 0;
  double seconds = 0;  ///< since the run began
  /// The emitting coordinator's epoch: after a take-over, a deposed coordinator's events
  /// have a lower one and can be told apart.
  uint64_t coordinator_epoch = 0;
  /// step_done: microseconds the worker spent fetching the batch, pulling, computing and
  /// pushing.
  uint64_t batch_us = 0, pull_us = 0, compute_us = 0, push_us = 0;
  std::map<std::string, double> values;
  /// step_done and step_no_data of a scheduled step (cluster::schedule): its ticket, and
  /// for step_done what its step function returned. Never dropped by a full queue.
  uint64_t ticket = 0;
  std::map<std::string, double> logs;
  std::map<std::string, std::vector<double>> history;  ///< run_done
  bool failed = false;                                 ///< run_done: the run ended with an error
  std::string text;
};

/// A bounded multi-producer, single-consumer queue of events.
class event_queue {
 public:
  explicit event_queue(size_t capacity = 4096) : capacity_(capacity) {}

  /// Adds `e`. A full queue drops step events (counted) and keeps every other kind.
  /// A waiting consumer is woken at once for every kind but step events, which it finds
  /// when its wait ends (or when the queue is half full).
  void push(event e);
  /// The next event, waiting at most `wait` (zero: do not wait).
  std::optional<event> pop(std::chrono::milliseconds wait = std::chrono::milliseconds(0));
  /// Step events dropped because the queue was full.
  uint64_t dropped() const;
  size_t size() const;

 private:
  mutable std::mutex mtx_;
  std::condition_variable cv_;
  std::deque<event> q_;
  size_t capacity_;
  uint64_t dropped_ = 0;
};

/// Writes events as JSON lines (one object per line; format in the README). Every line
/// also carries "id", a run id unique across writers and processes (this writer's random
/// 64-bit nonce and the run: "3f2a...-1"), so that runs appended to one file are told
/// apart, and "wall", the wall-clock time (Unix seconds).
class metrics_writer {
 public:
  explicit metrics_writer(std::ostream& out);
  void write(const event& e);
  /// The run's last line: "run_done" with "failed" and the error's text, or the run's
  /// final values; its "time" is the run's last event's.
  void write_done(uint64_t run, bool failed, const std::string& text, const std::map<std::string, double>& values);

 private:
  const std::string& id_of(uint64_t run);
  std::ostream& out_;
  uint64_t nonce_;
  uint64_t id_run_ = 0;
  std::string id_;
  double last_seconds_ = 0;
};

}  // namespace actortrain
