// input_context checks and auto_shard's graph rewrites.

#include "node.hpp"

#include <actortrain/dataset/input_context.hpp>

#include <fmt/format.h>

namespace actortrain::dataset {

input_context::input_context(int64_t pipelines, int64_t pipeline_id, int64_t replicas)
    : num_input_pipelines(pipelines), input_pipeline_id(pipeline_id), num_replicas_in_sync(replicas) {
  validate();
}

void input_context::validate() const {
  if (num_input_pipelines < 1)
    throw std::invalid_argument(fmt::format(
        "input_context: num_input_pipelines must be >= 1, got {}", num_input_pipelines));
  if (input_pipeline_id < 0 || input_pipeline_id >= num_input_pipelines)
    throw std::invalid_argument(fmt::format(
        "input_context: input_pipeline_id must be in [0, num_input_pipelines) = [0, {}), got {}",
        num_input_pipelines, input_pipeline_id));
  if (num_replicas_in_sync < 1)
    throw std::invalid_argument(fmt::format(
        "input_context: num_replicas_in_sync must be >= 1, got {}", num_replicas_in_sync));
}

int64_t input_context::get_per_replica_batch_size(int64_t global_batch_size) const {
  if (global_batch_size < 1)
    throw std::invalid_argument(
        fmt::format("The `global_batch_size` {} must be >= 1", global_batch_size));
  if (num_replicas_in_sync < 1 || global_batch_size % num_replicas_in_sync != 0)
    throw std::invalid_argument(
        fmt::format("The `global_batch_size` {} is not divisible by `num_replicas_in_sync` {}",
                    global_batch_size, num_replicas_in_sync));
  return global_batch_size / num_replicas_in_sync;
}

const char* to_string(auto_shard_policy p) {
  switch (p) {
    case auto_shard_policy::off:
      return "off";
    case auto_shard_policy::data:
      return "data";
    case auto_shard_policy::file:
      return "file";
    case auto_shard_policy::auto_:
      break;
  }
  return "auto";
}

namespace {

using detail::node;
using detail::node_kind;
using detail::node_ptr;

/// shard() on the elements, placed below any trailing prefetch so the prefetch thread
/// only produces this pipeline's elements.
node_ptr shard_elements(const node_ptr& n, uint64_t num, uint64_t index) {
  if (n->kind() == node_kind::prefetch)
    return n->rebuild({shard_elements(n->inputs().at(0), num, index)});
  return detail::make_shard_node(n, num, index);
}

/// Why `n` cannot be sharded by file across `num` pipelines, or "" when it can: every
/// source must be a files node (another source would be duplicated in every pipeline)
/// with at least `num` files.
std::string file_shard_problem(const node& n, uint64_t num) {
  if (n.kind() == node_kind::files) {
    const auto files = detail::file_count(n);
    if (files < num)
      return fmt::format("cannot shard {} files across {} input pipelines ({})", files, num,
                         n.label());
    return "";
  }
  auto in = n.inputs();
  if (in.empty())
    return fmt::format("source '{}' is not file-based (build it with from_files)", n.label());
  for (const auto& i : in)
    if (auto p = file_shard_problem(*i, num); !p.empty()) return p;
  return "";
}

node_ptr shard_by_file(const node_ptr& n, uint64_t num, uint64_t index) {
  if (n->kind() == node_kind::files) return detail::shard_files(*n, num, index);
  auto in = n->inputs();
  for (auto& i : in) i = shard_by_file(i, num, index);
  return n->rebuild(std::move(in));
}

}  // namespace

dataset auto_shard(const dataset& ds, const input_context& ctx, auto_shard_policy policy) {
  ctx.validate();
  if (policy == auto_shard_policy::off || ctx.num_input_pipelines == 1) return ds;
  const auto num = static_cast<uint64_t>(ctx.num_input_pipelines);
  const auto index = static_cast<uint64_t>(ctx.input_pipeline_id);
  if (policy == auto_shard_policy::data) return dataset(shard_elements(ds.root(), num, index));
  const auto problem = file_shard_problem(*ds.root(), num);
  if (problem.empty()) return dataset(shard_by_file(ds.root(), num, index));
  if (policy == auto_shard_policy::auto_) return dataset(shard_elements(ds.root(), num, index));
  throw std::invalid_argument(
      fmt::format("auto_shard(file): {}; pipeline: {}", problem, ds.describe()));
}

}  // namespace actortrain::dataset
