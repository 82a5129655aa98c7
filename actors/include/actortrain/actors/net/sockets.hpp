#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// The low-level socket helpers, written once for the tensor data plane (data_plane.hpp),
// the BASP guard, `actortrain launch` and `actortrain bench transport`: an owner of a
// file descriptor, listening on and connecting to IPv4 TCP addresses, accepting, moving
// exactly N bytes, the socket options these use, and what an address names.
//
// Sockets are blocking: a connect waits in poll() for its deadline, then hands back a
// blocking socket, and a read or write is bounded by the socket's timeouts
// (set_receive_timeout, set_send_timeout), not by an argument. An interrupted call
// (EINTR) goes on where it stopped. Every failure is a socket_error whose text names
// the operation, the address when there is one, and the system's reason; callers that
// name the address themselves take its reason() alone.
//
// Training needs none of this: it is public so that the `actortrain` command's tools
// share it with the library, not as an API of its own.

#include <sys/uio.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace actortrain::net {

/// Owns one file descriptor (a socket, or a pipe's end) and closes it when it goes.
class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) noexcept : fd_(fd) {}
  unique_fd(unique_fd&& other) noexcept;
  unique_fd& operator=(unique_fd&& other) noexcept;
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  ~unique_fd();

  /// The descriptor, -1 when none; still owned.
  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  /// Closes the one it holds (if any) and takes `fd`.
  void reset(int fd = -1) noexcept;
  /// Gives the descriptor up without closing it.
  int release() noexcept;

 private:
  int fd_ = -1;
};

/// A failed socket operation. what() is "CONTEXT: REASON" ("cannot connect to
/// 127.0.0.1:7001: Connection refused"), or the reason alone when there is no context
/// (a read whose peer closed early); code() is the errno behind it, 0 when the system
/// reported none (an early close, an unknown host).
class socket_error : public std::runtime_error {
 public:
  socket_error(const std::string& context, const std::string& reason, int code);
  const std::string& reason() const noexcept { return reason_; }
  int code() const noexcept { return code_; }

 private:
  std::string reason_;
  int code_;
};

struct listen_options {
  int backlog = 64;
  /// SO_REUSEADDR: a port whose last connections linger in TIME_WAIT can be taken again.
  bool reuse_address = false;
};

/// A socket listening on host:port (port 0: one the kernel picks; local_port says which).
/// `host` is a dotted quad or a name the resolver turns into an IPv4 address.
unique_fd listen_on(const std::string& host, uint16_t port, const listen_options& options = {});

/// The local port `fd` is bound to.
uint16_t local_port(int fd);
/// Who is at the other end of the connection `fd`, for messages: "127.0.0.1:41234"
/// ("socket N" when the system cannot say).
std::string peer_text(int fd);

/// True when a socket could be bound to host:port now (the socket is closed at once:
/// the port may be taken again before its user binds it). Throws only when no socket
/// can be made at all.
bool can_bind(const std::string& host, uint16_t port);

/// The next connection on `listener`, waiting as long as it takes (connections aborted
/// before they were taken are skipped). A listener shut down to end this wait fails it
/// like any other error. The socket is close-on-exec.
unique_fd accept_from(int listener);

/// accept_from, but failing (code ETIMEDOUT) when no connection comes within `bound`.
unique_fd accept_within(int listener, std::chrono::milliseconds bound);

/// A connection to host:port, or a failure within `timeout` (refused at once, or
/// ETIMEDOUT when nobody answers in time). The socket is blocking and close-on-exec.
unique_fd connect_to(const std::string& host, uint16_t port, std::chrono::milliseconds timeout);

/// TCP_NODELAY: small writes go out at once instead of waiting for the peer's ack.
void set_no_delay(int fd);

/// SO_RCVTIMEO and SO_SNDTIMEO: a blocking read (write) that moves nothing for this long
/// fails with "timed out"; 0 waits forever.
void set_receive_timeout(int fd, std::chrono::milliseconds timeout);
void set_send_timeout(int fd, std::chrono::milliseconds timeout);

/// Reads exactly `n` bytes into `data`, however many reads that takes. False when the
/// peer closed the connection before the first byte (a clean end); a close after some
/// bytes, the receive timeout and the system's errors throw.
bool read_exact(int fd, void* data, size_t n);

/// read_exact, but all `n` bytes within `bound` in total (a timeout per read would let
/// a peer that trickles bytes hold on for longer): ETIMEDOUT when they do not come.
bool read_exact_within(int fd, void* data, size_t n, std::chrono::milliseconds bound);
/// Reads what has arrived, at most `n` bytes, waiting for at least one; 0 when the peer
/// closed the connection.
size_t read_some(int fd, void* data, size_t n);

/// Writes all `n` bytes. A peer that went away is a socket_error, never a SIGPIPE.
void write_exact(int fd, const void* data, size_t n);

/// Writes every byte of `buffers`, in order, in as few system calls as the kernel
/// allows (a message's header and its tensors in one). The entries are advanced as
/// their bytes go out.
void write_exact(int fd, std::vector<iovec>& buffers);

/// True for a host naming this machine's loopback: "localhost" (any case), 127.x.y.z, ::1.
bool is_loopback_host(const std::string& host);

/// Makes this process ignore SIGPIPE: a write to a peer that vanished is then an error
/// (EPIPE), never the end of the process. TLS reads and writes (OpenSSL writes with
/// write(2)) otherwise block SIGPIPE around each call, four system calls each; after this
/// they skip that. For programs that own their process (run_task, the bench), not for a
/// library embedded in someone else's.
void ignore_sigpipe();
/// Whether ignore_sigpipe() was called.
bool sigpipe_ignored() noexcept;

/// True for an IPv6 address literal ("::1", "fe80::1"; without brackets).
bool is_ipv6_literal(const std::string& host);

/// Where a task whose address names `host` listens: the address itself when it is an
/// IPv4 literal or loopback; every interface (0.0.0.0) for any other name, which may
/// not resolve yet when the task starts (a Kubernetes pod's service name gets its
/// record once the pod runs) or may resolve to an address of a NAT in front of it.
std::string listen_host(const std::string& host);

}  // namespace actortrain::net
