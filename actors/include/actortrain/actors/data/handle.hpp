#pragma once
// The typed handle of a dataset shard (dataset_shard.hpp): a batch by position.

#include <actortrain/actors/core/atoms.hpp>
#include <actortrain/actors/data/protocol.hpp>

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

namespace actortrain {

using fill_atom = caf::atom_constant<caf::atom("fill")>;

using dataset_shard_actor = caf::typed_actor<
  caf::replies_to<batch_atom, batch_request>::with<batch_reply>,
  caf::reacts_to<fill_atom>>;  // internal: prepare the next batches

}  // namespace actortrain
