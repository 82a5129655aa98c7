#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// The recovery planner: what the coordinator decides when ps shards lost their state,
// as plain functions over plain values (tested alone in tests/actors/recovery_plan_test.cpp):
//  - which recovery a lost shard's replacement starts, by the run's phase, and when a
//    loss ends the run at once;
//  - which checkpoint a restore takes (a run's own only, so a fallback past a corrupt
//    checkpoint never lands in an earlier run; those that do not read back are skipped
//    and named) with the run state it loads, and what to do when none serves;
//  - the epochs a restore fences the shards under, above everything any shard has seen,
//    and the worker generations a takeover starts from;
//  - whether a run may mark the previous run's final checkpoint as its start.
// recovery.cpp acts on them: the asks, their timeouts and retries, the events.

#include <actortrain/actors/core/fence.hpp>

#include <actortrain/model/checkpoint/checkpoint.hpp>
#include <actortrain/model/checkpoint/file_system.hpp>
#include <actortrain/model/partitioner.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace actortrain {

// -- which recovery ----------------------------------------------------------------------

/// Where the coordinator is when a recovery is planned (its phases, as far as a recovery
/// tells them apart).
enum class run_stage {
  between_runs,  ///< idle: no run in progress
  starting,      ///< initializing: a fit's run before its first epoch begins
  running,       ///< training, evaluating or at an epoch gate
};

/// What the planner looks at of the coordinator.
struct recovery_view {
  run_stage stage = run_stage::between_runs;
  bool resuming = false;             ///< a fit with resume_from that has not restored its state yet
  bool run_start_committed = false;  ///< the run's own first checkpoint (or marked start) is committed
  bool has_checkpoints = false;      ///< a directory of committed checkpoints to restore from (restore_dir)
  uint64_t steps_total = 0;          ///< steps the cluster applied, over every run
};

/// What a replacement for every lost shard starts.
enum class recovery_kind {
  resume,          ///< a resumed run without its state yet: restore_kind::newest under a takeover
  wait_for_fit,    ///< between runs, nothing to restore from: the next fit initializes or restores
  restore_values,  ///< between runs: restore_kind::values, the newest good checkpoint's values
  start_state,     ///< the run's start is not committed: the state it starts from (restore_kind::values,
                   ///< or the initial values without a checkpoint directory)
  roll_back,       ///< during a run: restore_kind::this_run, the run's own newest good checkpoint
};

/// The recovery for `v`: resuming goes first (the resumed run's state is not there yet),
/// then between runs, then a run whose start is not committed (it applied nothing of its
/// own, so any run's state or the initial values will do), else a roll-back of the run.
recovery_kind recovery_for(const recovery_view& v);

/// True when losing a shard ends the run at once: it applied steps and there is no
/// checkpoint to roll back to, so its shards' state cannot come back.
bool loss_ends_run(const recovery_view& v);

// -- which checkpoint --------------------------------------------------------------------

/// Which checkpoints a restore may use, and which run state it loads.
enum class restore_kind {
  this_run,  ///< a roll-back: the current run's own checkpoints, or the one marked as its start
  newest,    ///< a resumed run or a take-over: the newest checkpoint with its newest run state
  values,    ///< between runs, or before a run applied anything: the newest of any run, values only
};

/// Whether a restore of `kind` loads the run state (values only: the run goes on as it is).
inline bool loads_run_state(restore_kind kind) { return kind != restore_kind::values; }

/// The run state a checkpoint's manifest "extra" offers to `kind` for run `run`, if any.
/// A manifest holds the run state of its own run ("extra") and, when a later run began
/// with nothing changed since, that run's starting state too ("run_starts": the previous
/// run's final checkpoint marked as the next run's start). values takes `extra` as it is;
/// newest the last run that began there; this_run the state whose "run" is `run`.
/// Throws nlohmann::json::exception for a malformed "run" or "run_starts".
std::optional<nlohmann::json> state_for(const nlohmann::json& extra, restore_kind kind, uint64_t run);

/// A checkpoint a restore takes.
struct restore_source {
  model::checkpoint_data data;  ///< cut to this placement
  std::string path;
  nlohmann::json state;  ///< the run state to load (state_for's)
};

/// The newest checkpoint under `dir` that `kind` accepts for run `run` and that reads
/// back whole (every file's size and CRC), cut to `placement`. newest continues the
/// newest run the directory holds (the run of the newest manifest that parses and names
/// one) with that run's own checkpoints only, as this_run does, so a fallback past a
/// corrupt checkpoint never lands in an earlier run. Those skipped because their
/// manifest or files do not read back are appended to `skipped` ("path: why"). Throws
/// model::checkpoint_error when `dir` cannot be listed.
std::optional<restore_source> pick_checkpoint(model::file_system& fs, const std::string& dir,
                                              const model::placement& placement, restore_kind kind, uint64_t run,
                                              std::vector<std::string>& skipped);

/// What a restore does when no checkpoint serves.
enum class when_none {
  wait_for_fit,    ///< between runs: the shards wait for the next fit to restore or initialize them
  initial_values,  ///< a run about to start (restore_kind::values): every shard starts from the initial values
  fail_run,        ///< the run fails with the problem
};

/// A restore's plan: the checkpoint it takes, or what to do without one and why.
struct restore_plan {
  std::optional<restore_source> source;
  std::vector<std::string> skipped;  ///< checkpoints that did not read back ("path: why"), to warn of
  when_none none = when_none::fail_run;  ///< without a source
  std::string problem;                   ///< without a source: why none serves
};

/// Picks the checkpoint of a restore of `kind` for run `run` under `dir` (pick_checkpoint)
/// while the coordinator is at `stage`, and without one decides what to do: between runs
/// wait for the next fit; a run about to start with restore kind values starts from the
/// initial values; otherwise the run fails. The problem names the directory (and the run,
/// for this_run) when nothing is committed, else each checkpoint tried and its fault, or
/// why the directory could not be listed.
restore_plan plan_restore(model::file_system& fs, const std::string& dir, const model::placement& placement,
                          restore_kind kind, uint64_t run, run_stage stage);

/// The hyperparameters a run state carries (what the optimizers ran with at its step),
/// in its order; empty when it has none. Throws nlohmann::json::exception for a value
/// that is not a number.
std::vector<std::pair<std::string, double>> hyperparams_of(const nlohmann::json& state);

// -- which epochs ------------------------------------------------------------------------

/// What the shards have seen, gathered from their counters before a restore chooses its
/// epochs: the newest epochs (ordered as receivers order them, epochs_older, so a late
/// answer with a higher recovery epoch under an older coordinator epoch is not newer) and
/// per worker the highest generation any shard fences.
class fences_seen {
 public:
  /// A takeover starts above the coordinator epoch the checkpoint's run state
  /// (`state`, state_for's) was written under; a roll-back from nothing seen.
  static fences_seen before_restore(const nlohmann::json& state, bool takeover);

  /// One shard's counters: the epochs it has seen, and its fences per worker.
  void add(const fence& seen, const std::vector<std::pair<uint32_t, uint64_t>>& worker_fences);

  /// The newest epochs seen (coordinator_epoch and recovery_epoch only).
  const fence& newest() const { return newest_; }
  /// The highest generation any shard fences for `worker` (0: none).
  uint64_t generation(uint32_t worker) const;

 private:
  fence newest_;
  std::map<uint32_t, uint64_t> generations_;
};

/// The epochs a restore fences the shards under, given the coordinator's own (`own`) and
/// what they have seen: a takeover (a resumed run) takes a new coordinator epoch,
/// max(own, seen + 1), with recovery epoch 0; a roll-back keeps the coordinator epoch and
/// takes recovery epoch max(own, the seen one if it is under the same coordinator epoch,
/// else 0) + 1. Either way the shards refuse whatever an earlier owner sends. Only the
/// epochs of the result are set.
fence epochs_after_restore(const fence& own, const fences_seen& seen, bool takeover);

/// After a takeover, each worker's generation starts above its own and above the highest
/// fence a shard reports for it (as a worker registering with a new coordinator would),
/// so a predecessor's tasks to it cannot be applied any more. `Workers` is a range of
/// values with `id` and `generation`.
template <class Workers>
void raise_generations_for_takeover(Workers& workers, const fences_seen& seen) {
  for (auto& w : workers) w.generation = std::max(w.generation, seen.generation(w.id)) + 1;
}

/// The worker fences a shard must enforce after a restore: for each worker its current
/// generation if it is alive, else the one after it. `Workers` is a range of values with
/// `id`, `generation` and `alive`.
template <class Workers>
std::vector<std::pair<uint32_t, uint64_t>> min_generations(const Workers& workers) {
  std::vector<std::pair<uint32_t, uint64_t>> out;
  for (auto& w : workers) out.emplace_back(w.id, w.alive ? w.generation : w.generation + 1);
  return out;
}

// -- a run's start -----------------------------------------------------------------------

/// True when the newest committed checkpoint (step `last_committed` under `restore_dir`)
/// is the cluster's state as it is now, so a run may mark it as its start instead of
/// writing one: nothing changed since it was committed (`clean_since_commit`, and the
/// cluster applied exactly its steps) and it lies in the run's own checkpoint directory.
bool can_mark_start(bool clean_since_commit, int64_t last_committed, uint64_t steps_total,
                    const std::string& restore_dir, const std::string& checkpoint_dir);

}  // namespace actortrain
