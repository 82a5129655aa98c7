#pragma once
// The tensor data plane: pulls and pushes between a worker process and a ps process on a
// TCP connection of their own, beside BASP, which keeps every other message (control,
// fences, heartbeats, the handles themselves).
//
// Why: BASP moves a tensor through four user-space passes (serialize, a zero-filled read
// buffer, a copy to its worker thread, deserialize) and made a 4 MiB push + pull take
// about twice a raw TCP transfer of the same bytes. Here a message is serialized without
// its tensors (detail::tensor_side_channel in messages.hpp): a frame is a small header,
// the tensors' shapes, the message's other bytes, then each tensor's floats written
// straight from the matrix the message shares and read straight into the matrix the
// receiver gets. The kernel's copies are the only ones.
//
// Shared memory. When both ends are on one host, a client's offer of a shared-memory
// region is taken: the server maps it only when the offering process is on this kernel
// (its /proc entry opens) and in this network namespace — tasks in two namespaces stand
// for two hosts, whatever their hostname or a reachable /dev/shm say. A client offers
// a shared-memory region (a memfd of 2 rings of 8 MiB, one per
// direction, sealed against shrinking and growing: a client cannot turn the server's
// copies into a SIGBUS; the server maps only a sealed one) in its greeting. When the server maps it, a frame of 512 KiB of floats or
// more carries them in the sender's ring instead of the stream: one memcpy in, one out,
// no socket buffers; the frame (still on TCP, in order) says where, and the reader
// checks that place against the ring before copying and then releases it. A full ring
// sends the frame inline. The client closes the memfd as soon as the greeting is
// answered, so a killed process leaves nothing behind; a peer only ever reads floats
// from it.
//
// Frames. {magic, tensor count, request id, meta length} (24 bytes), then rows and cols
// of each tensor (16 bytes each), [the ring position, when the count's top bit says the
// floats are in shared memory], then the CAF serialization of the message, then the
// floats (unless in the ring), little-endian. The reader checks every announced length
// before allocating: against fixed bounds (max_wire_floats per tensor, 2^16 tensors, 1
// GiB of meta) and, on the server, against the job's largest message (`limits`), for the
// message bytes and the tensors' together; the message bytes are read into a buffer that
// grows as they arrive. It closes the connection on the first malformed frame; replies
// carry the request's id.
//
// Connections (server). The greeting must come within `greeting_deadline`; at most
// `max_greeting` connections may wait for theirs and `max_connections` be open, and one
// over either cap is closed in the accept loop, before a thread exists for it. A failure
// on a connection's threads (a thread that cannot start, an allocation that fails)
// closes that connection with a log line, never the process.
//
// Who talks. The ps side's `server` listens at a kernel-picked port for one shard: on
// 127.0.0.1 in a plain cluster (loopback only), where the task listens with TLS; a
// client presents a random per-process token (issued over BASP in the
// shard_contact a task answers ps_handle with) before anything else, else it is closed.
// Each accepted connection gets a reader thread, which puts each request straight into
// the shard's mailbox (its sender a companion actor, caf::actor_companion), and a writer
// thread, to which the companion hands the shard's replies (so a peer that stops reading
// never stalls the shard's thread). Anything but a pull, a row pull or a push is refused
// with an error reply. The worker side's stand-in (`open`) is a detached actor per
// shard: it connects and enters a companion of its own in the worker process's route
// table as the route for that shard (worker/shard_routes.hpp: the worker sends its pull,
// pull_rows and push requests there). The companion writes each
// request as a frame on the requester's thread (no hand-off on the way out); the stand-in's
// reader thread answers it when the reply frame comes back, so the worker's requests,
// timeouts and error handling are the ones it has over BASP. Requests sent to the
// stand-in itself take the same way.
//
// Failure. A stand-in ends when its connection closes or fails, when the shard it stands
// for goes down (BASP's monitor and heartbeats say so), or when told to exit; it then
// fails its open requests (error shard_lost) and leaves the route table, so later requests take
// BASP again. Writes are bounded by the timeout; a connection that cannot be made in time
// leaves the worker on BASP, with a log line.
//
// TLS. In a cluster with a tls section (hosts that may be others) every data-plane
// connection is a TLS session of ActorTrain's own (tls.hpp), both certificates checked
// before the greeting; the frames are the same, read and written through the session
// (decrypted straight into the receiving matrix). The reader thread and the writers
// take turns on the session, each waiting for the socket outside the lock
// (data_plane_wire.hpp: socket_link). A frame's records leave in 256 KiB socket writes,
// and a reader waiting for a large read is woken once 128 KiB have come (SO_RCVLOWAT).
//
// bfloat16. With "wire_floats": "bf16" (cluster_def::wire_bf16; endpoint::bf16,
// limits::bf16) a sender narrows the tensors marked tensor::reducible (gradients, and the
// values of training pulls) to bfloat16 when they go on the stream, never in shared
// memory; the shape entry's top bit says so and the reader widens them back.
//
// Includes only CAF's forward declarations.

#include <actortrain/actors/ps/handle.hpp>

#include <caf/fwd.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace actortrain {
class shard_routes;
}

namespace actortrain::detail::tls {
class context;
}

namespace actortrain::data_plane {

/// Where log lines go (one line each, without a newline); null = nowhere.
using log_fn = std::function<void(const std::string&)>;

/// Where one shard's data plane listens and what a client presents.
struct endpoint {
  uint16_t port = 0;   ///< 0 = no data plane
  std::string token;   ///< 32 hex digits
  /// (client side) the most bytes a reply frame may announce, message and tensors each:
  /// the job's largest message (0: the protocol's own bound).
  uint64_t max_frame_bytes = 0;
  /// (client side) the host: the ps task's host from the cluster (127.0.0.1 on one host).
  std::string host = "127.0.0.1";
  /// (client side) TLS between hosts: the job's certificate and CA; null: plain.
  std::shared_ptr<const detail::tls::context> tls;
  /// (client side) Gradients travel as bfloat16 when on the stream ("wire_floats").
  bool bf16 = false;
};

/// The TLS settings of a data plane's server or client between hosts, from the job's
/// certificate, key and CA (made once per process and set of files). Throws
/// std::runtime_error naming a file OpenSSL cannot use.
std::shared_ptr<const detail::tls::context> tls_context(const std::string& certificate, const std::string& key,
                                                        const std::string& ca);

/// Serves one ps shard's data plane until destroyed.
class server {
 public:
  /// Listens on 127.0.0.1 at a port the kernel picks, with a fresh random token, for
  /// `shard`; `request_timeout` bounds the greeting and each write. Throws
  /// std::runtime_error when it cannot listen.
  struct limits {
    uint64_t max_frame_bytes = uint64_t{1} << 30;  ///< message bytes, and tensor bytes, per frame
    size_t max_greeting = 16;
    size_t max_connections = 64;
    std::chrono::milliseconds greeting_deadline{3000};
    /// What the frames being read on all connections may hold at once (0: four whole
    /// frames, 8 × max_frame_bytes); a frame waits up to the request timeout for its share.
    uint64_t max_bytes_in_flight = 0;
    /// Where it listens: 127.0.0.1, or (between hosts) the task's address or every
    /// interface (net::listen_host).
    std::string listen_host = "127.0.0.1";
    /// TLS (between hosts): every connection is a TLS session with both certificates
    /// checked before the greeting; null: plain (loopback only).
    std::shared_ptr<const detail::tls::context> tls;
    /// The values of training pulls travel as bfloat16 when on the stream ("wire_floats").
    bool bf16 = false;
  };
  server(caf::actor_system& sys, ps_shard_actor shard, std::chrono::milliseconds request_timeout, log_fn log = nullptr);
  server(caf::actor_system& sys, ps_shard_actor shard, std::chrono::milliseconds request_timeout, limits l,
         log_fn log = nullptr);
  /// Stops accepting, closes every connection and joins its threads.
  ~server();
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  endpoint where() const;
  /// Connections that presented the token and are still open.
  size_t connections() const;
  /// Connections closed for a wrong token or a malformed frame, since the start.
  size_t refused() const;
  /// Connections whose tensors travel in shared memory, since the start.
  size_t shared_memory_connections() const;
  /// Requests (pulls, row pulls, pushes) it put into the shard's mailbox, since the start.
  size_t requests() const;

 private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

/// Spawns the stand-in for `shard` (a detached actor): it connects to `at` within
/// `timeout`, presents the token, and enters itself in `routes` as the way to `shard`
/// for the requests that move tensors (see above). Requests sent to it before it is connected wait
/// in its mailbox; if it cannot connect it logs why and ends (they bounce as from any
/// dead actor). Send it an exit to close it. `shared_memory`: offer the region (above);
/// false keeps every float on the TCP stream.
caf::actor open(caf::actor_system& sys, const endpoint& at, ps_shard_actor shard, std::shared_ptr<shard_routes> routes,
                std::chrono::milliseconds timeout, log_fn log = nullptr, bool shared_memory = true);

}  // namespace actortrain::data_plane
