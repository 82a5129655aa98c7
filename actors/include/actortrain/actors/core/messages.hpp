#pragma once
// Every message between ActorTrain's actors: the atoms (core/atoms.hpp) and one type-ID
// block, registered by actortrain::configure(). The message types live with their concern and are plain
// values (core/fence.hpp, core/tensor.hpp, ps/protocol.hpp, data/protocol.hpp are
// CAF-free); core/wire.hpp gives each its wire form. Includes CAF: only actor
// translation units include this header.
//
// Identity. Every message carries a fence (coordinator_epoch, recovery_epoch,
// worker_generation, plus the worker it speaks for); every step message the step id
// (run, pipeline, position). Receivers keep the highest epochs they have seen and reject
// older ones (error code fenced_out), so a zombie coordinator, a pre-recovery push or a
// partitioned worker's late push cannot change state.
//
// Tensors. `tensor` shares an immutable matrix: in-process a message moves or shares it
// and nothing is copied (a ps shard hands its current partition to a pull and writes the
// next version in place only when no reader holds it any more). On the wire it is rows,
// cols and raw little-endian floats; the reader checks the announced length against the
// bytes that remain before allocating anything.

#include <actortrain/actors/core/atoms.hpp>
#include <actortrain/actors/core/wire.hpp>

#include <caf/all.hpp>


// One type-ID block for every ActorTrain message type, starting at CAF's first custom
// id. An application that adds its own block starts it at
// caf::id_block::actortrain::end (see actortrain/actors/core/configure.hpp).
CAF_BEGIN_TYPE_ID_BLOCK(actortrain, caf::first_custom_type_id)
CAF_ADD_TYPE_ID(actortrain, (actortrain::fence))
CAF_ADD_TYPE_ID(actortrain, (actortrain::step_id))
CAF_ADD_TYPE_ID(actortrain, (actortrain::tensor))
CAF_ADD_TYPE_ID(actortrain, (actortrain::partition_key))
CAF_ADD_TYPE_ID(actortrain, (actortrain::partition_state))
CAF_ADD_TYPE_ID(actortrain, (actortrain::init_request))
CAF_ADD_TYPE_ID(actortrain, (actortrain::pull_request))
CAF_ADD_TYPE_ID(actortrain, (actortrain::partition_value))
CAF_ADD_TYPE_ID(actortrain, (actortrain::pull_reply))
CAF_ADD_TYPE_ID(actortrain, (actortrain::pull_rows_request))
CAF_ADD_TYPE_ID(actortrain, (actortrain::rows_reply))
CAF_ADD_TYPE_ID(actortrain, (actortrain::dense_slice))
CAF_ADD_TYPE_ID(actortrain, (actortrain::sparse_slice))
CAF_ADD_TYPE_ID(actortrain, (actortrain::push_request))
CAF_ADD_TYPE_ID(actortrain, (actortrain::push_reply))
CAF_ADD_TYPE_ID(actortrain, (actortrain::applied_by))
CAF_ADD_TYPE_ID(actortrain, (actortrain::hyperparams_request))
CAF_ADD_TYPE_ID(actortrain, (actortrain::round_request))
CAF_ADD_TYPE_ID(actortrain, (actortrain::round_reply))
CAF_ADD_TYPE_ID(actortrain, (actortrain::ps_stats))
CAF_ADD_TYPE_ID(actortrain, (actortrain::fence_request))
CAF_ADD_TYPE_ID(actortrain, (actortrain::ps_snapshot))
CAF_ADD_TYPE_ID(actortrain, (actortrain::batch_data))
CAF_ADD_TYPE_ID(actortrain, (actortrain::batch_request))
CAF_ADD_TYPE_ID(actortrain, (actortrain::batch_reply))
CAF_ADD_TYPE_ID(actortrain, (actortrain::step_task))
CAF_ADD_TYPE_ID(actortrain, (actortrain::phase_timings))
CAF_ADD_TYPE_ID(actortrain, (actortrain::step_result))
CAF_ADD_TYPE_ID(actortrain, (actortrain::task_result))
CAF_ADD_TYPE_ID(actortrain, (actortrain::run_spec))
CAF_ADD_TYPE_ID(actortrain, (actortrain::visit))
CAF_ADD_TYPE_ID(actortrain, (actortrain::run_summary))
CAF_ADD_TYPE_ID(actortrain, (actortrain::eval_spec))
CAF_ADD_TYPE_ID(actortrain, (actortrain::eval_summary))
CAF_ADD_TYPE_ID(actortrain, (actortrain::node_registration))
CAF_ADD_TYPE_ID(actortrain, (actortrain::job_outcome))
CAF_ADD_TYPE_ID(actortrain, (actortrain::shard_contact))
CAF_ADD_TYPE_ID(actortrain, (actortrain::checkpoint_target))
CAF_ADD_TYPE_ID(actortrain, (actortrain::ps_files))
CAF_ADD_TYPE_ID(actortrain, (actortrain::status_report))
CAF_ADD_TYPE_ID(actortrain, (actortrain::gate_decision))
CAF_ADD_TYPE_ID(actortrain, (actortrain::ps_ledgers))
CAF_ADD_TYPE_ID(actortrain, (actortrain::step_grants))
CAF_ADD_TYPE_ID(actortrain, (actortrain::snapshot_basis))
CAF_END_TYPE_ID_BLOCK(actortrain)

namespace actortrain {
/// Where an embedding application's own type-ID block may start.
constexpr caf::type_id_t first_app_type_id = caf::id_block::actortrain::end;
}  // namespace actortrain
