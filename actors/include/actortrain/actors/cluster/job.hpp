#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// A job: everything an application defines about its training — model, optimizer,
// loss, metrics, the training pipelines (dataset_fn), fit options, the cluster's tuning
// and callbacks — as one value. A cluster of processes runs it on every task
// (node.hpp: run_node), and the fault simulator trains it under fault plans
// (simulator.hpp: simulate), so an application tests the training it runs.
// This header does not include CAF.

#include <actortrain/actors/cluster/callbacks.hpp>
#include <actortrain/actors/cluster/cluster.hpp>
#include <actortrain/actors/ps/ledger.hpp>
#include <actortrain/dataset/dataset.hpp>
#include <actortrain/model/trainer.hpp>

#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

namespace actortrain {

/// What every task of a job builds the same way.
struct job {
  /// Names the job (and its data) in the fingerprint.
  std::string name;
  model::model structure;
  std::shared_ptr<const model::optimizer> optimizer;
  model::loss_ptr loss;
  /// Fresh metrics (the chief and every worker need their own).
  std::function<std::vector<model::metric_ptr>()> metrics;
  /// The training pipelines: called on the coordinator's task, and on each worker task,
  /// which keeps replicas of every pipeline and takes its training batches from them (a
  /// batch is a function of its pipeline and position, so the replicas agree).
  dataset::dataset_fn train;
  /// Epochs, steps_per_epoch, validation (evaluated on the coordinator's task), verbose.
  model::fit_options fit;
  /// Tuning: seed, partitioner, steps_per_execution, pull_ahead, ... num_ps, num_workers,
  /// request_timeout, checkpoints and the consistency come from the cluster definition
  /// (its consistency, when set, wins).
  cluster_spec spec;
  /// Callbacks of the run (callbacks.hpp), run on the coordinator's task only, as
  /// TensorFlow's ParameterServerStrategy runs them on the chief.
  std::vector<callback_ptr> callbacks;
  /// A custom training loop on the chief instead of fit (train_loop): TensorFlow's
  /// distributed-input loop over `train` for fit.epochs passes, running registered step
  /// `loop_step` ("" the fit step) on the next batch of every replica.
  bool loop = false;
  std::string loop_step;
};

/// The loop of job `j` (j.loop) on cluster `c`, built for the job: `train` as a
/// distributed dataset, each of fit.epochs passes running j.loop_step on every
/// replica's next batch (cluster::run) and printing "Epoch {}, Loss: {:.4f}" to `out`:
/// the mean over the pass of the replicas' mean loss. Returns the run's result (join).
/// The job's validation data, steps_per_epoch and callbacks are not used (a loop has
/// none of them); a resumed run is not (a loop starts over).
fit_result train_loop(cluster& c, const job& j, std::ostream& out);

/// Throws std::invalid_argument naming what job `j` lacks (a model, an optimizer, a loss,
/// training data), as `who` ("run_node", "simulate", "cluster") says it.
void check_job(const job& j, const std::string& who);

/// Run `run` of job `j` on a cluster shaped by `spec` (its input pipelines, workers and
/// consistency), as check_ledgers needs it: the job's dataset_fn and fit options (epochs,
/// steps_per_epoch). `complete` false: the run failed or was stopped, check a prefix.
ledger_run ledger_run_of(const job& j, const cluster_spec& spec, uint64_t run, bool complete = true);

/// The job's variables as check_coverage needs them, on `num_ps` shards (a dynamic
/// table's partitions, one per shard, cover its "rows" [0, num_ps): partition_ledger).
std::vector<ledger_variable> ledger_variables(const job& j, int num_ps);

}  // namespace actortrain
