#pragma once
// The typed handle of a ps shard (ps_shard.hpp): what it answers, so that a message
// carrying a shard and every request to one are checked when they are compiled.

#include <actortrain/actors/core/atoms.hpp>
#include <actortrain/actors/core/fence.hpp>
#include <actortrain/actors/ps/protocol.hpp>

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

namespace actortrain {

using ps_shard_actor = caf::typed_actor<
  caf::replies_to<init_atom, init_request>::with<caf::ok_atom>,
  caf::replies_to<pull_atom, pull_request>::with<pull_reply>,
  caf::replies_to<pull_rows_atom, pull_rows_request>::with<rows_reply>,
  caf::replies_to<push_atom, push_request>::with<push_reply>,
  // Closes a synchronous round: the held pushes of its steps are applied as one mean.
  caf::replies_to<round_atom, round_request>::with<round_reply>,
  caf::replies_to<hyper_atom, hyperparams_request>::with<caf::ok_atom>,
  caf::replies_to<fence_atom, fence_request>::with<fence>,
  caf::replies_to<stats_atom>::with<ps_stats>,
  // Every partition's ledger (ledger.hpp): the steps its state holds, with their batches'
  // digests, and any step applied twice.
  caf::replies_to<ledger_atom>::with<ps_ledgers>,
  // Every partition's values, slots and counters, for a coordinated checkpoint (shared,
  // not copied, in-process: the next push writes into a copy).
  caf::replies_to<snapshot_atom, fence_request, snapshot_basis>::with<ps_snapshot>,
  // The same state written by the shard itself into a shared checkpoint directory (the
  // cluster's checkpoint.shared); only the files' records travel.
  caf::replies_to<snapshot_atom, fence_request, checkpoint_target, snapshot_basis>::with<ps_files>,
  // Keeps a copy of every partition's values and slots in the shard's memory (one kept
  // state: the next keep replaces it), and puts it back (versions still rise).
  caf::replies_to<keep_atom, fence_request>::with<caf::ok_atom>,
  caf::replies_to<restore_atom, fence_request>::with<caf::ok_atom>>;

}  // namespace actortrain
