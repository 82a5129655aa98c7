#pragma once
// What the application asks of the coordinator (coordinator.hpp): runs, evaluations,
// epoch-gate decisions and the status report, and what it answers.

#include <actortrain/actors/core/step_id.hpp>
#include <actortrain/actors/core/tensor.hpp>

#include <actortrain/actors/data/handle.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace actortrain {

/// One fit call: train on `pipelines` (dataset shards, one per input pipeline) for
/// `epochs`; evaluate on `eval_pipelines` after every epoch when there are any.
struct run_spec {
  std::vector<dataset_shard_actor> pipelines;
  std::vector<dataset_shard_actor> eval_pipelines;
  int32_t epochs = 1;
  int64_t steps_per_epoch = 0;  ///< 0: an epoch ends with the data of every pipeline
  bool visitation_log = false;  ///< return a visit per applied step in run_summary
  /// Continue the run saved in the newest committed checkpoint under this directory.
  std::string resume_from;
  /// The epoch gate: after each epoch_done event the coordinator waits (at most its
  /// request timeout) for the application's gate_decision before the next epoch begins
  /// or the run ends: Keras's synchronous epoch-end callbacks.
  bool epoch_gate = false;
  /// Set on every shard before the run's first step (what the callbacks' on_epoch_begin
  /// of the first epoch asked for: a learning-rate schedule's first rate).
  std::vector<std::pair<std::string, double>> hyperparams;
  /// Keras's initial_epoch: the run's first epoch (fit_options::initial_epoch).
  int32_t initial_epoch = 0;
  /// Validate after the epochs fit_options::validation_freq / validation_epochs name.
  int32_t validation_freq = 1;
  std::vector<int64_t> validation_epochs;
  /// Emit a step_begun event for each step handed to a worker (callbacks' on_train_batch_begin).
  bool step_begin_events = false;
  /// Nonzero: a run of scheduled steps (cluster::begin_steps), and the id its grants
  /// (step_grants::loop) name. It dispatches a step only for a grant, in the order
  /// granted, one step per task; its epochs turn when every pipeline's data ended or at
  /// a grant's epoch mark; it ends once its grants are closed and every granted step is
  /// applied. `epochs` is ignored.
  uint64_t on_demand = 0;
};

/// Steps the application scheduled in a run of scheduled steps (grant_atom): tickets
/// first, first + 1, ... in order, each running step function steps[k] (step_task::step_fn)
/// on the next batch of input pipeline replicas[k] (-1: any pipeline, as fit takes them).
/// A step of epoch_mark ends the current epoch there (a distributed dataset's next pass):
/// every pipeline counts as at its end once the steps granted before are applied. `end`:
/// no more grants; the run ends once every step granted is applied. A repeated grant
/// (first already granted) is ignored.
struct step_grants {
  static constexpr uint32_t epoch_mark = UINT32_MAX;
  uint64_t loop = 0;  ///< the run's run_spec::on_demand
  uint64_t first = 1;
  std::vector<uint32_t> steps;
  std::vector<int32_t> replicas;
  bool end = false;
};

/// Whether run `s` validates after `epoch` (from 0): after the epochs (from 1) listed in
/// validation_epochs, or when none are, after every validation_freq-th.
bool validates_after(const run_spec& s, int64_t epoch);

/// What the application decided at an epoch gate (gate_atom, run, epoch, decision),
/// carried out in this order: keep, hyperparameters, then the next epoch or, when
/// stopping or after the last epoch, the restore and the end of the run. (A checkpoint
/// asked for at the gate is a ckpt_atom request sent just before: it is written before
/// the next epoch's first step, or before the run ends.)
struct gate_decision {
  uint64_t gate = 0;  ///< the gate decided for (event::gate of its epoch_done)
  bool stop = false;  ///< end the run now (Keras's stop_training)
  bool keep = false;  ///< every shard keeps a copy of its state as this epoch left it
  bool restore_at_end = false;  ///< the run ends with the shards back at the kept state
  std::vector<std::pair<std::string, double>> hyperparams;  ///< set on every shard before the next epoch
};

/// Values per epoch (Keras's History) as parallel vectors.
struct run_summary {
  uint64_t run = 0;
  std::vector<std::string> keys;
  std::vector<std::vector<double>> values;
  int64_t steps = 0;
  bool ran_out = false;  ///< steps_per_epoch outlasted the data
  std::vector<visit> visits;  ///< with run_spec::visitation_log, in the order applied
  int64_t stopped_epoch = -1;  ///< the epoch after which a gate decision stopped the run
  int64_t restored_epoch = -1;  ///< the epoch whose kept state the shards were restored to
};

/// Evaluate once over `pipelines` (every batch once); with `outputs` (predict), collect
/// the model's outputs instead of loss and metrics.
struct eval_spec {
  std::vector<dataset_shard_actor> pipelines;
  bool outputs = false;
  /// Emit eval_batch_begun and eval_batch_done events (callbacks' on_test_batch_* and
  /// on_predict_batch_*).
  bool batch_events = false;
};

struct eval_summary {
  std::vector<std::string> keys;
  std::vector<double> values;
  /// With eval_spec::outputs: one per batch, by pipeline, then position.
  std::vector<tensor> outputs;
};

struct worker_report {
  uint32_t id = 0;
  uint64_t generation = 0;
  bool alive = true;
  bool busy = false;
  uint64_t steps = 0;             ///< steps it computed that were applied, this run
  double steps_per_second = 0;    ///< over its last applied steps (up to 64, within 10 s)
  double mean_staleness = 0;      ///< of those steps
};

struct partition_report {
  std::string variable;
  int32_t index = 0;
  int64_t row_begin = 0;
  int64_t row_end = 0;
  int64_t cols = 0;
  uint64_t version = 0;  ///< updates applied to it
};

struct shard_report {
  uint32_t shard = 0;
  std::string error;  ///< why it did not answer ("" = it did)
  uint64_t applied = 0;  ///< steps in its state
  uint64_t base = 0;     ///< the checkpoint step it was restored to (0: none)
  std::vector<partition_report> partitions;
};

/// What the coordinator says of a running cluster (report_atom): workers, ps shards, the
/// last checkpoint and the recent failures and recoveries. describe() renders it.
struct status_report {
  uint64_t run = 0;
  bool training = false;
  int64_t epoch = -1;
  uint64_t steps_applied = 0;
  double uptime = 0;  ///< seconds since the coordinator started
  std::vector<worker_report> workers;
  std::vector<shard_report> shards;
  int64_t checkpoint_step = -1;  ///< the last committed (-1: none)
  std::string checkpoint_dir;
  double checkpoint_age = 0;  ///< seconds since it committed
  std::vector<std::pair<double, std::string>> recent;  ///< (seconds since start, what), oldest first
};

/// The report as text, one line per worker, shard and recent event.
std::string describe(const status_report& r);

}  // namespace actortrain
