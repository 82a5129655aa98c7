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
};

}  // namespace actortrain
