#pragma once
// The transport of a cluster of processes as its tasks use it, for programs that serve
// or reach an actor the same way (`actortrain bench transport` measures it with this):
//  - configure_transport: an actor system set up as a task's is (the middleman, the
//    job's secret or the TLS files, heartbeats, connection timeouts);
//  - guarded_listener: the only listener of a task, the BASP guard
//    (actors/src/net/basp_guard.hpp): a peer proves membership (the job's secret, or a
//    certificate of the job's CA in a TLS handshake the guard runs itself) before CAF's
//    BASP reads a byte, and every BASP header is checked against the job's bounds;
//  - dial_actor: the actor published at a task's address, with retries to a deadline;
//    the connection is relayed by the process's outbound guard (the server's headers
//    checked, TLS ended there).
// Includes CAF: for the few files that serve or dial, not for widely included headers.

#include <actortrain/actors/net/cluster_file.hpp>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/expected.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace actortrain {

namespace detail {
class basp_guard;
}

/// Sets `cfg` up as a process of `def` (TLS when `def` has it, else the job's secret,
/// which `def` must then name), with at most `threads` scheduler threads; a server this
/// process dials may announce BASP messages of up to `max_message` bytes. Throws
/// cluster_file_error for a missing secret or unreadable TLS files.
void configure_transport(caf::actor_system_config& cfg, const cluster_def& def, int threads, uint64_t max_message);

/// Listens at host:port (0: the kernel picks) for `served` (any actor: actor_cast it), behind the BASP guard with
/// `def`'s membership proof; peers may send BASP messages of up to `max_message` bytes.
/// Stops listening and closes every connection it accepted when it goes. Throws
/// std::runtime_error naming the address when it cannot listen.
class guarded_listener {
 public:
  using log_fn = std::function<void(const std::string&)>;
  guarded_listener(caf::actor_system& sys, caf::strong_actor_ptr served, const cluster_def& def, const std::string& host,
                   uint16_t port, uint64_t max_message, log_fn log);
  ~guarded_listener();
  guarded_listener(const guarded_listener&) = delete;
  guarded_listener& operator=(const guarded_listener&) = delete;
  uint16_t port() const;

 private:
  std::unique_ptr<detail::basp_guard> guard_;
};

/// The actor published at `addr` (by a guarded_listener of the same job), retrying every
/// 200 ms within `budget`; the error names the address, the budget and the last reason.
caf::expected<caf::actor> dial_actor(caf::actor_system& sys, const task_address& addr,
                                     std::chrono::milliseconds budget);

/// The registry half of shutting down a process whose actors went to peers: once its
/// actors stopped, forgets them in CAF's actor registry until it stays empty for 100 ms
/// (at most 2 s). CAF 0.17 keeps an actor whose handle went to another process
/// registered until the peer says it dropped its proxy, and ~actor_system waits for a
/// detached actor's thread, which waits for its actor to be released, before it empties
/// the registry: without this, a process can hang at exit for as long as a peer lives.
void forget_registry(caf::actor_system& sys);

/// Shutting down such a process: tells `last` (the actor holding the others) to exit and
/// waits up to 5 s until it is down, then up to `bound` until no actor of `sys` runs,
/// then forget_registry. Returns how many actors still ran after `bound` (0: all stopped).
size_t stop_and_forget(caf::actor_system& sys, const caf::actor& last, std::chrono::milliseconds bound);

}  // namespace actortrain
