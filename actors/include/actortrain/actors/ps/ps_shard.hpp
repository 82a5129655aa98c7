#pragma once
// ps_shard: a parameter-server shard. Owns partitions (contiguous rows of variables),
// their optimizer slots and a version each; serves pulls and applies pushes with the
// optimizer it was handed (the maths is plugged in from outside, as in ps-lite).
//
//            spawn
//              |
//              v
//       +-------------+   init (partitions + values)   +---------+
//       | waiting for |------------------------------->| serving |<--+ pull, pull_rows,
//       |   its data  |                                +---------+   | push, hyper, fence,
//       +-------------+                                     |        | stats, init (restore)
//         pull/push before init: not_initialized            +--------+
//
// Contract of push (per step id, per shard):
//  - validated whole before anything changes: every slice names a partition this shard
//    holds, has its shape, and is finite; sparse ids are sorted, unique and inside the
//    shard's rows; otherwise invalid_gradient naming variable and shapes, counted in
//    `rejected`, and nothing is applied.
//  - idempotent: a step id applied before is acknowledged as push_status::duplicate and not
//    applied again. Pushes carry the coordinator's watermark (per pipeline, every
//    position below it is applied): the shard forgets step ids below it and answers a push
//    below it, or of an earlier run, as a duplicate, so it remembers about the steps in
//    flight (ps_stats::remembered).
//  - fenced: a push whose epochs are older than the highest this shard has seen, or whose
//    worker generation is below the one a fence request raised for that worker, is
//    rejected with fenced_out.
//  - the apply policy decides when: apply_now (asynchronous and bounded-staleness
//    training) applies on arrival; hold_for_round (synchronous training) acknowledges
//    on receipt (push_status::held) and applies the round's example-weighted mean once
//    when the coordinator's round_request names the round's steps (acknowledgement and
//    application are separate, so a push's timeout need not cover the slowest worker).
//
// Ledger: every partition records each step it applies (with its batch's digest) in a
// step_ledger (ledger.hpp); a step it held already is recorded as a violation. The
// ledger is part of the partition's state: init sets it (empty at start, a checkpoint's
// on restore; violations seen are kept), snapshots carry it, ledger_atom reports it.
//
// A pull with coordinator epoch 0 is an observer's read (the application reading trained
// variables): it passes any fence and raises none. stats report the highest epochs seen
// and the worker fences (a new coordinator or a recovery takes max + 1).
//
// Control requests are idempotent, since the coordinator retries them: an init under
// the epochs of the last one taken is acknowledged and not redone (every init and
// restore comes under epochs of its own); keep, restore and hyperparameters are taken
// once per (epochs, id) and only when newer than the last taken; a shared snapshot
// repeated under the same (epochs, id) is refused once the state has changed.
//
// init doubles as restore: it replaces every partition, with optimizer slots (matched by
// name) and apply counts when given, and the de-duplication state (run, watermark) of a
// checkpoint, under the request's (newer) epochs. Worker fences and the highest epochs
// seen are kept, never rolled back; ps_stats::base records the restored step count.
//
// Pulls hand out the current partition without copying it (in-process); the next push
// writes in place when no reader holds the old version any more, else into a copy (made
// in the buffer of an earlier version once nobody reads that one).

#include <actortrain/actors/core/messages.hpp>
#include <actortrain/actors/ps/handle.hpp>
#include <actortrain/actors/ps/apply_policy.hpp>
#include <actortrain/actors/ps/compensation.hpp>
#include <actortrain/actors/core/send_seam.hpp>
#include <actortrain/model/checkpoint/file_system.hpp>
#include <actortrain/model/optim/groups.hpp>
#include <actortrain/model/optim/optimizer.hpp>
#include <actortrain/model/variable.hpp>

#include <caf/all.hpp>

#include <functional>
#include <memory>

namespace actortrain {


struct ps_shard_options {
  uint32_t index = 0;              ///< this shard's number (stats, errors)
  std::shared_ptr<apply_policy> policy;  ///< null: apply_now()
  size_t staleness_buckets = 16;   ///< histogram size; the last bucket counts >= size-1
  /// Own thread. A shard on CAF's work-stealing scheduler waits for the pool's polling
  /// (up to the relaxed sleep, 10 ms by default) when it was idle; a detached shard wakes
  /// on its mailbox at once. Off in the simulator.
  bool detached = false;
  /// Keep which computation (worker, generation, attempt) applied each step, for the
  /// simulator's count of torn re-runs. Grows with the run: tests only.
  bool apply_log = false;
  /// Where shared checkpoints are written (null: model::posix_file_system()).
  std::shared_ptr<model::file_system> checkpoint_fs;
  /// Variables with optimizers of their own (cluster_spec::variable_groups).
  std::vector<model::variable_group> groups;
  /// What the shard does about stale gradients (cluster_spec::compensation); none under
  /// a policy that applies whole rounds (hold_for_round), which has no staleness.
  staleness_compensation compensation;
  /// The model's variables (model::model::variables()): a partition of a dynamic table
  /// takes its width, initializer, admission and eviction from its variable's spec.
  std::vector<model::variable_spec> variables;
};

/// Spawns a shard that updates with its own clone of `opt`. Throws std::invalid_argument
/// if `opt` is null.
ps_shard_actor spawn_ps_shard(caf::actor_system& sys, const model::optimizer& opt, ps_shard_options opts);

}  // namespace actortrain
