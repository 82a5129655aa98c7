#pragma once
// dataset_shard: owns one input pipeline, built with the user's dataset_fn and a real
// input_context (input_pipeline_id = this shard, num_input_pipelines = the number of
// dataset shards). Serves batches by position: a request for the position after the
// last one served continues the open iterator; any other position seeks (datasets are
// deterministic functions of (seed, epoch, position), so this replays exactly). After
// answering it prepares up to `prefetch` batches after the newest position asked for, so
// a worker that asks in order finds its batch ready; a prepared batch waits for a request
// that arrives a few positions late (workers pull ahead, several read one pipeline)
// instead of being dropped and replayed.
//
//      spawn ── build pipeline (dataset_fn(ctx)) ──> serving ──batch(p)──> serving
//                        │ throws                        │
//                        v                               └─ end of data: a reply with
//            every request: user_error (message)            end_of_data = true
//
// A production shard is detached (its own thread: a heavy pipeline never blocks the
// scheduler); the simulator spawns it on the test coordinator.

#include <actortrain/actors/core/messages.hpp>
#include <actortrain/actors/data/handle.hpp>
#include <actortrain/dataset/input_context.hpp>

#include <caf/all.hpp>

namespace actortrain {


namespace detail {
struct defect_switch;
}  // namespace detail

struct dataset_shard_options {
  dataset::input_context context;  ///< input_pipeline_id = this shard's pipeline
  size_t prefetch = 2;             ///< batches prepared ahead of demand
  bool detached = true;            ///< own thread (false in the simulator)
  /// Test-only: a defect planted to show the simulator's checks catch it (null: none).
  std::shared_ptr<detail::defect_switch> plant;
};

dataset_shard_actor spawn_dataset_shard(caf::actor_system& sys, dataset::dataset_fn fn, dataset_shard_options opts);

/// A batch_data from a dataset element (moves the matrices).
batch_data to_batch(dataset::element&& e);
/// The element back (moves when the tensors are not shared).
dataset::element to_element(batch_data&& b);

}  // namespace actortrain
