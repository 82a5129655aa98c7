// The BASP guard (basp_guard.hpp): one thread, epoll, a relay per connection.
#include "basp_guard.hpp"

#include "basp_check.hpp"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "../core/thread_name.hpp"

namespace actortrain::detail {

namespace {

using clock_type = std::chrono::steady_clock;

constexpr uint64_t listener_key = ~uint64_t{0};
constexpr uint64_t wake_key = ~uint64_t{0} - 1;
// Work done for one connection, or accepts, per wake-up: the others get their turn.
constexpr int rounds_per_turn = 16;

bool would_block(int e) { return e == EAGAIN || e == EWOULDBLOCK; }

// One direction of a relay: bytes read from `from` wait in `buf` until `to` took them.
struct lane {
  std::vector<char> buf;
  size_t off = 0, len = 0;
  bool pending() const { return off < len; }
};

}  // namespace

struct basp_guard::impl {
  struct conn {
    uint64_t id = 0;
    net::unique_fd peer, node;
    std::string who;
    basp_check check;
    lane up, down;  // peer -> node (checked), node -> peer
    bool pending = true;  // proven (or no proof asked), before the end of its BASP handshake
    clock_type::time_point deadline;
    uint32_t peer_mask = 0, node_mask = 0;
    // Before the proof (with the job's key): the exchange of job_auth.hpp.
    bool proven = true;
    bool admitted = false;  // the answer was right: relay once `out` went
    std::unique_ptr<auth::server> srv;
    auth::answer answer{};
    size_t answer_got = 0;
    std::array<unsigned char, auth::hello_size> out{};
    size_t out_off = 0, out_len = 0;
    explicit conn(basp_check::limits l) : check(l) {}
  };

  limits lim;
  hand_over_fn hand_over;
  log_fn log;
  net::unique_fd listener, epoll, wake, reserve;
  uint16_t port = 0;
  std::atomic<bool> stopping{false};
  std::thread thread;
  std::map<uint64_t, conn> conns;
  uint64_t next_id = 1;
  size_t pending_count = 0;
  std::set<uint64_t> unproven;  // oldest first
  mutable std::mutex count_mtx;
  counts n;
  clock_type::time_point last_busy_log{};
  size_t busy_since_log = 0;

  void say(const std::string& s) {
    if (log) log(s);
  }

  void add(int fd, uint64_t key, uint32_t mask) {
    epoll_event ev{};
    ev.events = mask;
    ev.data.u64 = key;
    if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, fd, &ev) != 0)
      throw net::socket_error("BASP guard: epoll", std::strerror(errno), errno);
  }

  void set_mask(int fd, uint64_t key, uint32_t& current, uint32_t mask) {
    if (mask == current) return;
    epoll_event ev{};
    ev.events = mask;
    ev.data.u64 = key;
    if (::epoll_ctl(epoll.get(), EPOLL_CTL_MOD, fd, &ev) != 0)
      throw net::socket_error("BASP guard: epoll", std::strerror(errno), errno);
    current = mask;
  }

  void bump(size_t counts::*field, long delta = 1) {
    std::lock_guard<std::mutex> g{count_mtx};
    n.*field = static_cast<size_t>(static_cast<long>(n.*field) + delta);
  }

  // A connection turned away before anything was made for it (or that failed the job's
  // proof): logged at most once a second (a flood must not become a flood of log lines).
  void turned_away(const std::string& who, const std::string& why, size_t counts::*field = &counts::refused_busy) {
    bump(field);
    ++busy_since_log;
    auto now = clock_type::now();
    if (now - last_busy_log < std::chrono::seconds(1)) return;
    say(fmt::format("BASP guard: closed {} connection(s), the last from {}: {}", busy_since_log, who, why));
    busy_since_log = 0;
    last_busy_log = now;
  }

  void close(uint64_t id) {
    auto i = conns.find(id);
    if (i == conns.end()) return;
    if (i->second.pending) --pending_count;
    unproven.erase(id);
    conns.erase(i);  // closes both ends: CAF sees its end close and drops the connection
    bump(&counts::open, -1);
  }

  // Moves what `l` holds to `to`, then reads more from `from` (checked with `check` when
  // given), for a bounded number of rounds. False when the connection must close (`why`
  // says why when it is worth a log line).
  bool pump(int from, int to, lane& l, basp_check* check, std::string& why) {
    for (int round = 0; round < rounds_per_turn; ++round) {
      if (l.pending()) {
        auto sent = ::send(to, l.buf.data() + l.off, l.len - l.off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (sent < 0) {
          if (errno == EINTR) continue;
          if (would_block(errno)) return true;
          return false;
        }
        l.off += static_cast<size_t>(sent);
        continue;
      }
      auto got = ::recv(from, l.buf.data(), l.buf.size(), MSG_DONTWAIT);
      if (got == 0) return false;
      if (got < 0) {
        if (errno == EINTR) continue;
        if (would_block(errno)) return true;
        return false;
      }
      if (check && !check->feed(l.buf.data(), static_cast<size_t>(got))) {
        why = check->why();
        return false;
      }
      l.off = 0;
      l.len = static_cast<size_t>(got);
    }
    return true;
  }

  // Sends what `out` holds; false when the peer is gone.
  bool flush_out(conn& c) {
    while (c.out_off < c.out_len) {
      auto sent = ::send(c.peer.get(), c.out.data() + c.out_off, c.out_len - c.out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (sent < 0) {
        if (errno == EINTR) continue;
        return would_block(errno);
      }
      c.out_off += static_cast<size_t>(sent);
    }
    return true;
  }

  // A connection that owes the job's answer (job_auth.hpp). Nothing of it reaches CAF
  // until the answer is right and the proof went out.
  void prove(conn& c) {
    if (!flush_out(c)) {
      close(c.id);
      return;
    }
    if (c.out_off == c.out_len && c.answer_got == c.answer.size()) {
      if (!c.admitted) {
        turned_away(c.who, "a wrong answer to the job's greeting (not a member of this job)", &counts::refused_auth);
        close(c.id);
        return;
      }
      start_relay(c);
      return;
    }
    while (c.answer_got < c.answer.size()) {
      auto got = ::recv(c.peer.get(), c.answer.data() + c.answer_got, c.answer.size() - c.answer_got, MSG_DONTWAIT);
      if (got == 0) {
        close(c.id);
        return;
      }
      if (got < 0) {
        if (errno == EINTR) continue;
        if (would_block(errno)) break;
        close(c.id);
        return;
      }
      c.answer_got += static_cast<size_t>(got);
      if (c.answer_got == c.answer.size()) {
        auth::proof p{};
        c.admitted = c.srv->admit(c.answer, p);
        std::copy(p.begin(), p.end(), c.out.begin());
        c.out_off = 0;
        c.out_len = p.size();
        prove(c);  // sends it, then relays or closes
        return;
      }
    }
    set_mask(c.peer.get(), c.id << 1, c.peer_mask,
             c.out_off < c.out_len ? uint32_t{EPOLLOUT} : uint32_t{EPOLLIN});
  }

  // Makes the connection's socket pair and hands one end to CAF's broker.
  void start_relay(conn& c) {
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
      auto e = errno;
      turned_away(c.who, fmt::format("no socket pair: {}", std::strerror(e)));
      if (e == EMFILE || e == ENFILE) shed_one();
      close(c.id);
      return;
    }
    net::unique_fd mine{pair[0]}, theirs{pair[1]};
    ::fcntl(mine.get(), F_SETFL, ::fcntl(mine.get(), F_GETFL) | O_NONBLOCK);
    if (!c.proven) {
      c.proven = true;
      c.srv.reset();
      unproven.erase(c.id);
      bump(&counts::proven);
    }
    c.pending = true;
    ++pending_count;
    c.up.buf.resize(lim.buffer_size);
    c.down.buf.resize(lim.buffer_size);
    c.node = std::move(mine);
    c.node_mask = EPOLLIN;
    add(c.node.get(), (c.id << 1) | 1, c.node_mask);
    set_mask(c.peer.get(), c.id << 1, c.peer_mask, EPOLLIN);
    hand_over(std::move(theirs));
  }

  void service(conn& c, uint32_t events) {
    if (events & (EPOLLERR | EPOLLHUP)) {
      close(c.id);  // either side gone: the connection ends
      return;
    }
    if (!c.proven) {
      prove(c);
      return;
    }
    std::string why;
    bool ok = pump(c.peer.get(), c.node.get(), c.up, &c.check, why) &&
              pump(c.node.get(), c.peer.get(), c.down, nullptr, why);
    if (!ok) {
      if (!why.empty()) {
        bump(&counts::refused_header);
        say(fmt::format("BASP guard: closed the connection from {}: {}", c.who, why));
      }
      close(c.id);
      return;
    }
    if (c.pending && c.check.past_handshake()) {
      c.pending = false;
      --pending_count;
    }
    set_mask(c.peer.get(), c.id << 1, c.peer_mask,
             (c.up.pending() ? 0u : uint32_t{EPOLLIN}) | (c.down.pending() ? uint32_t{EPOLLOUT} : 0u));
    set_mask(c.node.get(), (c.id << 1) | 1, c.node_mask,
             (c.down.pending() ? 0u : uint32_t{EPOLLIN}) | (c.up.pending() ? uint32_t{EPOLLOUT} : 0u));
  }

  // Out of descriptors: take the waiting connection with the spare one and close it, so
  // the listener does not stay readable for a connection nobody can take.
  void shed_one() {
    reserve.reset();
    int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) ::close(fd);
    reserve.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  }

  void accept_some() {
    for (int round = 0; round < rounds_per_turn; ++round) {
      int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        auto e = errno;
        if (e == EINTR || e == ECONNABORTED) continue;
        if (would_block(e)) return;
        if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
          shed_one();
          turned_away("?", fmt::format("cannot accept: {}", std::strerror(e)));
          continue;
        }
        say(fmt::format("BASP guard: accept failed: {}", std::strerror(e)));
        return;
      }
      net::unique_fd peer{fd};
      bump(&counts::accepted);
      auto who = net::peer_text(peer.get());
      if (conns.size() >= lim.max_connections) {
        turned_away(who, fmt::format("{} connections are open", conns.size()));
        continue;
      }
      if (lim.key) {
        // Unproven connections: the newest takes the oldest's place.
        if (unproven.size() >= lim.max_pending) {
          auto oldest = *unproven.begin();
          turned_away(conns.at(oldest).who,
                      fmt::format("{} connections had not proved the job's secret: the oldest made room", unproven.size()),
                      &counts::evicted);
          close(oldest);
        }
      } else if (pending_count >= lim.max_pending) {
        turned_away(who, fmt::format("{} connections are still before their handshake", pending_count));
        continue;
      }
      auto id = next_id++;
      try {
        net::set_no_delay(peer.get());
        auto [it, fresh] = conns.emplace(id, conn{basp_check::limits{lim.max_payload, uint64_t{64} << 10}});
        auto& c = it->second;
        c.id = id;
        c.who = who;
        c.deadline = clock_type::now() + lim.handshake_deadline;
        c.peer = std::move(peer);
        bump(&counts::open);
        c.peer_mask = EPOLLIN;
        add(c.peer.get(), id << 1, c.peer_mask);
        if (lim.key) {
          c.proven = false;
          c.pending = false;
          unproven.insert(id);
          c.srv = std::make_unique<auth::server>(*lim.key);
          const auto& h = c.srv->greeting();
          std::copy(h.begin(), h.end(), c.out.begin());
          c.out_len = h.size();
          prove(c);
        } else {
          c.pending = false;
          start_relay(c);
        }
      } catch (const std::exception& e) {
        say(fmt::format("BASP guard: closed the connection from {}: {}", who, e.what()));
        close(id);
      }
    }
  }

  void expire() {
    auto now = clock_type::now();
    std::vector<uint64_t> late;
    for (auto& [id, c] : conns)
      if ((c.pending || !c.proven) && c.deadline <= now) late.push_back(id);
    for (auto id : late) {
      auto& c = conns.at(id);
      if (c.proven) {
        bump(&counts::timed_out);
        say(fmt::format("BASP guard: closed the connection from {}: no BASP handshake within {} ms", c.who,
                        lim.handshake_deadline.count()));
      } else {
        turned_away(c.who, fmt::format("no answer to the job's greeting within {} ms", lim.handshake_deadline.count()),
                    &counts::timed_out);
      }
      close(id);
    }
  }

  void run() {
    name_this_thread("at.basp.guard");
    std::vector<epoll_event> events(64);
    while (!stopping) {
      int k = ::epoll_wait(epoll.get(), events.data(), static_cast<int>(events.size()), 250);
      if (k < 0) {
        if (errno == EINTR) continue;
        say(fmt::format("BASP guard: epoll_wait failed: {}", std::strerror(errno)));
        return;
      }
      for (int e = 0; e < k && !stopping; ++e) {
        auto key = events[static_cast<size_t>(e)].data.u64;
        if (key == wake_key) break;
        if (key == listener_key) {
          accept_some();
          continue;
        }
        auto i = conns.find(key >> 1);
        if (i == conns.end()) continue;  // closed earlier in this batch
        try {
          service(i->second, events[static_cast<size_t>(e)].events);
        } catch (const std::exception& x) {
          say(fmt::format("BASP guard: closed the connection from {}: {}", i->second.who, x.what()));
          close(key >> 1);
        }
      }
      expire();
    }
  }
};

basp_guard::basp_guard(const std::string& host, uint16_t port, limits l, hand_over_fn hand_over, log_fn log)
    : impl_(std::make_unique<impl>()) {
  auto& m = *impl_;
  m.lim = l;
  m.hand_over = std::move(hand_over);
  m.log = std::move(log);
  m.listener = net::listen_on(host, port, {/*backlog=*/64, /*reuse_address=*/true});
  m.port = net::local_port(m.listener.get());
  ::fcntl(m.listener.get(), F_SETFL, ::fcntl(m.listener.get(), F_GETFL) | O_NONBLOCK);
  m.epoll.reset(::epoll_create1(EPOLL_CLOEXEC));
  m.wake.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  m.reserve.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!m.epoll || !m.wake) throw net::socket_error("BASP guard", std::strerror(errno), errno);
  m.add(m.listener.get(), listener_key, EPOLLIN);
  m.add(m.wake.get(), wake_key, EPOLLIN);
  m.thread = std::thread([i = impl_.get()] { i->run(); });
}

basp_guard::~basp_guard() {
  impl_->stopping = true;
  uint64_t one = 1;
  [[maybe_unused]] auto w = ::write(impl_->wake.get(), &one, sizeof one);
  impl_->thread.join();
  impl_->conns.clear();
}

uint16_t basp_guard::port() const { return impl_->port; }

basp_guard::counts basp_guard::count() const {
  std::lock_guard<std::mutex> g{impl_->count_mtx};
  return impl_->n;
}

}  // namespace actortrain::detail
