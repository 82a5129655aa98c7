#pragma once
// What a dataset_fn learns about its place in the cluster, and auto-sharding of plain
// datasets (TensorFlow's tf.distribute.InputContext and AutoShardPolicy).

#include <actortrain/dataset/dataset.hpp>

#include <cstdint>
#include <functional>

namespace actortrain::dataset {

/// The context an input pipeline is built in. num_input_pipelines is the number of dataset
/// shards and input_pipeline_id this one's index (real values, unlike TF's PS strategy,
/// which fixes both to one pipeline); num_replicas_in_sync is 1 except in sync mode.
struct input_context {
  int64_t num_input_pipelines = 1;
  int64_t input_pipeline_id = 0;
  int64_t num_replicas_in_sync = 1;

  /// One pipeline, one replica.
  input_context() = default;

  /// Throws std::invalid_argument naming the value unless num_input_pipelines >= 1,
  /// 0 <= input_pipeline_id < num_input_pipelines and num_replicas_in_sync >= 1.
  input_context(int64_t num_input_pipelines, int64_t input_pipeline_id,
                int64_t num_replicas_in_sync);

  /// The same checks as the constructor, for a context whose fields were assigned.
  void validate() const;

  /// global_batch_size / num_replicas_in_sync. Throws std::invalid_argument with TF's
  /// wording when it does not divide: "The `global_batch_size` 130 is not divisible by
  /// `num_replicas_in_sync` 4", or when global_batch_size < 1.
  int64_t get_per_replica_batch_size(int64_t global_batch_size) const;
};

/// Builds a pipeline for a context (TF's dataset_fn). With a dataset_fn the framework
/// never auto-shards: the function does its own shard() calls.
using dataset_fn = std::function<dataset(const input_context&)>;

/// How a plain dataset is split across input pipelines (TF's AutoShardPolicy).
enum class auto_shard_policy {
  /// No sharding: every pipeline sees all the data.
  off,
  /// shard(num_input_pipelines, input_pipeline_id) on the elements the pipeline yields
  /// (below a trailing prefetch); every pipeline still reads all the input.
  data,
  /// Each pipeline reads only its files: file i goes to pipeline i % num_input_pipelines.
  /// Needs every source of the pipeline to be from_files with at least as many files as
  /// pipelines.
  file,
  /// file when possible, else data.
  auto_,
};

/// "off", "data", "file" or "auto".
const char* to_string(auto_shard_policy p);

/// This pipeline's part of `ds`. Returns `ds` unchanged for `off` or a single pipeline.
/// The file policy finds the from_files sources under any transformations (rebuilding
/// the nodes above them) and throws std::invalid_argument when the dataset is not
/// file-based ("... is not file-based: ...") or has too few files ("cannot shard 2 files
/// across 3 input pipelines"). Throws what input_context::validate() throws.
dataset auto_shard(const dataset& ds, const input_context& ctx,
                   auto_shard_policy policy = auto_shard_policy::auto_);

}  // namespace actortrain::dataset
