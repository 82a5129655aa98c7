#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// The fault simulator: an application's own job (job.hpp: model, optimizer, loss,
// metrics, dataset_fn, cluster_spec with its consistency mode, callbacks) trained by an
// embedded cluster on CAF's deterministic test coordinator (inline compute, simulated
// time) under a fault plan, then judged by evidence that does not come from the code it
// judges:
//   - exactly-once, from the ps partitions' ledgers checked against the job's own
//     dataset_fn (ledger.hpp: check_ledgers) — never from the coordinator's events or
//     counters: every step of every run that completed applied once on every partition,
//     each position of each pipeline visited once with the batch the data defines
//     there; a run that failed left a valid prefix; nothing of one run counted in
//     another;
//   - values: where the consistency mode makes the result independent of timing (sync;
//     bounded_staleness(0) when no step was torn, see below), the final parameters are
//     bit-identical to a fault-free run of the same job;
//   - completion: every fit ends (poison-step endings aside, and the fit planted to fail
//     fails), and nothing hangs: time advances only to the next pending timer, so a
//     delayed message arrives when due and timeouts fire only when nothing else can;
//   - the consistency mode's staleness bound (bounded_staleness(s): 2s; sync: 0, rounds
//     of at most R steps reporting one loss);
//   - determinism: a trace hash over the steps in the order applied, the membership
//     events and the final parameters' bits: the same job, options and plan give the
//     same hash, in this process or another.
//
// bounded_staleness(0) is sequential SGD, yet a fault can legitimately change its
// result: a worker that crashes after pushing to some shards ({worker w -> ps 0, push,
// crash_after} with 2+ shards), or a push lost on its way to one shard, leaves the step
// applied on the others; its re-run reads parameters that already hold part of it, so
// its other slices differ from the fault-free run's (a torn step, counted in
// sim_result::torn); so does a duplicated step task, or a straggler's speculative copy,
// computed again while the original's pushes to some shards are still delayed. Its values are compared only when
// the plan lost no push, crashed no worker after a push, and did not delay pushes while
// duplicating tasks or speculating, and no step was torn.
//
// A fault can also destroy what no other copy holds, which legitimately changes the
// result in any mode: a corrupt checkpoint that was a run's only one (the run fails,
// naming it) or the only copy of the state early stopping kept (the run ends with its
// last state, with a warning); a ps shard lost after a run failed and before the next
// one committed its start (the failed run's steps after its last checkpoint go with it).
// Values are not compared then (sim_result::values_not_compared says why).
//
// Use it from a test of the application's own suite:
//
// example[sim]:
//   actortrain::job j = my_job();           // what the application runs
//   for (uint64_t seed = 1; seed <= 200; ++seed) {
//     auto r = actortrain::simulate(j, {seed});
//     BOOST_TEST(r.ok(), r.replay << "\n" << r.report());
//   }
//
// Lost workers are restarted (a new generation), lost dataset shards rebuilt, lost ps
// shards respawned, as the application's runner does. Checkpoints go to an in-memory
// file system (the job's checkpoint_dir, or one the simulator adds so that a lost ps
// shard can roll back). Callbacks of the job run as they would. Blocking: runs on the
// calling thread. This header does not include CAF.

#include <actortrain/actors/cluster/job.hpp>
#include <actortrain/model/variable.hpp>

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace actortrain {

class fault_plan;
struct cost_params;  // sim/cost_model.hpp

/// A defect planted in the framework on purpose, to show that the checks catch what
/// they exist for (tests of the simulator itself; never in production).
enum class planted_defect {
  none,
  apply_twice_after_rollback,  ///< a roll-back forgets its checkpoint's last step of pipeline 0: applied again
  skip_step,                   ///< a worker reports step 2 of pipeline 0 applied without pushing it
  foreign_step,                ///< a worker pushes step 2 of pipeline 0 under a position not its own
  wrong_batch,                 ///< a dataset shard serves other values at batch 2 of pipeline 0
  visit_twice,                 ///< a dataset shard serves batch 1 again in place of batch 2
  /// A run of scheduled steps (job::loop): a roll-back leaves the grants as they are, so
  /// the steps dispatched after the checkpoint are not scheduled again. Not among
  /// planted_defects() (a fit never takes it): tests/actors/scheduled_steps_test.cpp.
  forget_grants_after_rollback,
};

/// "skip_step" and back (std::invalid_argument naming the known ones).
std::string to_string(planted_defect d);
planted_defect planted_defect_from_string(const std::string& s);
/// Every defect of a fit (all but none and forget_grants_after_rollback).
std::vector<planted_defect> planted_defects();

/// How a job is simulated, besides the job itself.
struct sim_options {
  /// Seeds the random plan (simulate(job, options)); the job's own seeds are its spec's.
  uint64_t seed = 1;
  /// Rules of a random plan.
  int faults = 4;
  /// Random plans also lose, duplicate and delay control messages (fences, round
  /// manifests, snapshots, inits, stats, keep/restore, hyperparameters, gate decisions).
  bool control_faults = true;
  /// Random plans kill ps shards (survivable through checkpoints).
  bool ps_crashes = true;
  /// fit calls on one cluster, each with job.fit; the ledgers of every run are checked.
  int fits = 1;
  /// The fit (0-based; -1 none) whose data carries a NaN feature at batch
  /// `failing_position` of pipeline 0: it must fail (invalid_gradient) and leave a valid
  /// prefix, and the fits after it must be exact.
  int failing_fit = -1;
  uint64_t failing_position = 1;
  /// The n-th committed checkpoint gets one bit flipped in one of its arrays as it
  /// commits (on the file-system seam; 0: none): restores must skip it.
  int corrupt_checkpoint = 0;
  /// In the last fit, after this many applied steps, a second coordinator takes the run
  /// over from the newest checkpoint while the first goes on as a zombie, whose run must
  /// not complete and whose messages must all be refused (0: never).
  int64_t take_over_after = 0;
  /// Compare the final parameters with a fault-free run where the mode promises them.
  bool compare_values = true;
  /// When the job has no checkpoint_dir: one in memory, every this many steps (0: none,
  /// and random plans kill no ps shard).
  int64_t checkpoint_every = 10;
  /// Keep the run's events as lines (sim_result::trace), and the fault-free run's when
  /// values were compared: where two runs diverge.
  bool keep_trace = false;
  /// Test-only: a defect planted in the framework (planted_defect).
  planted_defect plant = planted_defect::none;
  /// Charge time for what the cluster does (sim/cost_model.hpp): every message is
  /// delayed by what the model says, so simulated time predicts a real cluster's and
  /// sim_result::timing holds the prediction. Null: messages arrive at once (the fault
  /// simulator's default: only timers move the clock). Dense partitions only: a row
  /// pull is charged as a message without its rows.
  std::shared_ptr<const cost_params> costs;
};

/// What simulated time says about the run (sim_options::costs), over all fits.
struct sim_timing {
  /// Simulated seconds from each fit's start to its last applied step, added up.
  double train_seconds = 0;
  int64_t steps = 0;
  int64_t examples = 0;
  /// Mean version staleness of the applied steps.
  double mean_staleness = 0;
  /// Per ps shard: the CPU its process burnt over train_seconds, in cores (1: one core
  /// busy all the time; up to the host's cores).
  std::vector<double> ps_load;
  /// How long a worker's pulls of a step took, first sent to last reply received (what
  /// a worker's metrics call `pull`): the median and the 10th percentile.
  double pull_seconds = 0, pull_p10_seconds = 0;
  double samples_per_second() const { return train_seconds > 0 ? static_cast<double>(examples) / train_seconds : 0; }
};

struct sim_result {
  uint64_t seed = 0;
  /// Per fit: "" when it completed, else its error.
  std::vector<std::string> fit_errors;
  /// Per fit: the run id the ledgers record it under (0: it never began).
  std::vector<uint64_t> runs;
  /// Steps the ledgers hold of the checked runs (on every partition).
  int64_t steps = 0;
  uint64_t trace_hash = 0;
  /// What the ps shards hold at the end, each alone: the digest of the final parameters'
  /// bits (model/digest.hpp; 0 when a fit hung) and of the partitions' ledgers (their
  /// JSON). Unlike the trace hash, neither depends on the order of events, so they show
  /// a refactoring changed no outcome (`actortrain soak --hashes`).
  uint64_t values_digest = 0;
  uint64_t ledgers_digest = 0;
  std::vector<std::string> plan;        ///< the rules, one line each
  std::vector<std::string> injected;    ///< the faults that fired, in order
  std::vector<std::string> violations;  ///< empty: every check passed
  /// One line that reproduces this result: the options as C++ (for simulate) or the
  /// command (for actortrain soak).
  std::string replay;
  int restarts = 0;     ///< lost workers restarted
  int rebuilt = 0;      ///< lost dataset shards rebuilt
  int ps_restores = 0;  ///< roll-backs after a lost ps shard
  bool taken_over = false;
  int speculated = 0;           ///< stragglers re-run elsewhere
  int skipped_checkpoints = 0;  ///< corrupt checkpoints a restore skipped
  int incremental_restores = 0;  ///< roll-backs that read an incremental checkpoint's chain
  /// Steps whose shards applied slices of different computations (an async re-run after
  /// a partial push), from the shards' apply logs.
  int64_t torn = 0;
  /// The values were compared with a fault-free run's (and equal, unless a violation says so).
  bool values_compared = false;
  /// Why they were not, where the mode promises them: what the plan did that
  /// legitimately changes them (see above), or "" when compared or not promised.
  std::string values_not_compared;
  double simulated_seconds = 0;
  uint64_t max_staleness = 0;
  uint64_t rounds = 0;
  /// With a planted defect: the fits in which it took effect.
  std::set<int> planted_fired;
  /// The fits whose runs the ledgers were held to whole (completed, and not rolled back
  /// by a later restore that skipped a corrupt checkpoint); the others only to a valid
  /// prefix.
  std::set<int> checked_whole;
  /// A planted defect took effect in a fit held whole: the checks must have caught it.
  bool planted_visible() const;
  /// With sim_options::costs.
  sim_timing timing;
  /// The final parameters (null when a fit hung).
  std::shared_ptr<const model::parameter_store> values;
  /// With sim_options::keep_trace: every event as a line ("step run 1 epoch 0 round 3
  /// pipeline 1 position 2 worker 0 loss 0.4123"), and the fault-free run's.
  std::vector<std::string> trace, reference_trace;
  bool ok() const { return violations.empty(); }
  /// True when every fit completed.
  bool completed() const;
  /// A poison-step ending (a step failed poison_limit times: a correct outcome).
  bool poisoned() const;
  /// The violations, plan and injected faults, one per line.
  std::string report() const;
};

/// Simulates `j` under a random plan drawn from o.seed (o.faults rules).
sim_result simulate(const job& j, const sim_options& o);
/// Simulates `j` under `plan` (null: no faults).
sim_result simulate(const job& j, const sim_options& o, std::shared_ptr<fault_plan> plan);

// -- the built-in job of `actortrain soak` -----------------------------------------------

/// A planted linear model (4 inputs; y = x w + 0.25, with `sparse` plus an embedding of
/// an id column), SGD 0.05, on a simulated cluster of this shape.
struct sim_shape {
  int num_ps = 2;
  int num_workers = 3;
  int num_pipelines = 3;
  int64_t rows = 144;
  int64_t batch = 8;
  int epochs = 2;
  int steps_per_execution = 1;
  int tasks_in_flight = 0;  ///< cluster_spec::tasks_in_flight (0: its default)
  bool pull_ahead = false;
  double speculate_after = 0;  ///< cluster_spec::speculate_after
  int pull_every = 1;          ///< with local_learning_rate 0.05 when > 1 (async only)
  int push_every = 1;          ///< async only; steps_per_execution a multiple of it
  bool sparse = false;         ///< an embedding table pulled by row, on 2 partitions
  /// With `sparse`: the table keyed by the raw id (layers::dynamic_embedding) on every
  /// shard, the ids 7,919 apart; its rows are compared by cluster::lookup.
  bool dynamic = false;
  bool checkpoint_shared = false;
  /// Validation data, evaluated after every epoch on the workers (pipelines of their own).
  bool validation = false;
  /// Early stopping (restore best) and a learning-rate schedule: the epoch gate, keep,
  /// restore and hyperparameter messages.
  bool callbacks = false;
  int faults = 4;
  /// 0: no checkpoints, and random plans kill no ps shard.
  int64_t checkpoint_every = 10;
  int64_t take_over_after = 0;
  /// cluster_spec::consistency (sync: R = workers, tasks of one step).
  consistency_mode consistency = consistency_mode::async();
  int fits = 1;
  int failing_fit = -1;
  int corrupt_checkpoint = 0;
  bool control_faults = true;
  planted_defect plant = planted_defect::none;
};

/// A shape drawn from `seed` for `consistency`: cluster size, pipelines, tasks in
/// flight, steps per execution, speculation, pull-ahead, push_every and pull_every with
/// local updates (async), row-pulled embeddings, shared checkpoints, callbacks, several
/// fits (one of them failing), a corrupt checkpoint, a take-over.
sim_shape random_shape(uint64_t seed, const consistency_mode& consistency = consistency_mode::async());
/// The built-in job of that shape (data and initialization from `seed`).
job sim_job(const sim_shape& shape, uint64_t seed);
/// The options that go with it.
sim_options sim_options_for(const sim_shape& shape, uint64_t seed);
/// The command line of `actortrain soak` that reproduces `shape` for `seed`.
std::string soak_replay(const sim_shape& shape, uint64_t seed);

/// simulate(sim_job(shape, seed), sim_options_for(shape, seed)) under a random plan.
sim_result simulate(uint64_t seed, const sim_shape& shape = {});
/// The same under `plan` (null: no faults).
sim_result simulate(uint64_t seed, const sim_shape& shape, std::shared_ptr<fault_plan> plan);

}  // namespace actortrain
