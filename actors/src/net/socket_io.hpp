#pragma once
// Blocking socket helpers shared by the data plane and the BASP guard (no CAF).

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace actortrain::detail {

inline std::string errno_text() { return std::strerror(errno); }

inline void set_timeout(int fd, int option, std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  ::setsockopt(fd, SOL_SOCKET, option, &tv, sizeof tv);
}

inline void no_delay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

inline sockaddr_in loopback(uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

// Reads exactly n bytes: "" when done, "eof" when the peer closed before the first, else
// what went wrong.
inline std::string read_exactly(int fd, void* p, size_t n) {
  auto* c = static_cast<char*>(p);
  size_t got = 0;
  while (got < n) {
    auto r = ::recv(fd, c + got, n - got, MSG_WAITALL);
    if (r > 0) {
      got += static_cast<size_t>(r);
    } else if (r == 0) {
      return got == 0 ? "eof" : fmt::format("the peer closed the connection inside a frame ({} of {} bytes)", got, n);
    } else if (errno != EINTR) {
      return errno == EAGAIN || errno == EWOULDBLOCK ? std::string("timed out") : errno_text();
    }
  }
  return {};
}

// Writes every byte of `iov` (partial writes continue where they stopped).
inline std::string write_all(int fd, std::vector<iovec>& iov) {
  size_t first = 0;
  while (first < iov.size()) {
    msghdr m{};
    m.msg_iov = iov.data() + first;
    m.msg_iovlen = std::min<size_t>(iov.size() - first, IOV_MAX);
    auto r = ::sendmsg(fd, &m, MSG_NOSIGNAL);
    if (r < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK ? std::string("timed out writing") : errno_text();
    }
    auto left = static_cast<size_t>(r);
    while (first < iov.size() && left >= iov[first].iov_len) left -= iov[first++].iov_len;
    if (first < iov.size()) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
  return {};
}

}  // namespace actortrain::detail
