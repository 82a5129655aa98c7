#pragma once
// What the files of a node process share (private to actors/src/net/): the node actor's
// start-up values and the box the application thread waits on (node_actor.cpp), the
// context and the roles a task plays (roles.cpp), and small helpers. process.cpp runs a
// task; node_cli.cpp is its command line.

#include <actortrain/actors/core/errors.hpp>
#include <actortrain/actors/core/messages.hpp>
#include <actortrain/actors/net/data_plane.hpp>
#include <actortrain/actors/net/process.hpp>
#include <actortrain/actors/worker/worker.hpp>

#include <caf/all.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "../core/planted.hpp"

namespace actortrain::detail {

using retry_atom = caf::atom_constant<caf::atom("retry")>;
using finish_atom = caf::atom_constant<caf::atom("finish")>;
using host_atom = caf::atom_constant<caf::atom("host")>;
using replica_atom = caf::atom_constant<caf::atom("replica")>;

// Telling the other tasks that the job ended: each must acknowledge within this.
inline constexpr auto farewell_timeout = std::chrono::seconds(5);

inline caf::timespan span(std::chrono::milliseconds ms) { return std::chrono::duration_cast<caf::timespan>(ms); }

// The consistency the job runs with: the cluster definition's, else sync for a
// worker-only cluster, else the job's own.
inline consistency_mode job_consistency(const job& j, const cluster_def& def) {
  if (def.consistency) return *def.consistency;
  if (def.worker_only()) return consistency_mode::sync();
  return j.spec.consistency;
}

// Without ps tasks the coordinator's task holds the job's ps shards itself.
inline bool shards_on_coordinator(const cluster_def& def) { return def.ps.empty(); }

inline int job_num_ps(const job& j, const cluster_def& def) {
  return shards_on_coordinator(def) ? std::max(1, j.spec.num_ps) : static_cast<int>(def.ps.size());
}

// What the main thread waits for; the node actor fills it in.
struct node_box {
  std::mutex mtx;
  std::condition_variable cv;
  size_t joined = 0;                 // remote workers admitted (coordinator's task)
  std::optional<job_outcome> outcome;  // the end of the job (other tasks)
  std::optional<uint64_t> digest;      // a worker's pull of the final parameters
  std::string digest_error;
  bool stopped = false;              // told to stop (ps tasks)
  std::string fatal;                 // a peer this task cannot do without went away

  template <class F>
  void update(F f) {
    {
      std::lock_guard<std::mutex> g{mtx};
      f(*this);
    }
    cv.notify_all();
  }

  // Waits until `pred` holds or `fatal` is set, at most until `deadline`; true if `pred`.
  template <class Pred>
  bool wait(Pred pred, std::optional<std::chrono::steady_clock::time_point> deadline) {
    std::unique_lock<std::mutex> g{mtx};
    auto ready = [&] { return pred(*this) || !fatal.empty(); };
    if (deadline)
      cv.wait_until(g, *deadline, ready);
    else
      cv.wait(g, ready);
    return pred(*this);
  }
};

// What a node actor starts with.
struct node_init {
  task_id task;
  fingerprint fp;
  std::shared_ptr<node_box> box;
  caf::timespan timeout{};
  uint32_t num_workers = 0;
  caf::timespan orphan_wait{};  // ps tasks: how long to outlive a lost coordinator
};

/// The node actor of this process (one per process, published at the task's address):
/// registrations, ps handles, the status report, the end of the job.
caf::actor spawn_node_actor(caf::actor_system& sys, node_init init);

[[noreturn]] inline void fail(const std::string& text) { throw std::runtime_error(text); }

template <class T>
T must(caf::expected<T> x, const std::string& what) {
  if (!x) fail(what + ": " + describe(x.error()));
  return std::move(*x);
}

inline std::string task_at(const cluster_def& def, const task_id& t) {
  return fmt::format("{} at {}", to_string(t), def.address(t).text());
}

// -- the roles (roles.cpp) and what they share ----------------------------------------

struct node_context {
  const node_options& opts;
  const job& j;
  caf::actor_system& sys;
  caf::actor node;
  std::shared_ptr<node_box> box;
  std::ostream& out;
  std::shared_ptr<detail::defect_switch> plant;  // test-only (node_options::plant)
  caf::timespan timeout() const { return span(opts.cluster.request_timeout); }
  caf::timespan connect_budget() const { return span(opts.cluster.connect_timeout); }
};

/// A process of the cluster `def`: our types, the middleman, TLS when the cluster has
/// it, heartbeats and connection timeouts (process.cpp).
void configure_for(caf::actor_system_config& cfg, const cluster_def& def, int threads);

// Applies CAF's own options given as --caf.NAME=VALUE (node_options::caf_options) over
// what configure_for set, through CAF's parser (and no caf-application.ini). Throws
// cluster_file_error naming the option CAF refused.
void apply_caf_options(caf::actor_system_config& cfg, const std::vector<std::string>& options);

/// The registry half of shutting down: once the process's actors stopped, forgets them
/// in the registry until it stays empty for 100 ms, at most 2 s (process.cpp).
void forget_registry(caf::actor_system& sys);

/// Whole lines to `out`, each after `prefix`, from any thread (one lock for all of them).
data_plane::log_fn log_lines(std::ostream& out, std::string prefix);

/// The roles (roles.cpp): the chief (or worker 0 of a worker-only cluster) hosting the
/// coordinator, a worker, a ps task, an evaluator.
node_result host_coordinator(node_context& cx);
node_result play_worker(node_context& cx);
node_result play_ps(node_context& cx);
node_result play_evaluator(node_context& cx);

}  // namespace actortrain::detail
