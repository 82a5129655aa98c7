// Reaching the other tasks of a cluster: connecting to a task's node actor with retries
// until a deadline, and asking a ps task for its shard. Internal to actors/ (node.cpp's
// roles and tests/actors/dial_test.cpp).
//
// CAF 0.17 neither bounds a connection attempt (remote_actor blocks while a peer accepts
// and stays silent) nor fails a request whose receiver's process died (only the request's
// own timeout ends it): both are handled here, so a task that starts before its peers
// finds them once they listen, and one that is killed and restarted at its address while
// it is being asked is asked again.
#pragma once

#include <actortrain/actors/net/cluster_file.hpp>
#include <actortrain/actors/core/messages.hpp>

#include <caf/event_based_actor.hpp>

#include <chrono>
#include <functional>
#include <string>

namespace actortrain {

/// The actor system option that holds a plain job's key (64 hex digits; configure_for
/// sets it from the cluster's secret file). With it, a plain dial proves the job's secret
/// on its own socket before BASP (job_auth.hpp); without it (tests of CAF's own
/// transport), CAF connects as usual.
constexpr const char* job_key_option = "actortrain.job-key";

/// The actor system options that hold a TLS job's files (configure_for sets them from the
/// cluster's "tls" section): with them, a dial runs the TLS client itself (tls.hpp) and
/// relays the plaintext to BASP.
constexpr const char* tls_certificate_option = "actortrain.tls-certificate";
constexpr const char* tls_key_option = "actortrain.tls-key";
constexpr const char* tls_ca_option = "actortrain.tls-ca";

/// The largest BASP message a server this process dials may announce (run_task sets it
/// from the job; 64 MiB without it). Larger headers close the connection before CAF
/// reads them.
constexpr const char* max_message_option = "actortrain.max-message";

/// Connects `self` to the node actor of the task at `addr`, retrying every 200 ms until
/// `deadline` (each attempt with its own timeout of at most 3 s), then calls `done` in
/// `self`'s context. With the job's key or TLS files in the system's config, each attempt
/// proves membership on its own socket first and the connection is relayed by this
/// process's outbound guard (basp_guard.hpp: the server's BASP stream checked, TLS ended
/// there). A handshake the peer refuses ends the dial at once when
/// `refusal_final` (a peer with another CA will not change its mind); redialing a task
/// that is coming back, CAF 0.17 was seen to close one handshake of the restarted
/// process, hence `refusal_final = false` there.
void dial_from(caf::event_based_actor* self, task_address addr, std::chrono::steady_clock::time_point deadline,
               std::function<void(caf::expected<caf::actor>)> done, bool refusal_final = true);

/// dial_from on the calling (non-actor) thread; the error names the address and budget.
caf::expected<caf::actor> dial(caf::actor_system& sys, const task_address& addr, std::chrono::milliseconds budget);

/// `cannot reach ADDR within BUDGET ms: WHY`.
std::string unreachable(const task_address& addr, std::chrono::milliseconds budget, const caf::error& e);

/// A ps task's node actor and its shard.
struct located_shard {
  caf::actor node;
  shard_contact contact;
};

/// Dials the ps task at `addr` (until `deadline`) and asks it for shard `index` (each
/// request bounded by `timeout`), then calls `done` once, in `self`'s context. `self`
/// is dedicated to this: it monitors the ps node while it waits, and when that task goes
/// down before answering it dials the address again. The shard's own refusals end the
/// fetch; `budget` is only for the message of a failed dial.
void fetch_shard_from(caf::event_based_actor* self, task_address addr, uint32_t index, std::chrono::milliseconds budget,
                      std::chrono::steady_clock::time_point deadline, caf::timespan timeout,
                      std::function<void(caf::expected<located_shard>)> done, bool refusal_final = false);

/// fetch_shard_from on the calling (non-actor) thread, from now for `budget`; a refused
/// handshake is final.
caf::expected<located_shard> fetch_shard(caf::actor_system& sys, const task_address& addr, uint32_t index,
                                         std::chrono::milliseconds budget, caf::timespan timeout);

}  // namespace actortrain
