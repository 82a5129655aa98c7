#pragma once
// The guard of a node: the only socket the node listens on. CAF 0.17.6's BASP
// broker reads a 32-byte header and reserves the payload length it announces (up to 4
// GiB) before any handshake, so nothing from the network may reach it unread. The guard
// listens at the task's address; for each connection it makes a Unix socket pair, hands
// one end to CAF's BASP broker (hand_over: the broker serves it as if it had accepted
// it; no TCP port of CAF's own exists) and relays between the peer and the other end,
// reading the peer's stream header by header (basp_check.hpp) before a byte of it goes
// on. Replies pass unread.
//
// With the job's key (plain clusters always have one), a connection first proves the
// job's secret (job_auth.hpp): until it has, it holds no buffer, no socket pair and
// nothing of CAF's; a wrong answer closes it. At most `max_pending` connections may be
// unproven at once; a new one then takes the place of the oldest (a member proves itself
// in one round trip, so a flood of idle connections cannot keep members out), and the
// ones proven are bounded by `max_connections` alone.
//
// Per node, not per connection:
//  - at most `max_pending` connections may be still before the end of their client
//    handshake, and each must get there within `handshake_deadline`; a connection over
//    the cap is closed at once, before anything is made for it;
//  - at most `max_connections` are relayed at once;
//  - buffers are fixed (two of `buffer_size` per connection): what a peer can make the
//    guard hold is bounded by these numbers.
// Every failure on the guard's thread closes the one connection it concerns and is
// logged with the peer's address; running out of descriptors (EMFILE) refuses new
// connections until some close, and never ends the guard.
//
// With TLS (limits::tls) the guard is the TLS server: the handshake is the proof (a
// certificate chained to the job's CA; the same caps, eviction and deadline as the
// job's exchange), and the guard relays the plaintext, checked as above. Decrypted bytes
// that wait in a session are relayed without waiting for the socket.
//
// Outbound: adopt() relays a connection the node dialed (its membership proved by the
// dialer): the server's stream is checked as a server's (basp_check::limits::
// server_stream), and with TLS the guard is the client from then on. A guard made
// without a listener does only this (dial.cpp keeps one per process).
//
// Threads: one, with epoll; no CAF.

#include "basp_check.hpp"
#include "job_auth.hpp"
#include "tls.hpp"

#include <actortrain/actors/net/sockets.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace actortrain::detail {

class basp_guard {
 public:
  using log_fn = std::function<void(const std::string&)>;
  /// Gives one end of a connection's socket pair to CAF's BASP broker (called on the
  /// guard's thread; must not block).
  using hand_over_fn = std::function<void(net::unique_fd)>;

  struct limits {
    uint64_t max_payload = uint64_t{64} << 20;  ///< per BASP message after the handshake
    size_t max_pending = 16;
    size_t max_connections = 256;
    std::chrono::milliseconds handshake_deadline{10000};
    size_t buffer_size = 64 * 1024;
    /// The job's key: connections prove it before anything else (none: no proof asked).
    std::optional<job_key> key;
    /// TLS: connections prove membership by the handshake (a certificate chained to the
    /// job's CA), and the guard relays the plaintext; instead of `key`.
    std::shared_ptr<const tls::context> tls;
  };

  /// Counters since the start.
  struct counts {
    size_t accepted = 0;
    size_t refused_header = 0;   ///< closed for a header out of bounds
    size_t refused_busy = 0;     ///< closed at once: over a cap, or out of descriptors
    size_t timed_out = 0;        ///< no handshake within the deadline
    size_t refused_auth = 0;     ///< a wrong answer to the job's greeting
    size_t evicted = 0;          ///< unproven, closed to make room for a newer one
    size_t proven = 0;           ///< proved the job's secret
    size_t open = 0;             ///< relayed now
  };

  /// Listens on host:port (SO_REUSEADDR). Throws net::socket_error (a std::runtime_error)
  /// naming the address when it cannot listen.
  basp_guard(const std::string& host, uint16_t port, limits l, hand_over_fn hand_over, log_fn log);
  /// A guard with no listener, relaying only what is adopted.
  explicit basp_guard(log_fn log);
  /// Stops accepting, closes every relayed connection and joins the thread.
  ~basp_guard();
  basp_guard(const basp_guard&) = delete;
  basp_guard& operator=(const basp_guard&) = delete;

  /// The port it listens on (the given one, or the kernel's pick for 0).
  uint16_t port() const;
  counts count() const;

  /// Relays a connection our node made (thread-safe): `peer` is connected to a member
  /// (proven: through `session`'s handshake, or the job's exchange in plain mode), and
  /// the answer is the end to give CAF's BASP broker as the connection. What the peer
  /// sends is read as a BASP server's stream and checked with `check` before CAF gets a
  /// byte; with a session, the guard is the TLS client from here on.
  net::unique_fd adopt(net::unique_fd peer, std::unique_ptr<tls::session> session, const std::string& who,
                       basp_check::limits check);

 private:
  void start();
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace actortrain::detail
