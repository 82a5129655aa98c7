#pragma once
// coordinator: TensorFlow's ClusterCoordinator as an actor. Owns membership (workers it
// monitors, with generations), the step queue and the dispatch gate, in-flight tracking,
// epochs and steps_per_epoch, end-of-data handling, epoch-end evaluation (distributed
// over the workers, every validation batch once), and the event stream. It never runs
// user code: events go to a bounded queue drained on the application's thread.
//
//  +------+  fit   +--------------+  start_run: the shards' state if they have none (first
//  | idle |------->| initializing |  fit: init_shards, every ps shard its partitions), start-up
//  +------+        +--------------+  fence (new recovery epoch), hyperparameters; or resume()
//    ^  ^                 | begin_run: begin_epoch; the run's start committed before any step
//    |  |                 v                  checkpoint due  +-------------------------------+
//    |  |   +----------------------------+ ----------------> | quiescing: new steps held     |
//    |  |   | training: dispatch gate    |                   | (re-queued ones go out); none |
//    |  |   |  async | bounded staleness | <---------------- | in flight: every shard's      |
//    |  |   |  | sync rounds (closed by  |  written          | snapshot at one step          |
//    |  |   |  round_request to shards)  |                   +-------------------------------+
//    |  |   +----------------------------+ <---------------- +-------------------------------+
//    |  |     | epoch's steps applied       restored         | recovering: a ps shard lost   |
//    |  |     v                                              | (any phase): nothing goes out |
//    |  |   end_epoch --with validation--> +------------+    | until replace, then a restore |
//    |  |     |  ^                         | evaluating |-+  | of the run's newest good      |
//    |  |     |  |                         +------------+ |  | checkpoint, new recovery epoch|
//    |  |     |  +------------ all batches done ----------+  +-------------------------------+
//    |  |     | epoch_done event
//    |  |     +-- more epochs: begin_epoch --> training
//    |  |     +-- epoch_gate --> +-------+  gate_decision or timeout (release_gate): keep,
//    |  |     |                  | gated |  hyperparameters, then begin_epoch --> training
//    |  |     | last epoch,      +-------+
//    |  |     | data ran out         | stop, last epoch
//    |  +-----+----------------------+-- finish_run: final checkpoint, reply run_summary
//    +--------- fail_run (an error, any phase): reply the error
//
// The phase is coord_state::ph (state.hpp); quiescing/checkpointing and recovering/lost_ps
// are flags over it. start_run, begin_run, on_ps_down, recover, restore_all: recovery.cpp, acting on the CAF-free
// recovery_plan (which recovery, which checkpoint and run state, what when none serves, which epochs); next_task
// (the gate's room), close_round, count_step, dispatch: dispatch.cpp; finish_run, fail_run: coordinator.cpp;
// end_epoch, start_eval, release_gate: epochs.cpp; write_checkpoint_now: checkpoints.cpp. A restore in a run
// (load_run) goes back to training, also from evaluating or gated; evaluate(): initializing -> evaluating -> idle.
//
// Steps. A step id is (run, pipeline, position); positions count on across epochs, and
// with steps_per_epoch = 0 an epoch of a pipeline ends at its first end_of_data reply.
// Workers get tasks of steps_per_execution consecutive positions of one pipeline,
// pipelines taken round-robin, up to tasks_per_worker unanswered tasks each (the worker
// queues them); re-queued steps go first, but not to the worker generation they just
// failed on while another worker is alive. Each task carries the watermark (per
// pipeline, the lowest position not known applied) that lets shards forget old step ids.
// Answers are matched by task id. The dispatch gate is the consistency mode (see
// dispatch_gate): asynchronous, bounded staleness, or synchronous rounds, which the
// coordinator closes with a round_request to every shard once each of the round's steps
// is answered (its pushes held); the steps count as applied, with events and
// checkpoints, when every shard applied the round.
//
// Checkpoints and recovery. A checkpoint falls due every checkpoint_every applied steps
// or checkpoint_interval: dispatch pauses except for re-queued steps, and once nothing
// is in flight or queued every shard's snapshot is written at one step with the
// coordinator's run state (positions, counters, history, visitation log) and the
// partitions' ledgers in the manifest's "extra". Every run commits its own start before
// its first step: a checkpoint written then, or — when nothing changed since the
// previous run's final checkpoint — that one, marked as this run's start (its manifest
// gains the run's starting state). A lost ps shard (monitored) pauses everything
// (ps_lost event) until a replacement arrives (replace), then every shard is restored
// from the newest checkpoint *of the current run* that reads back whole (a corrupt one
// is skipped with a warning naming it; none: the run fails naming each and its fault)
// under a new recovery epoch, with the run state, so the steps after it run again;
// pushes from before the restore carry the old epoch and are refused. A shard lost
// before the run's start is committed (while the run starts, or while its first
// checkpoint is written) gets the state the run starts from: the newest good checkpoint
// of any run, else the initial values. A fit asked for while a shard is lost waits for
// the replacement (at most worker_wait). fit with run_spec::resume_from restores the
// newest checkpoint with its newest run state under a new coordinator epoch (max of
// every shard's and the checkpoint's + 1) and continues that run.
//
// Runs. Each fit is a new run (its id counts up); it begins by fencing every shard under
// new epochs, so a failed run's late pushes are refused, and a failed run leaves nothing
// pending: its tasks' late answers find no task to match. Control requests to the
// shards (fences, snapshots, inits, stats, keep/restore, hyperparameters, round
// manifests) are retried after a timeout, up to 3 attempts, and are idempotent at the
// shard (ps_shard.hpp); after the last attempt the run fails naming the shard, the
// request and the attempts.
//
// Faults. A worker that goes down (down message, or a task bounced off its mailbox) has
// its steps re-queued only after every ps shard acknowledged the fence that excludes its
// generation (so a late push of the lost worker cannot be applied); a worker that joins
// (join) gets the next generation. With every worker lost the run waits worker_wait for
// one to join. A lost dataset shard pauses its pipeline (dataset_lost event) until a new
// one is handed over (source). With speculate_after, a straggling task also runs on
// another worker. Application errors (user_error, invalid_gradient, invalid_request: see
// is_application_error) end the run at once;
// transport errors re-run the step, and a step failing `poison_limit` times ends the run
// (poison_step).

#include <actortrain/actors/coordinator/dispatch_gate.hpp>
#include <actortrain/actors/cluster/events.hpp>
#include <actortrain/actors/core/messages.hpp>
#include <actortrain/actors/ps/ps_shard.hpp>
#include <actortrain/actors/core/send_seam.hpp>
#include <actortrain/actors/worker/worker.hpp>
#include <actortrain/model/metric.hpp>
#include <actortrain/model/optim/groups.hpp>
#include <actortrain/model/optim/optimizer.hpp>
#include <actortrain/model/partitioner.hpp>
#include <actortrain/model/checkpoint/file_system.hpp>
#include <actortrain/model/variable.hpp>

#include <caf/all.hpp>

#include <memory>
#include <vector>

namespace actortrain {

using coordinator_actor = caf::typed_actor<
  caf::replies_to<fit_atom, run_spec>::with<run_summary>,
  caf::replies_to<eval_atom, eval_spec>::with<eval_summary>,
  // Workers (state, generation, step rate, staleness), ps shards (partitions, sizes,
  // versions), the last checkpoint, recent failures and recoveries.
  caf::replies_to<report_atom>::with<status_report>,
  // New optimizer hyperparameters for every ps shard (under the coordinator's fence);
  // ok once every shard took them, else the first shard's error.
  caf::replies_to<hyper_atom, hyperparams_request>::with<caf::ok_atom>,
  caf::replies_to<join_atom, worker_actor, uint32_t>::with<uint64_t>,  // a worker joins: its generation
  // Sent to itself when every worker is lost: the run fails unless one joined since.
  caf::reacts_to<outage_atom, uint64_t>,
  // A new dataset shard for a pipeline whose shard was lost (dataset_lost event); with
  // true, for a validation pipeline of the run.
  caf::replies_to<source_atom, uint32_t, dataset_shard_actor, bool>::with<caf::ok_atom>,
  // Sent to itself when a task has run speculate_after x the median: maybe re-run it.
  caf::reacts_to<slow_atom, uint64_t>,
  // A respawned ps shard for index `i` after a ps_lost event; once every lost shard is
  // replaced, all shards roll back to the last committed checkpoint.
  caf::replies_to<replace_atom, uint32_t, ps_shard_actor>::with<caf::ok_atom>,
  // Sent to itself: checkpoint_interval has passed (the id is the tick's).
  caf::reacts_to<ckpt_atom, uint64_t>,
  // A checkpoint of the run into another directory (keeping its newest `keep`), at the
  // next point with no step in flight: its path.
  caf::replies_to<ckpt_atom, checkpoint_target, int32_t>::with<std::string>,
  // The application's decision at the epoch gate of (run, epoch) (run_spec::epoch_gate);
  // ok once it is carried out up to the next epoch's start.
  caf::replies_to<gate_atom, uint64_t, int64_t, gate_decision>::with<caf::ok_atom>,
  // Sent to itself: the gate with this id waited the request timeout.
  caf::reacts_to<gate_atom, uint64_t>,
  // Sent to itself when a ps shard is lost: the run fails unless it was replaced since.
  caf::reacts_to<recover_atom, uint64_t>,
  // Steps the application scheduled in a run of scheduled steps (run_spec::on_demand).
  caf::reacts_to<grant_atom, step_grants>>;

struct coordinator_options {
  std::vector<ps_shard_actor> ps;
  std::vector<worker_actor> workers;  ///< ids 0..n-1, generation 1
  std::shared_ptr<const model::placement> placement;
  /// Initial values of every variable (sent to the shards before the first step).
  std::shared_ptr<const model::parameter_store> initial;
  /// The model's seed: a dynamic table's rows start from model::variable_seed(seed, its
  /// variable) on its shards (initial has no rows of it).
  uint64_t seed = 0;
  std::vector<std::string> variable_names;
  std::vector<std::shared_ptr<const model::metric>> metrics;  ///< prototypes (merge states)
  /// The consistency mode; null: dispatch_when_free(). With sync_rounds the ps shards
  /// must hold pushes (ps_shard_options::policy = hold_for_round()).
  std::shared_ptr<dispatch_gate> gate;
  std::shared_ptr<event_queue> events;  ///< may be null
  seam_ptr seam;
  caf::timespan timeout = std::chrono::seconds(60);
  int32_t steps_per_execution = 1;
  /// Tasks sent to a worker before it answers (it queues them): the worker starts its
  /// next task without a round trip to the coordinator, and with 3 the task after that
  /// is already queued while a step computes, so its batch is fetched in advance.
  int32_t tasks_per_worker = 3;
  int32_t poison_limit = 3;
  /// Speculative re-execution of stragglers: a training task still unanswered after
  /// this many times the median task time (over the last 64, once 8 are known) is also
  /// given to another worker with room; the first answer counts, de-duplication makes
  /// the other harmless. 0: off.
  double speculate_after = 0;
  /// Coordinated checkpoints into this directory ("" = none): one before the first step,
  /// then every checkpoint_every applied steps (counted over the cluster's life); the
  /// newest checkpoint_keep are kept.
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  /// Also one every checkpoint_interval of the actor clock (the test coordinator's
  /// simulated clock in the simulator), at the next applied step; 0: off.
  caf::timespan checkpoint_interval{0};
  size_t checkpoint_keep = 3;
  /// Every checkpoint_full_every-th checkpoint of checkpoint_dir is whole; the ones
  /// between hold, for a dynamic table, only the rows changed since the one before (an
  /// increment over it, model/checkpoint/checkpoint.hpp). Also whole: the first after
  /// any restore, and every checkpoint into another directory. <= 1: all whole.
  int64_t checkpoint_full_every = 8;
  std::shared_ptr<model::file_system> checkpoint_fs;  ///< null: model::posix_file_system()
  /// Every shard writes its own partitions into checkpoint_dir, which it reaches too
  /// (a cluster's checkpoint.shared); only the files' records come here. Else the
  /// shards' state comes here and this actor writes it all.
  bool checkpoint_shared = false;
  /// The shards' optimizers (a copy, with the variable groups'): checkpoints record its
  /// describe() and current hyperparameters, which set_hyperparams keeps up to date.
  /// Null: not recorded.
  std::shared_ptr<const model::optimizer_set> optimizer;
  /// How long a run waits for a worker to join once every worker is lost.
  caf::timespan worker_wait = std::chrono::seconds(60);
  uint64_t coordinator_epoch = 1;
  /// Training steps of pipeline (worker id mod pipelines) go to that worker while it has
  /// any (then pipelines are taken in turn): a worker with its own replica of the
  /// pipeline (clusters of processes) reads it in order.
  bool pipeline_affinity = false;
  /// Own thread (see ps_shard_options::detached); off in the simulator.
  bool detached = false;
  /// Test-only: a defect planted to show the simulator's checks catch it (null: none).
  std::shared_ptr<detail::defect_switch> plant;
};

coordinator_actor spawn_coordinator(caf::actor_system& sys, coordinator_options opts);

}  // namespace actortrain
