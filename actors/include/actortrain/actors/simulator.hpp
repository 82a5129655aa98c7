#pragma once
// The fault simulator: a whole embedded cluster on CAF's deterministic test coordinator
// (inline compute, simulated time), trained under a fault plan, then checked:
//   - completion with the exact step count;
//   - exactly-once visitation: every batch of every pipeline and epoch is in exactly one
//     applied step, and no (pipeline, position) twice;
//   - exactly-once application: every shard's state holds each step once (the model
//     touches every shard in every step), so steps restored + applied since == steps on
//     each, and no step id twice in its apply log (kept since its last restore); steps
//     whose shards applied different computations count as torn;
//   - the consistency mode's invariant (cluster_spec::consistency): with
//     bounded_staleness(s) no step's version staleness exceeds 2s; with sync every step
//     reads the version its round began with (staleness 0), a round has at most R =
//     workers steps, and all its steps report the same round loss;
//   - determinism: a trace hash over the applied steps (pipeline, position, worker,
//     generation, loss bits), the membership events and the final parameters' bits; the
//     same seed, plan and shape give the same hash, in this process or another.
// Time advances only to the next pending timer, so a delayed message arrives when it is
// due and timeouts fire only when nothing else can happen. Lost workers are restarted
// (a new generation), lost dataset shards rebuilt and lost ps shards respawned when the
// simulator sees them go; after a roll-back to a checkpoint, the steps applied after it
// are forgotten (they must be applied again).
// This header does not include CAF.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace actortrain {

class fault_plan;

/// The cluster and job the simulator trains: a planted linear model (4 inputs), SGD.
struct sim_shape {
  int num_ps = 2;
  int num_workers = 3;
  int num_pipelines = 3;
  int64_t rows = 144;
  int64_t batch = 8;
  int epochs = 2;
  int steps_per_execution = 1;
  bool pull_ahead = false;
  double speculate_after = 0;  ///< cluster_spec::speculate_after
  /// Faults in a random plan (simulate(seed, shape)).
  int faults = 4;
  /// Coordinated checkpoints every this many steps, into an in-memory file system (a
  /// lost ps shard rolls back to the newest); 0: none, and random plans crash no ps shard.
  int64_t checkpoint_every = 10;
  /// After this many applied steps a second coordinator takes the run over, resuming
  /// from the newest checkpoint, while the first goes on as a zombie (its messages must
  /// all be refused, its run must not complete); 0: never. Needs checkpoint_every.
  int64_t take_over_after = 0;
  /// cluster_spec::consistency: "async", "bounded_staleness(s)" or "sync" (R = workers;
  /// needs steps_per_execution = 1).
  std::string consistency = "async";
};

struct sim_result {
  uint64_t seed = 0;
  bool completed = false;   ///< fit returned without an error
  std::string error;        ///< its text otherwise
  int64_t steps = 0;        ///< what fit reported
  int64_t expected_steps = 0;
  uint64_t trace_hash = 0;
  std::vector<std::string> plan;       ///< the rules, one line each
  std::vector<std::string> injected;   ///< the faults that fired, in order
  std::vector<std::string> violations; ///< empty: every check passed
  int restarts = 0;                    ///< lost workers restarted
  int rebuilt = 0;                     ///< lost dataset shards rebuilt
  int ps_restores = 0;                 ///< roll-backs after a lost ps shard
  bool taken_over = false;             ///< a second coordinator took the run over
  /// Steps whose shards applied slices of different computations (an async re-run after
  /// a partial push combined parameters of two versions).
  int64_t torn = 0;
  double simulated_seconds = 0;        ///< simulated time the run took
  uint64_t max_staleness = 0;          ///< over the applied steps (event::staleness)
  uint64_t rounds = 0;                 ///< synchronous rounds applied
  bool ok() const { return violations.empty(); }
};

/// Runs `shape` under a random plan drawn from `seed` (shape.faults rules).
sim_result simulate(uint64_t seed, const sim_shape& shape = {});
/// Runs `shape` under `plan` (null: no faults); `seed` seeds the model and data.
sim_result simulate(uint64_t seed, const sim_shape& shape, std::shared_ptr<fault_plan> plan);

}  // namespace actortrain
