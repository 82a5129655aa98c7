#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// What a worker asks of a dataset shard (dataset_shard.hpp) and what it answers.

#include <actortrain/actors/core/fence.hpp>
#include <actortrain/actors/core/step_id.hpp>
#include <actortrain/actors/core/tensor.hpp>

#include <cstdint>
#include <vector>

namespace actortrain {

/// An input given as 64-bit ids (model::batch::ids): rows x cols, row-major. They
/// travel raw, as row ids do.
struct id_block {
  uint64_t rows = 0;
  uint64_t cols = 0;
  std::vector<int64_t> values;
};

/// A batch as it travels: features (one per model input), labels, and the inputs given
/// as ids (ids[k] with cols > 0 is input k, whose features[k] has no columns).
struct batch_data {
  std::vector<tensor> features;
  tensor labels;
  std::vector<id_block> ids;
};

/// The batch of step `step`: element step.position - epoch_begin of the pipeline's pass
/// over epoch `epoch` (positions count on across epochs within a run).
struct batch_request {
  fence f;
  step_id step;
  uint64_t epoch = 0;
  uint64_t epoch_begin = 0;
};

/// The batch at step.position, or end_of_data (a reply, not an error).
struct batch_reply {
  step_id step;
  bool end_of_data = false;
  batch_data batch;
};

}  // namespace actortrain
