#pragma once
// worker: a model replica (structure only). For every step of a task it fetches the
// batch from the step's dataset shard, pulls the parameters from the ps shards (each in
// parallel), runs forward and backward, validates the gradients (shapes, finite — so a
// step is never half-rejected by the shards), pushes each shard its slices in parallel,
// and reports a step_result. A task of k steps (steps_per_execution) runs them in order
// and answers once. Tasks that arrive while one runs wait their turn.
//
//   step_task --busy--> waiting: a queue; start_waiting takes the next one once the
//       |               task that runs is computed (or failed)
//       | not busy
//       v
//     start --> run_next: the task's next step (none left: finish_task) <--------+
//     +--> batch: the prefetched one, else asked now (end_of_data: the rest of   |
//     |      the task is past the data, the open group is pushed); then          |
//     |      prefetch_next asks for the batch of the step after this one         |
//     |      (this task's next, or the first step of the queued task)            |
//     +--> pull: pull_every k: a fresh pull serves k-1 more training steps       |
//     |      (last_pulled); else the round pulled ahead, else send_round;        |
//     |      tables pulled by row: only the batch's rows (send_rows)             |
//     +--> install_round; pull_ahead: send_round for the step after this one     |
//     |      now, so that its parameters arrive while this step computes         |
//     +--> compute: forward, loss, metrics (not training: kept, next step) ------+
//     |      then backward                                                       |
//     +--> validate: check_gradients, every gradient finite (else the task       |
//     |      fails with invalid_gradient)                                        |
//     +--> push_every k: accumulate; fewer than k and steps left: next step -----+
//     |      else push_group: one push of their example-weighted mean            |
//     +--> push: each shard its slices, in parallel; next step at once ----------+
//            (overlap_push), else once every shard acknowledged the push;
//            pull_with_push: the push asks for the task's next step's parameters
//            (open_round), which come with the acknowledgements (round_values)
//   every step computed and every push acknowledged: reply task_result (all k
//   steps, maybe_answer). An error: the first one is the reply (fail_record).
//
// A shard's answer to a round is checked before the step computes on it: each of the
// shard's partitions asked for, once, of its shape (else the task fails naming the shard).
// The worker lets go of pulled parameters before it pushes, so a ps shard in the same
// process can write the next version in place. It fetches the next step's batch while a
// step computes, and with pull_ahead also its parameters (one step more staleness). A
// batch request that bounces off a dead dataset shard fails the task with source_lost
// (the coordinator rebuilds the shard and re-runs the step without counting a failure). Every request has the configured timeout;
// any error ends the task with that error (the coordinator decides what to re-run).
// A push or pull that bounces off a dead ps shard fails the task with shard_lost (not to
// be read as this worker's loss). A task of older epochs than one seen before (a zombie
// coordinator's, or from before a recovery) is refused with fenced_out; each task names
// the ps shards to use, so a respawned shard is used from the next task on.
// Embedding tables whose row ids come straight from a model input are pulled by row:
// only the rows of the step's batch (sparse pushes carry only those rows too).
// Production workers are detached (compute on their own thread); the simulator spawns
// them on the test coordinator, compute inline.

#include <actortrain/actors/data/dataset_shard.hpp>
#include <actortrain/actors/core/messages.hpp>
#include <actortrain/actors/worker/handle.hpp>
#include <actortrain/actors/ps/ps_shard.hpp>
#include <actortrain/actors/core/send_seam.hpp>
#include <actortrain/actors/worker/exchange_options.hpp>
#include <actortrain/actors/worker/shard_routes.hpp>
#include <actortrain/model/loss.hpp>
#include <actortrain/model/metric.hpp>
#include <actortrain/model/model.hpp>
#include <actortrain/model/partitioner.hpp>
#include <actortrain/model/train_step.hpp>

#include <caf/all.hpp>

#include <chrono>
#include <memory>
#include <vector>

namespace actortrain {


/// What a worker needs to know; shared, immutable parts by shared_ptr.
struct worker_options : exchange_options {
  uint32_t id = 0;  ///< tasks carry this id and the generation the coordinator gave it
  model::model structure;
  model::loss_ptr loss;
  /// A custom training step (cluster_spec::train_step); empty: the built-in one.
  model::step_function train_step;
  /// The steps a run of scheduled steps may run by index (cluster_spec::steps;
  /// step_task::step_fn k >= 1 is steps[k - 1]).
  std::vector<model::step_function> steps;
  /// Prototypes: the worker clones them (metric states travel in step results).
  std::vector<std::shared_ptr<const model::metric>> metrics;
  std::shared_ptr<const model::placement> placement;
  std::vector<ps_shard_actor> ps;                 ///< by ps index
  seam_ptr seam;
  /// Where its tensor requests to a shard go (a data-plane stand-in, net/data_plane.hpp);
  /// null or no route: to the shard itself.
  std::shared_ptr<const shard_routes> routes;
  caf::timespan timeout = std::chrono::seconds(60);
  uint64_t seed = 0;  ///< dropout masks: draw(seed, step)
  /// Dataset shards of this worker's own, by pipeline (a cluster of processes: replicas
  /// of the coordinator's, which serve the same batches, since a batch is a function of
  /// its position): training steps take their batches here instead of from the task's
  /// source, so batches never cross the network. Empty: always the task's.
  std::vector<dataset_shard_actor> sources;
  bool detached = true;
  /// Test-only: a defect planted to show the simulator's checks catch it (null: none).
  std::shared_ptr<detail::defect_switch> plant;
};

worker_actor spawn_worker(caf::actor_system& sys, worker_options opts);

}  // namespace actortrain
