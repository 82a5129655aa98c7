#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// A worker's gradients on their way to the ps shards, without the actor: cut per shard
// by the placement (slice_gradients), and with push_every > 1 summed over several steps
// into one example-weighted mean (gradient_mean). worker.cpp sends what these make;
// tests/actors/gradient_slices_test.cpp tests them alone.

#include <actortrain/actors/core/error_code.hpp>
#include <actortrain/actors/ps/protocol.hpp>
#include <actortrain/model/partitioner.hpp>
#include <actortrain/model/variable.hpp>

#include <cstdint>
#include <memory>
#include <vector>

namespace actortrain {

/// What every shard's push of one step (or one push_every group) carries besides its
/// slices: `steps` front is the push's step, the rest its more_steps; one digest per step.
struct push_header {
  fence f;
  std::vector<step_id> steps;
  int64_t example_count = 0;
  std::vector<uint64_t> watermark;
  uint64_t attempt = 0;
  std::vector<uint64_t> digests;
};

/// One push per ps shard (by index; a shard that holds none of the variables gets an empty
/// one) with its slices of `grads`:
///  - a dense variable held whole by one partition moves its gradient buffer into the
///    push (no copy); `grads.dense[v]` gets the buffer `sent[v]` pushed before when its
///    shard let go of it, else a new one (the next step zeroes it either way), and
///    `sent[v]` becomes the pushed buffer;
///  - a dense variable cut in partitions: each partition's rows, copied;
///  - a sparse variable: one slice per shard that holds part of the table, with the rows
///    touched there (ids sorted), and an empty slice on a shard none is touched on, so
///    every partition counts the step once, as a local optimizer's block does (Adam's t).
/// Every slice carries `read_version` of its variable.
std::vector<push_request> slice_gradients(const model::placement& pl, model::gradient_store& grads,
                                          const std::vector<uint64_t>& read_version,
                                          std::vector<std::shared_ptr<const model::matrix>>& sent,
                                          const push_header& h);

/// push_every > 1: the example-weighted sum of the dense gradients of the steps computed
/// since the last push, and the first step's read versions (the push's staleness counts
/// from there).
class gradient_mean {
 public:
  /// Adds a step's gradients weighted by its `examples`. An embedding table pulled by row
  /// (a sparse gradient) cannot be summed: invalid_request naming the variable, and
  /// nothing is added.
  failure add(const model::placement& pl, const model::gradient_store& grads, int64_t examples,
              const std::vector<uint64_t>& read_version);
  /// Steps added since the last take.
  size_t steps() const { return steps_; }
  /// Writes the mean (sum / examples) into grads.dense and the first step's read
  /// versions into `read_version`, and starts over.
  void take(model::gradient_store& grads, std::vector<uint64_t>& read_version);
  /// Forgets the steps added (their task failed).
  void clear() { steps_ = 0; }

 private:
  std::vector<model::matrix> sum_;
  std::vector<uint64_t> read_version_;
  int64_t examples_ = 0;
  size_t steps_ = 0;
};

}  // namespace actortrain
