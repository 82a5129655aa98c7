// The BASP guard (basp_guard.hpp): an acceptor, and two relay threads per connection.
#include "basp_guard.hpp"

#include <actortrain/actors/net/sockets.hpp>

#include <arpa/inet.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <list>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "../core/thread_name.hpp"

namespace actortrain::detail {

namespace {

// The node's own port is on this machine: a connection there is made or refused at
// once, unless the node stopped taking them (its accept queue full); then the client's
// connection is closed instead of holding the acceptor.
constexpr auto inner_connect_bound = std::chrono::seconds(10);

}  // namespace

struct basp_guard::impl {
  struct relay {
    net::unique_fd client, node;
    std::thread up, down;
    std::atomic<int> ended{0};
  };

  uint16_t inner = 0;
  uint64_t max_payload = 0;
  log_fn log;
  net::unique_fd listener;
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
    ::shutdown(r.client.get(), SHUT_RDWR);
    ::shutdown(r.node.get(), SHUT_RDWR);
  }

  // Client to node: forwards whole chunks once every header in them is within bounds.
  void upstream(relay& r) {
    name_this_thread("at.basp.guard");
    std::vector<char> buf(64 * 1024);
    char header[header_size];
    size_t have = 0;         // header bytes collected
    uint64_t payload = 0;    // payload bytes still to pass
    try {
      for (size_t len; (len = net::read_some(r.client.get(), buf.data(), buf.size())) > 0;) {
        bool bad = false;
        for (size_t i = 0; i < len && !bad;) {
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
        if (bad) break;
        net::write_exact(r.node.get(), buf.data(), len);
      }
    } catch (const net::socket_error&) {
      // Either side went away: the relay ends.
    }
    close_both(r);
    ++r.ended;
  }

  // Node to client: every byte as it comes.
  void downstream(relay& r) {
    name_this_thread("at.basp.guard");
    std::vector<char> buf(64 * 1024);
    try {
      for (size_t len; (len = net::read_some(r.node.get(), buf.data(), buf.size())) > 0;)
        net::write_exact(r.client.get(), buf.data(), len);
    } catch (const net::socket_error&) {
      // Either side went away: the relay ends.
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
        i = relays.erase(i);  // closes both sockets
      } else {
        ++i;
      }
    }
  }

  void accept_loop() {
    name_this_thread("at.basp.accept");
    for (;;) {
      net::unique_fd fd;
      try {
        fd = net::accept_from(listener.get());
      } catch (const net::socket_error& e) {
        // ~basp_guard shuts the listener down to end this wait: no failure then.
        if (!stopping) say(fmt::format("BASP guard: {}", e.what()));
        return;
      }
      if (stopping) return;
      reap(false);
      net::unique_fd to;
      try {
        to = net::connect_to("127.0.0.1", inner, inner_connect_bound);
      } catch (const net::socket_error& e) {
        say(fmt::format("BASP guard: cannot reach the node's own port {}: {}", inner, e.reason()));
        continue;
      }
      try {
        net::set_no_delay(to.get());
        net::set_no_delay(fd.get());
      } catch (const net::socket_error& e) {
        say(fmt::format("BASP guard: {}", e.what()));
        continue;
      }
      std::lock_guard<std::mutex> g{mtx};
      auto& r = relays.emplace_back();
      r.client = std::move(fd);
      r.node = std::move(to);
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
  impl_->listener = net::listen_on(host, port, {/*backlog=*/64, /*reuse_address=*/true});
  impl_->port = net::local_port(impl_->listener.get());
  impl_->acceptor = std::thread([i = impl_.get()] { i->accept_loop(); });
}

basp_guard::~basp_guard() {
  impl_->stopping = true;
  ::shutdown(impl_->listener.get(), SHUT_RDWR);  // wakes accept()
  impl_->acceptor.join();
  impl_->listener.reset();
  impl_->reap(true);
}

uint16_t basp_guard::port() const { return impl_->port; }

size_t basp_guard::refused() const { return impl_->refused; }

}  // namespace actortrain::detail
