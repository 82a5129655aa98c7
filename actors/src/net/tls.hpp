#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// Mutual TLS of a cluster, driven by ActorTrain itself (OpenSSL), not by caf::openssl:
// a node's guard (basp_guard.hpp) is the TLS server of every connection it accepts, and
// the dialer (dial.hpp) the client of every connection it makes; CAF's BASP broker only
// ever sees the plaintext, over a Unix socket pair, after the peer's certificate was
// checked and with every BASP header it receives checked first (basp_check.hpp).
//
// Who is a member: whoever holds a certificate chained to the job's CA, with the key
// that goes with it. One identity per job, not per task (no name is checked): every
// task of a job is equally trusted, and a ps task can already change every parameter.
// TLS 1.2 at least; both sides present a certificate and check the other's.

#include <actortrain/actors/net/sockets.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

struct bio_st;
struct ssl_st;
struct ssl_ctx_st;

namespace actortrain::detail::tls {

/// The three PEM files of a node: its certificate, its key, the job's CA.
struct files {
  std::string certificate, key, ca;
};

/// Both sides' settings, shared by every connection of a process (thread-safe once made).
class context {
 public:
  /// Reads the files. Throws std::runtime_error naming the file and OpenSSL's reason (a
  /// missing file, no PEM in it, a key that does not belong to the certificate).
  explicit context(const files& f);
  ~context();
  context(const context&) = delete;
  context& operator=(const context&) = delete;
  ssl_ctx_st* get() const { return ctx_; }

 private:
  ssl_ctx_st* ctx_ = nullptr;
};

/// The context for `f`, made once per process and set of files.
std::shared_ptr<const context> context_for(const files& f);

/// What an operation on a non-blocking session did.
enum class status {
  ok,          ///< done (a handshake), or bytes moved (see the count)
  want_read,   ///< call again once the socket is readable
  want_write,  ///< call again once the socket is writable
  closed,      ///< the peer closed the connection
  failed,      ///< a protocol error or a refused certificate (see why())
};

/// One connection's TLS over a socket the caller owns (non-blocking or not).
class session {
 public:
  session(const context& ctx, int fd, bool server);
  ~session();
  session(const session&) = delete;
  session& operator=(const session&) = delete;

  status handshake();
  /// Reads up to `n` plaintext bytes into `data`; `got` is how many on ok.
  status read(char* data, size_t n, size_t& got);
  /// Writes up to `n` plaintext bytes; `put` is how many on ok (possibly fewer than n:
  /// call again with the rest, from the same or another buffer).
  status write(const char* data, size_t n, size_t& put);
  /// Waits for nothing: ok once at least one plaintext byte can be read (it stays to be
  /// read), else what read() would say.
  status peek();
  /// From now on, gathers the records write() makes in a buffer of `bytes`, written to
  /// the socket when it fills and at flush(): a large write leaves in a few large socket
  /// writes instead of one per 16 KiB record (each of which crosses the network stack
  /// and wakes the reader). After the handshake; whoever writes must then flush().
  void buffer_writes(size_t bytes);
  /// Writes what the buffer holds: ok when all of it went (or nothing is buffered), else
  /// want_write (call again once writable) or failed (why()).
  status flush();
  /// Bytes read from the socket and not yet read from the session, decrypted or not (the
  /// socket may not be readable for them).
  bool buffered() const;
  /// Why the last operation failed, in words ("" while none did).
  const std::string& why() const { return why_; }
  /// The peer certificate's subject (after the handshake).
  std::string peer_subject() const;

 private:
  status outcome(int ret, const char* what);
  ssl_st* ssl_ = nullptr;
  bio_st* buffer_ = nullptr;  // the write buffer (owned by ssl_), or null
  std::string why_;
};

/// The peer refused us or we refused it at the handshake (another CA, a peer without
/// TLS): final, no point in dialing again.
class refused : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A connected client session (the socket non-blocking, TCP_NODELAY); the server's first
/// bytes may wait in the session (buffered()).
struct connection {
  net::unique_fd fd;
  std::unique_ptr<session> tls;
};

/// Connects to host:port and runs the client handshake within `bound` in total, until the
/// server's first bytes when `server_speaks_first` (BASP: with TLS 1.3 the server checks
/// our certificate only after our side of the handshake ended, and a refusal comes
/// then); a protocol whose client speaks first (the data plane) sees a refusal at its
/// first read instead. Throws
/// refused when either side refuses the other's certificate or the peer does not speak
/// TLS, net::socket_error for the network's failures (refused, cut, timed out: worth
/// another try).
connection dial(const std::string& host, uint16_t port, const context& ctx, std::chrono::milliseconds bound,
                bool server_speaks_first = true);

/// The server's side of a connection accepted on `fd` (made non-blocking here): the
/// handshake within `bound`, the client's certificate checked. Throws refused or
/// net::socket_error as dial does.
std::unique_ptr<session> accept(int fd, const context& ctx, std::chrono::milliseconds bound);

/// Waits until `fd` is ready for what `s` asks (want_read: readable, want_write:
/// writable), or `until` passes (false).
bool wait_ready(int fd, status s, std::chrono::steady_clock::time_point until);

}  // namespace actortrain::detail::tls
