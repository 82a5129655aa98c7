#include "basp_guard.hpp"

#include <netdb.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <list>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "socket_io.hpp"
#include "../core/thread_name.hpp"

namespace actortrain::detail {

namespace {

bool send_all(int fd, char* p, size_t n) {
  std::vector<iovec> iov{{p, n}};
  return write_all(fd, iov).empty();
}

int connect_loopback(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  auto a = loopback(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  no_delay(fd);
  return fd;
}

}  // namespace

struct basp_guard::impl {
  struct relay {
    int client = -1, node = -1;
    std::thread up, down;
    std::atomic<int> ended{0};
  };

  uint16_t inner = 0;
  uint64_t max_payload = 0;
  log_fn log;
  int listener = -1;
  uint16_t port = 0;
  std::atomic<bool> stopping{false};
  std::atomic<size_t> refused{0};
  std::thread acceptor;
  std::mutex mtx;
  std::list<relay> relays;

  void say(const std::string& s) {
    if (log) log(s);
  }

  static void close_both(relay& r) {
    ::shutdown(r.client, SHUT_RDWR);
    ::shutdown(r.node, SHUT_RDWR);
  }

  // Client to node: forwards whole chunks once every header in them is within bounds.
  void upstream(relay& r) {
    name_this_thread("at.basp.guard");
    std::vector<char> buf(64 * 1024);
    char header[header_size];
    size_t have = 0;         // header bytes collected
    uint64_t payload = 0;    // payload bytes still to pass
    for (;;) {
      auto n = ::recv(r.client, buf.data(), buf.size(), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      bool bad = false;
      for (size_t i = 0, len = static_cast<size_t>(n); i < len && !bad;) {
        if (payload > 0) {
          auto take = std::min<uint64_t>(payload, len - i);
          payload -= take;
          i += static_cast<size_t>(take);
          continue;
        }
        auto take = std::min(header_size - have, len - i);
        std::memcpy(header + have, buf.data() + i, take);
        have += take;
        i += take;
        if (have < header_size) continue;
        have = 0;
        uint32_t announced;
        std::memcpy(&announced, header + payload_len_offset, sizeof announced);
        payload = ntohl(announced);
        if (payload > max_payload) {
          ++refused;
          say(fmt::format("closed a BASP connection whose header announced {} bytes (at most {} here)", payload,
                          max_payload));
          bad = true;
        }
      }
      if (bad || !send_all(r.node, buf.data(), static_cast<size_t>(n))) break;
    }
    close_both(r);
    ++r.ended;
  }

  // Node to client: every byte as it comes.
  void downstream(relay& r) {
    name_this_thread("at.basp.guard");
    std::vector<char> buf(64 * 1024);
    for (;;) {
      auto n = ::recv(r.node, buf.data(), buf.size(), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 || !send_all(r.client, buf.data(), static_cast<size_t>(n))) break;
    }
    close_both(r);
    ++r.ended;
  }

  // Joins and closes the relays whose two threads ended.
  void reap(bool all) {
    std::lock_guard<std::mutex> g{mtx};
    for (auto i = relays.begin(); i != relays.end();) {
      if (all) close_both(*i);
      if (all || i->ended == 2) {
        if (i->up.joinable()) i->up.join();
        if (i->down.joinable()) i->down.join();
        ::close(i->client);
        ::close(i->node);
        i = relays.erase(i);
      } else {
        ++i;
      }
    }
  }

  void accept_loop() {
    name_this_thread("at.basp.accept");
    for (;;) {
      int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (stopping) {
        if (fd >= 0) ::close(fd);
        return;
      }
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        say(fmt::format("BASP guard: accept failed: {}", std::strerror(errno)));
        return;
      }
      reap(false);
      int to = connect_loopback(inner);
      if (to < 0) {
        say(fmt::format("BASP guard: cannot reach the node's own port {}: {}", inner, std::strerror(errno)));
        ::close(fd);
        continue;
      }
      no_delay(fd);
      std::lock_guard<std::mutex> g{mtx};
      auto& r = relays.emplace_back();
      r.client = fd;
      r.node = to;
      r.up = std::thread([this, &r] { upstream(r); });
      r.down = std::thread([this, &r] { downstream(r); });
    }
  }
};

basp_guard::basp_guard(const std::string& host, uint16_t port, uint16_t inner_port, uint64_t max_payload, log_fn log)
    : impl_(std::make_shared<impl>()) {
  impl_->inner = inner_port;
  impl_->max_payload = max_payload;
  impl_->log = std::move(log);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr)
    throw std::runtime_error(fmt::format("cannot listen on {}:{}: unknown host", host, port));
  sockaddr_in a = *reinterpret_cast<sockaddr_in*>(found->ai_addr);
  ::freeaddrinfo(found);
  a.sin_port = htons(port);
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd < 0 || ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 64) != 0) {
    auto why = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    throw std::runtime_error(fmt::format("cannot listen on {}:{}: {}", host, port, why));
  }
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  impl_->listener = fd;
  impl_->port = ntohs(a.sin_port);
  impl_->acceptor = std::thread([i = impl_.get()] { i->accept_loop(); });
}

basp_guard::~basp_guard() {
  impl_->stopping = true;
  ::shutdown(impl_->listener, SHUT_RDWR);  // wakes accept()
  impl_->acceptor.join();
  ::close(impl_->listener);
  impl_->reap(true);
}

uint16_t basp_guard::port() const { return impl_->port; }

size_t basp_guard::refused() const { return impl_->refused; }

}  // namespace actortrain::detail
