#pragma once
// What the simulator sees of a cluster beyond the public API: every shard's counters,
// with their apply logs (cluster_spec::apply_log). Not installed.

#include <actortrain/actors/cluster/cluster.hpp>
#include <actortrain/actors/coordinator/coordinator.hpp>
#include <actortrain/actors/data/dataset_shard.hpp>
#include <actortrain/actors/cluster/events.hpp>
#include <actortrain/actors/core/messages.hpp>
#include <actortrain/actors/worker/worker.hpp>

#include <caf/expected.hpp>

#include <functional>
#include <future>
#include <memory>
#include <vector>

namespace actortrain {

/// A cluster whose ps shards or workers live in other processes (the node runtime).
struct cluster::parts {
  /// The ps shards by index (spec.num_ps of them); empty: spawn them here.
  std::vector<ps_shard_actor> ps;
  /// Workers spawned here, ids 0..n-1; the others (up to spec.num_workers) join through
  /// the coordinator's join. -1: all of them.
  int local_workers = -1;
  /// Called on the application thread when a remote ps shard is lost (instead of
  /// respawning it here).
  std::function<void(uint32_t)> ps_lost;
  /// coordinator_options::pipeline_affinity (workers with replicas of the pipelines).
  bool pipeline_affinity = false;
  /// Test-only: a defect planted in the coordinator, the workers and the dataset shards.
  std::shared_ptr<detail::defect_switch> plant;
};

struct cluster_internals {
  /// A cluster built from `p`.
  static std::unique_ptr<cluster> make(caf::actor_system& sys, cluster_spec spec, model::model structure,
                                       const model::optimizer& opt, model::loss_ptr loss,
                                       std::vector<model::metric_ptr> metrics, const cluster::parts& p);
  // What a cluster of processes builds the same way as the cluster (the worker tasks
  // must agree with the chief's coordinator, or steps would go to the wrong rows).
  /// How spec places the model's variables over spec.num_ps shards.
  static std::shared_ptr<const model::placement> placement_for(const model::model& structure, const cluster_spec& spec);
  /// Input pipelines (= dataset shards) of a run, and the options of pipeline `i`.
  static int num_pipelines(const cluster_spec& spec);
  static dataset_shard_options pipeline_options(const cluster_spec& spec, int i);
  /// A worker of `spec` with id `id` (its ps and seam still to be set).
  static worker_options worker_options_for(const cluster_spec& spec, uint32_t id, const model::model& structure,
                                           model::loss_ptr loss,
                                           std::vector<std::shared_ptr<const model::metric>> metrics,
                                           std::shared_ptr<const model::placement> placement);
  static coordinator_actor coordinator(cluster& c);
  /// The ps shards by index, as the coordinator knows them.
  static std::vector<ps_shard_actor> ps(cluster& c);
  static std::shared_ptr<const model::placement> placement(cluster& c);
  /// Each ps shard's stats, by index (run the test scheduler before get()).
  static std::future<std::vector<ps_stats>> shard_stats(cluster& c);
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
  /// Calls `fn` with every event the cluster handles (on the thread in done/join),
  /// before the cluster acts on it; events of a deposed coordinator are not shown.
  static void observe(cluster& c, std::function<void(const event&)> fn);
  /// Job `j`'s loop (j.loop) on the pipelines `fn` builds, scheduled at once without
  /// waiting, the grants closed (the simulator polls done() and joins): every pass's
  /// steps on every replica, an epoch mark between passes.
  static cluster::run_handle schedule_loop(cluster& c, const job& j, dataset::dataset_fn fn);
};

}  // namespace actortrain
