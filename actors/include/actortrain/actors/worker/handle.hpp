#pragma once
// The typed handle of a worker (worker.hpp): step tasks, and the digest of the values
// it reads from the shards.

#include <actortrain/actors/core/atoms.hpp>
#include <actortrain/actors/worker/protocol.hpp>

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <cstdint>

namespace actortrain {

using worker_actor = caf::typed_actor<
  caf::replies_to<step_atom, step_task>::with<task_result>,
  // The digest (model::parameters_digest) of every variable as the ps shards hold it now,
  // pulled on the worker's own path to them (the data plane where there is one): a
  // task's own evidence of the values a run ended with.
  caf::replies_to<pull_atom>::with<uint64_t>>;

}  // namespace actortrain
