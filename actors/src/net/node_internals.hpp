#pragma once
// What the files of a node process share (private to actors/src/net/): the node actor's
// start-up values and the box the application thread waits on (node_actor.cpp), the
// context and the roles a task plays (roles.cpp), and small helpers. process.cpp runs a
// task; node_cli.cpp is its command line.

#include <actortrain/actors/coordinator/coordinator.hpp>
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
  bool stopped = false;              // told to stop (ps tasks), with `outcome`
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
/// registrations, ps handles, the status report, the end of the job. Other tasks' nodes
/// travel as caf::actor: a CAF 0.17 interface cannot name itself (an alias of
/// caf::typed_actor cannot appear in its own signatures), so a node handle that came
/// from another process is checked when its messages arrive.
using node_actor = caf::typed_actor<
  // The coordinator's task: the live status, from the coordinator.
  caf::replies_to<report_atom>::with<status_report>,
  // Any task: ps shard `index` held here (answered once this process holds it).
  caf::replies_to<ps_handle_atom, uint32_t>::with<shard_contact>,
  // This process's own runner: the shards it holds (final: no more will come).
  caf::reacts_to<caf::put_atom, std::map<uint32_t, shard_contact>>,
  // The coordinator's task: ps task `index` came back as a new process (its node).
  caf::reacts_to<caf::put_atom, uint32_t, caf::actor>,
  // The coordinator's task: the coordinator exists; so many workers are its own; the ps
  // tasks' nodes.
  caf::reacts_to<host_atom, coordinator_actor, uint32_t, std::vector<caf::actor>>,
  // The coordinator's task: a worker task asks to be admitted: its generation.
  caf::replies_to<register_atom, node_registration>::with<uint64_t>,
  // Sent to itself: a ps task's lost coordinator did not come back in time.
  caf::reacts_to<retry_atom, uint64_t, std::string>,
  // Other tasks: the coordinator's node, whose loss ends this task.
  caf::reacts_to<watch_atom, caf::actor, std::string>,
  // The coordinator's task: an evaluator's node, told when the job ends.
  caf::reacts_to<done_atom, caf::actor>,
  // A worker task: its replica, which pulls the final parameters when the job ends.
  caf::reacts_to<replica_atom, worker_actor>,
  // Worker and evaluator tasks: the end of the job.
  caf::replies_to<done_atom, job_outcome>::with<caf::ok_atom>,
  // ps tasks: the end of the job, and how it ended (a ps task exits as the job did).
  caf::replies_to<stop_atom, job_outcome>::with<caf::ok_atom>,
  // This process's own runner, on the coordinator's task: tell every other task.
  caf::replies_to<finish_atom, job_outcome>::with<caf::ok_atom>>;

node_actor spawn_node_actor(caf::actor_system& sys, node_init init);

/// The largest message a task of job `j` can legitimately send (BASP payload, or a data-
/// plane frame's message bytes and tensors): every variable with two optimizer slots (a
/// checkpoint partition shipped to the chief), twice, and room for validation batches and
/// the rest; at least 64 MiB (process.cpp).
uint64_t max_message_bytes(const job& j);

/// How many connections a listener of a node takes (the BASP guard, a ps's data plane),
/// given how many tasks may dial it: at most `pending` before they prove themselves
/// (handshake, greeting), at most `open` in all.
struct connection_caps {
  size_t pending, open;
};
inline connection_caps caps_for(size_t dialers) {
  return {std::max<size_t>(16, 2 * dialers), std::max<size_t>(64, 8 * dialers)};
}

[[noreturn]] inline void fail(const std::string& text) { throw std::runtime_error(text); }

/// A task's failure that a restart may cure (a peer unreachable or lost, the run ended by
/// a lost task): run_node exits with exit_status::retry.
struct retryable_failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};
[[noreturn]] inline void fail_retryable(const std::string& text) { throw retryable_failure(text); }

/// The value, or a failure naming `what`: retryable when reaching a peer that may still
/// come up failed, final when the peer refused this task (another CA, another job).
template <class T>
T must(caf::expected<T> x, const std::string& what) {
  if (!x) {
    auto text = what + ": " + describe(x.error());
    if (code_of(x.error()) == error_code::invalid_request) fail(text);
    fail_retryable(text);
  }
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
  node_actor node;
  std::shared_ptr<node_box> box;
  std::ostream& out;
  std::shared_ptr<detail::defect_switch> plant;  // test-only (node_options::plant)
  /// This process's node as other tasks hold it (node_actor: peers travel erased).
  caf::actor node_as_peer() const { return caf::actor_cast<caf::actor>(node); }
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


/// Whole lines to `out`, each after `prefix`, from any thread (one lock for all of them).
data_plane::log_fn log_lines(std::ostream& out, std::string prefix);
/// "2026-12-05T03:40:00.123Z INFO  ": the time (UTC) and a level for a node's log `line`
/// (ERROR for errors; WARN for warnings, closed connections, refusals and failures).
std::string log_stamp(const std::string& line,
                      std::chrono::system_clock::time_point now = std::chrono::system_clock::now());

/// The roles (roles.cpp): the chief (or worker 0 of a worker-only cluster) hosting the
/// coordinator, a worker, a ps task, an evaluator.
node_result host_coordinator(node_context& cx);
node_result play_worker(node_context& cx);
node_result play_ps(node_context& cx);
node_result play_evaluator(node_context& cx);

}  // namespace actortrain::detail
