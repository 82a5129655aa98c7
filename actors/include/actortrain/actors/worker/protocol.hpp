#pragma once
// What the coordinator asks of a worker (worker.hpp) and what it answers.

#include <actortrain/actors/core/fence.hpp>
#include <actortrain/actors/core/step_id.hpp>
#include <actortrain/actors/core/tensor.hpp>

#include <actortrain/actors/data/handle.hpp>
#include <actortrain/actors/ps/handle.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace actortrain {

/// k consecutive steps of one pipeline to run (steps_per_execution = k), with the
/// dataset shard that serves them.
struct step_task {
  fence f;
  dataset_shard_actor source;  ///< the dataset shard serving these steps' batches
  std::vector<step_id> steps;  ///< consecutive positions of one pipeline, one epoch
  uint64_t epoch = 0;
  uint64_t epoch_begin = 0;    ///< position where that epoch starts
  bool training = true;        ///< false: evaluation (forward only, no push)
  bool outputs = false;        ///< evaluation for predict: return the model's outputs, skip loss and metrics
  /// Per pipeline of the run: every position below is applied on every shard (the
  /// coordinator's watermark; workers pass it on in their pushes).
  std::vector<uint64_t> watermark;
  /// The ps shards by index as the coordinator knows them (a lost shard is respawned
  /// under a new handle); the worker pulls from and pushes to these from this task on.
  std::vector<ps_shard_actor> ps;
  /// The step function (a run of scheduled steps: cluster::schedule): 0 the fit's step
  /// (cluster_spec::train_step, or the built-in one), k >= 1 cluster_spec::steps[k - 1].
  uint32_t step_fn = 0;
  /// The scheduled step this task runs (0: a step of fit); such a task holds one step,
  /// and its result carries the step function's logs.
  uint64_t ticket = 0;
};

/// Microseconds spent per phase of a step.
struct phase_timings {
  uint64_t batch_us = 0;
  uint64_t pull_us = 0;
  uint64_t compute_us = 0;
  uint64_t push_us = 0;
};

struct step_result {
  step_id step;
  uint32_t worker = 0;
  uint64_t generation = 0;
  bool end_of_data = false;  ///< the pipeline had no batch at this position
  double loss = 0;           ///< batch-mean loss
  int64_t example_count = 0;
  std::vector<std::vector<double>> metric_states;  ///< metric::state() per compiled metric
  uint64_t max_staleness = 0;
  phase_timings timings;
  tensor outputs;  ///< the model's outputs for the batch, when the task asked for them
  uint64_t digest = 0;  ///< of the batch (dataset::element_digest), for the ledgers
  /// What the step function returned (only for a scheduled step: step_task::ticket).
  std::vector<std::pair<std::string, double>> logs;
};

struct task_result {
  std::vector<step_result> steps;
};

}  // namespace actortrain
