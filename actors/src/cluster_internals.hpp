#pragma once
// What the simulator sees of a cluster beyond the public API: every shard's counters,
// with their apply logs (cluster_spec::apply_log). Not installed.

#include <actortrain/actors/cluster.hpp>
#include <actortrain/actors/messages.hpp>

#include <caf/expected.hpp>

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
  /// A second coordinator takes over the run in progress, as a restarted coordinator
  /// process would: it resumes from the newest checkpoint in checkpoint_dir under a new
  /// coordinator epoch, with the same workers, shards and pipelines, and join() follows
  /// it. The old one is left running (a zombie that woke up). Returns the old one's
  /// result and the new one's first coordinator epoch: events of lower epochs are the
  /// zombie's (the cluster itself ignores them from now on).
  struct deposed {
    std::future<caf::expected<run_summary>> result;
    uint64_t epoch_floor = 0;
  };
  static deposed take_over(cluster& c);
};

}  // namespace actortrain
