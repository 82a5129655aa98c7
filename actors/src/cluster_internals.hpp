#pragma once
// What the simulator sees of a cluster beyond the public API: every shard's counters,
// with their apply logs (cluster_spec::apply_log). Not installed.

#include <actortrain/actors/cluster.hpp>
#include <actortrain/actors/messages.hpp>

#include <future>
#include <vector>

namespace actortrain {

struct cluster_internals {
  /// Each ps shard's stats, by index (run the test scheduler before get()).
  static std::future<std::vector<ps_stats>> shard_stats(cluster& c);
  /// What the runner does on a dataset_lost event (the simulator drains events itself).
  static void rebuild_dataset_shard(cluster& c, uint32_t pipeline);
  /// What the runner does on a ps_lost event.
  static void respawn_ps(cluster& c, uint32_t index);
};

}  // namespace actortrain
