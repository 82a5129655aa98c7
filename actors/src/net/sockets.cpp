// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// The low-level socket helpers (actortrain/actors/net/sockets.hpp): the only place in
// the project that calls socket, bind, listen, accept and connect, and that loops over
// short reads and writes.
#include <actortrain/actors/net/sockets.hpp>

#include <atomic>
#include <csignal>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

#include <fmt/format.h>

namespace actortrain::net {

unique_fd::unique_fd(unique_fd&& other) noexcept : fd_(other.release()) {}

unique_fd& unique_fd::operator=(unique_fd&& other) noexcept {
  if (this != &other) reset(other.release());
  return *this;
}

unique_fd::~unique_fd() { reset(); }

void unique_fd::reset(int fd) noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

int unique_fd::release() noexcept { return std::exchange(fd_, -1); }

socket_error::socket_error(const std::string& context, const std::string& reason, int code)
    : std::runtime_error(context.empty() ? reason : context + ": " + reason), reason_(reason), code_(code) {}

namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// errno is read by the caller before anything else runs: building a string may change it.
[[noreturn]] void fail(const std::string& context, int code) { throw socket_error(context, std::strerror(code), code); }

std::string address_text(const std::string& host, uint16_t port) { return fmt::format("{}:{}", host, port); }

// host:port as an IPv4 socket address: a dotted quad as it is, a name through the
// resolver (IPv4 only, as every listener and dialer of these helpers is).
sockaddr_in resolve(const std::string& host, uint16_t port, const std::string& context) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (::inet_pton(AF_INET, host.c_str(), &a.sin_addr) == 1) return a;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int r = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (r != 0 || found == nullptr) {
    if (found) ::freeaddrinfo(found);
    throw socket_error(context, fmt::format("unknown host ({})", r != 0 ? ::gai_strerror(r) : "no IPv4 address"), 0);
  }
  a.sin_addr = reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr;
  ::freeaddrinfo(found);
  return a;
}

unique_fd new_socket(const std::string& context, int flags = 0) {
  unique_fd fd{::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | flags, 0)};
  if (!fd) fail(context, errno);
  return fd;
}

// An end of `fd` (getsockname or getpeername), for messages: "127.0.0.1:7001".
std::string end_text(int fd, int (*get)(int, sockaddr*, socklen_t*)) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  char text[INET_ADDRSTRLEN] = {};
  if (get(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0 || a.sin_family != AF_INET ||
      ::inet_ntop(AF_INET, &a.sin_addr, text, sizeof text) == nullptr)
    return fmt::format("socket {}", fd);
  return fmt::format("{}:{}", text, ntohs(a.sin_port));
}

std::string local_text(int fd) { return end_text(fd, ::getsockname); }

// What is left of a deadline, as poll() takes it: whole milliseconds rounded up (a wait
// never ends just before its deadline), 0 once it passed.
int poll_ms(steady_clock::time_point deadline) {
  auto left = std::chrono::ceil<milliseconds>(deadline - steady_clock::now()).count();
  return static_cast<int>(std::clamp<decltype(left)>(left, 0, INT_MAX));
}

// Waits until `fd` is ready for `events` or `deadline` passes (false), going on after a
// signal.
bool wait_for(int fd, short events, steady_clock::time_point deadline, const std::string& context) {
  for (;;) {
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, poll_ms(deadline));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) fail(context, errno);
  }
}

void set_option(int fd, int level, int option, const void* value, socklen_t size, const char* name) {
  if (::setsockopt(fd, level, option, value, size) != 0) fail(fmt::format("cannot set {}", name), errno);
}

void set_timeout(int fd, int option, milliseconds timeout, const char* name) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  set_option(fd, SOL_SOCKET, option, &tv, sizeof tv, name);
}

}  // namespace

unique_fd listen_on(const std::string& host, uint16_t port, const listen_options& options) {
  auto context = "cannot listen on " + address_text(host, port);
  auto a = resolve(host, port, context);
  auto fd = new_socket(context);
  int one = 1;
  if ((options.reuse_address && ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) ||
      ::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd.get(), options.backlog) != 0)
    fail(context, errno);
  return fd;
}

std::string peer_text(int fd) { return end_text(fd, ::getpeername); }

uint16_t local_port(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) fail("getsockname", errno);
  return ntohs(a.sin_port);
}

bool can_bind(const std::string& host, uint16_t port) {
  auto context = "cannot bind to " + address_text(host, port);
  auto a = resolve(host, port, context);
  auto fd = new_socket(context);
  return ::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
}

unique_fd accept_from(int listener) {
  for (;;) {
    unique_fd fd{::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC)};
    if (fd) return fd;
    // A connection reset while it waited in the queue is its client's business.
    int e = errno;
    if (e != EINTR && e != ECONNABORTED) fail("cannot accept on " + local_text(listener), e);
  }
}

unique_fd accept_within(int listener, milliseconds bound) {
  auto context = "cannot accept on " + local_text(listener);
  if (!wait_for(listener, POLLIN, steady_clock::now() + bound, context))
    throw socket_error(context, fmt::format("no connection within {} ms", bound.count()), ETIMEDOUT);
  return accept_from(listener);
}

// Nonblocking until connected, so the deadline holds even when nobody answers the SYN
// (a blocking connect waits for the kernel's retries, minutes).
unique_fd connect_to(const std::string& host, uint16_t port, milliseconds timeout) {
  auto context = "cannot connect to " + address_text(host, port);
  auto deadline = steady_clock::now() + timeout;
  auto a = resolve(host, port, context);
  auto fd = new_socket(context, SOCK_NONBLOCK);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    // EINTR: the attempt goes on in the background, as with EINPROGRESS.
    if (errno != EINPROGRESS && errno != EINTR) fail(context, errno);
    if (!wait_for(fd.get(), POLLOUT, deadline, context))
      throw socket_error(context, fmt::format("no connection within {} ms", timeout.count()), ETIMEDOUT);
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err != 0) fail(context, err);
  }
  int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0) fail(context, errno);
  return fd;
}

void set_no_delay(int fd) {
  int one = 1;
  set_option(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one, "TCP_NODELAY");
}

void set_receive_timeout(int fd, milliseconds timeout) { set_timeout(fd, SO_RCVTIMEO, timeout, "SO_RCVTIMEO"); }

void set_send_timeout(int fd, milliseconds timeout) { set_timeout(fd, SO_SNDTIMEO, timeout, "SO_SNDTIMEO"); }

namespace {

// What one recv() of an exact read came to.
enum class step { progress, again, closed };

// Reads into p[got..n) with `flags`, advancing `got`. A close after some bytes, and the
// system's errors other than EINTR and EAGAIN, throw; `closed` means before any byte.
step recv_some(int fd, char* p, size_t& got, size_t n, int flags) {
  auto r = ::recv(fd, p + got, n - got, flags);
  if (r > 0) {
    got += static_cast<size_t>(r);
    return step::progress;
  }
  if (r == 0) {
    if (got == 0) return step::closed;
    throw socket_error({}, fmt::format("the peer closed the connection after {} of {} bytes", got, n), 0);
  }
  int e = errno;
  if (e == EINTR) return step::progress;
  if (e == EAGAIN || e == EWOULDBLOCK) return step::again;
  fail("recv", e);
}

}  // namespace

// MSG_WAITALL: one system call for the whole read unless a signal, the timeout or the
// peer's close ends it early; the loop covers those.
bool read_exact(int fd, void* data, size_t n) {
  auto* p = static_cast<char*>(data);
  size_t got = 0;
  while (got < n) {
    auto s = recv_some(fd, p, got, n, MSG_WAITALL);
    if (s == step::closed) return false;
    if (s == step::again)
      throw socket_error({}, fmt::format("timed out reading ({} of {} bytes arrived)", got, n), EAGAIN);
  }
  return true;
}

bool read_exact_within(int fd, void* data, size_t n, std::chrono::milliseconds bound) {
  auto deadline = std::chrono::steady_clock::now() + bound;
  auto* p = static_cast<char*>(data);
  size_t got = 0;
  while (got < n) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      throw socket_error({}, fmt::format("timed out reading ({} of {} bytes arrived within {} ms)", got, n, bound.count()),
                         ETIMEDOUT);
    pollfd pfd{fd, POLLIN, 0};
    auto ready = ::poll(&pfd, 1, static_cast<int>(left.count()));
    if (ready < 0) {
      if (errno == EINTR) continue;
      fail("poll", errno);
    }
    if (ready > 0 && recv_some(fd, p, got, n, MSG_DONTWAIT) == step::closed) return false;
  }
  return true;
}

size_t read_some(int fd, void* data, size_t n) {
  for (;;) {
    auto r = ::recv(fd, data, n, 0);
    if (r >= 0) return static_cast<size_t>(r);
    int e = errno;
    if (e == EINTR) continue;
    if (e == EAGAIN || e == EWOULDBLOCK) throw socket_error({}, "timed out reading (nothing arrived)", e);
    fail("recv", e);
  }
}

namespace {

// MSG_NOSIGNAL: a vanished peer is an error to report, not a SIGPIPE that kills the process.
void write_buffers(int fd, iovec* iov, size_t count) {
  size_t total = 0, sent = 0;
  for (size_t i = 0; i < count; ++i) total += iov[i].iov_len;
  size_t first = 0;
  while (first < count) {
    msghdr m{};
    m.msg_iov = iov + first;
    m.msg_iovlen = std::min<size_t>(count - first, IOV_MAX);
    auto r = ::sendmsg(fd, &m, MSG_NOSIGNAL);
    if (r < 0) {
      int e = errno;
      if (e == EINTR) continue;
      if (e == EAGAIN || e == EWOULDBLOCK) {
        auto why = fmt::format("timed out writing ({} of {} bytes sent; the peer stopped reading)", sent, total);
        throw socket_error({}, why, e);
      }
      fail("send", e);
    }
    // Past the buffers sent whole, into the one sent in part.
    auto left = static_cast<size_t>(r);
    sent += left;
    while (first < count && left >= iov[first].iov_len) left -= iov[first++].iov_len;
    if (first < count) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
}

}  // namespace

void write_exact(int fd, const void* data, size_t n) {
  iovec one{const_cast<void*>(data), n};
  write_buffers(fd, &one, 1);
}

void write_exact(int fd, std::vector<iovec>& buffers) { write_buffers(fd, buffers.data(), buffers.size()); }

bool is_loopback_host(const std::string& host) {
  std::string lower = host;
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "localhost") return true;
  unsigned char v4[4];
  if (::inet_pton(AF_INET, host.c_str(), v4) == 1) return v4[0] == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, host.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

namespace {
std::atomic<bool> sigpipe_is_ignored{false};
}  // namespace

void ignore_sigpipe() {
  ::signal(SIGPIPE, SIG_IGN);
  sigpipe_is_ignored = true;
}

bool sigpipe_ignored() noexcept { return sigpipe_is_ignored.load(std::memory_order_relaxed); }

bool is_ipv6_literal(const std::string& host) {
  in6_addr a{};
  return ::inet_pton(AF_INET6, host.c_str(), &a) == 1;
}

std::string listen_host(const std::string& host) {
  in_addr a{};
  if (is_loopback_host(host) || ::inet_pton(AF_INET, host.c_str(), &a) == 1) return host;
  return "0.0.0.0";
}

}  // namespace actortrain::net
