// The BASP guard (basp_guard.hpp): one thread, epoll, a relay per connection.
#include "basp_guard.hpp"

#include "basp_check.hpp"
#include "tls.hpp"

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

// What one read or write on a side of a relay did: bytes (> 0), or one of these.
constexpr ssize_t io_closed = 0;
constexpr ssize_t io_blocked = -1;
constexpr ssize_t io_failed = -2;  // `why` says why

// One direction of a relay: bytes read from `from` wait in `buf` until `to` took them.
struct lane {
  std::vector<char> buf;
  size_t off = 0, len = 0;
  bool eof = false;  // `from` closed after the bytes held here: close once they went
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
    // With TLS: the session (its handshake is the proof), and what it waits for.
    std::unique_ptr<tls::session> tls;
    bool read_wants_write = false, write_wants_read = false;
    bool read_blocked = false;  // the last read from the session needed the socket
    bool outbound = false;  // a connection our node made (adopt): the peer is a server
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
  std::set<uint64_t> again;     // TLS connections with decrypted bytes left: serviced without waiting
  // Connections our node made (adopt), handed from other threads.
  std::mutex inbox_mtx;
  std::vector<conn> inbox;
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

  // One side of a connection: the peer (through TLS when it has a session) or our node.
  ssize_t peer_read(conn& c, char* data, size_t n, std::string& why) {
    if (c.tls) {
      size_t got = 0;
      auto st = c.tls->read(data, n, got);
      c.read_wants_write = st == tls::status::want_write;
      c.read_blocked = st == tls::status::want_read || st == tls::status::want_write;
      return tls_result(c, st, got, why);
    }
    return plain_read(c.peer.get(), data, n);
  }
  ssize_t peer_write(conn& c, const char* data, size_t n, std::string& why) {
    if (c.tls) {
      size_t put = 0;
      auto st = c.tls->write(data, n, put);
      c.write_wants_read = st == tls::status::want_read;
      return tls_result(c, st, put, why);
    }
    return plain_write(c.peer.get(), data, n);
  }
  static ssize_t tls_result(conn& c, tls::status st, size_t moved, std::string& why) {
    switch (st) {
      case tls::status::ok: return static_cast<ssize_t>(moved);
      case tls::status::want_read:
      case tls::status::want_write: return io_blocked;
      case tls::status::closed: return io_closed;
      case tls::status::failed: why = c.tls->why(); return io_failed;
    }
    return io_failed;
  }
  // A failing system call on a plain socket ends the connection without a log line.
  static ssize_t plain_read(int fd, char* data, size_t n) {
    for (;;) {
      auto got = ::recv(fd, data, n, MSG_DONTWAIT);
      if (got >= 0) return got;
      if (errno == EINTR) continue;
      return would_block(errno) ? io_blocked : io_closed;
    }
  }
  static ssize_t plain_write(int fd, const char* data, size_t n) {
    for (;;) {
      auto sent = ::send(fd, data, n, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (sent > 0) return sent;
      if (sent < 0 && errno == EINTR) continue;
      return sent < 0 && would_block(errno) ? io_blocked : io_closed;
    }
  }

  // Moves what `l` holds on with `write`, then reads more with `read` (checked with
  // `check` when given), for a bounded number of rounds. False when the connection must
  // close (`why` says why when it is worth a log line).
  template <class Read, class Write>
  bool pump(Read read, Write write, lane& l, basp_check* check, std::string& why) {
    for (int round = 0; round < rounds_per_turn; ++round) {
      if (l.pending()) {
        auto sent = write(l.buf.data() + l.off, l.len - l.off, why);
        if (sent == io_blocked) return true;
        if (sent <= 0) return false;
        l.off += static_cast<size_t>(sent);
        continue;
      }
      if (l.eof) return false;
      // Fills the lane before it goes on (a TLS session hands out one record, 16 KiB at
      // most, per read): fewer, larger writes.
      size_t filled = 0;
      while (filled < l.buf.size()) {
        auto got = read(l.buf.data() + filled, l.buf.size() - filled, why);
        if (got == io_blocked) break;
        if (got == io_failed || (got == io_closed && filled == 0)) return false;
        if (got == io_closed) {
          l.eof = true;
          break;
        }
        if (check && !check->feed(l.buf.data() + filled, static_cast<size_t>(got))) {
          why = check->why();
          return false;
        }
        filled += static_cast<size_t>(got);
      }
      if (filled == 0) return true;
      l.off = 0;
      l.len = filled;
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
    if (c.tls) {
      shake(c);
      return;
    }
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

  // A connection whose proof is the TLS handshake (the peer's certificate chained to the
  // job's CA).
  void shake(conn& c) {
    auto st = c.tls->handshake();
    switch (st) {
      case tls::status::ok:
        start_relay(c);
        if (conns.count(c.id)) again.insert(c.id);  // the peer's first bytes may be decrypted already
        return;
      case tls::status::failed:
        turned_away(c.who, fmt::format("{} (not a member of this job)", c.tls->why()), &counts::refused_auth);
        close(c.id);
        return;
      case tls::status::closed: close(c.id); return;
      case tls::status::want_read:
      case tls::status::want_write:
        set_mask(c.peer.get(), c.id << 1, c.peer_mask,
                 st == tls::status::want_write ? uint32_t{EPOLLOUT} : uint32_t{EPOLLIN});
        return;
    }
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
      if (c.tls) c.who += fmt::format(" ({})", c.tls->peer_subject());
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
    if ((events & EPOLLERR) || ((events & EPOLLHUP) && !c.proven)) {
      close(c.id);  // either side gone: the connection ends
      return;
    }
    // One side hung up: what it wrote last still goes on, as far as the other side takes
    // it in one turn (a node's last messages before it closes), then the connection ends.
    bool hung_up = (events & EPOLLHUP) != 0;
    if (!c.proven) {
      prove(c);
      return;
    }
    std::string why;
    int node = c.node.get();
    auto from_peer = [&](char* d, size_t n, std::string& w) { return peer_read(c, d, n, w); };
    auto to_peer = [&](const char* d, size_t n, std::string& w) { return peer_write(c, d, n, w); };
    auto from_node = [node](char* d, size_t n, std::string&) { return plain_read(node, d, n); };
    auto to_node = [node](const char* d, size_t n, std::string&) { return plain_write(node, d, n); };
    bool ok = pump(from_peer, to_node, c.up, &c.check, why) && pump(from_node, to_peer, c.down, nullptr, why);
    if (!ok || hung_up) {
      if (!why.empty()) {
        bump(&counts::refused_header);
        say(fmt::format("BASP guard: closed the connection {} {}: {}", c.outbound ? "to" : "from", c.who, why));
      }
      close(c.id);
      return;
    }
    if (c.pending && c.check.past_handshake()) {
      c.pending = false;
      --pending_count;
    }
    // A turn that ended before the session needed the socket may leave records read
    // ahead in the session, not in the socket: epoll would not say so. (One that ended
    // waiting for the socket leaves at most part of a record: epoll says when the rest
    // comes.)
    if (c.tls && !c.up.pending() && !c.read_blocked && c.tls->buffered()) again.insert(c.id);
    bool peer_in = !c.up.pending() || c.write_wants_read;
    bool peer_out = (c.down.pending() && !c.write_wants_read) || c.read_wants_write;
    set_mask(c.peer.get(), c.id << 1, c.peer_mask, (peer_in ? uint32_t{EPOLLIN} : 0u) | (peer_out ? uint32_t{EPOLLOUT} : 0u));
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
      if (lim.key || lim.tls) {
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
        if (lim.tls) {
          c.proven = false;
          c.pending = false;
          unproven.insert(id);
          c.tls = std::make_unique<tls::session>(*lim.tls, c.peer.get(), /*server=*/true);
          prove(c);
        } else if (lim.key) {
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

  // Connections our node made, handed over by adopt() on other threads.
  void take_inbox() {
    uint64_t ignored;
    [[maybe_unused]] auto r = ::read(wake.get(), &ignored, sizeof ignored);
    std::vector<conn> taken;
    {
      std::lock_guard<std::mutex> g{inbox_mtx};
      taken.swap(inbox);
    }
    for (auto& fresh : taken) {
      auto id = next_id++;
      auto [it, ok] = conns.emplace(id, std::move(fresh));
      auto& c = it->second;
      c.id = id;
      bump(&counts::open);
      try {
        c.peer_mask = EPOLLIN;
        add(c.peer.get(), id << 1, c.peer_mask);
        c.node_mask = EPOLLIN;
        add(c.node.get(), (id << 1) | 1, c.node_mask);
        again.insert(id);  // the server's first bytes may be decrypted already
      } catch (const std::exception& e) {
        say(fmt::format("BASP guard: closed the connection to {}: {}", c.who, e.what()));
        close(id);
      }
    }
  }

  // Connections with decrypted bytes waiting in their TLS session.
  void service_again() {
    std::set<uint64_t> now;
    now.swap(again);
    for (auto id : now) {
      auto i = conns.find(id);
      if (i == conns.end()) continue;
      try {
        service(i->second, 0);
      } catch (const std::exception& x) {
        say(fmt::format("BASP guard: closed the connection {} {}: {}", i->second.outbound ? "to" : "from",
                        i->second.who, x.what()));
        close(id);
      }
    }
  }

  void run() {
    name_this_thread("at.basp.guard");
    std::vector<epoll_event> events(64);
    while (!stopping) {
      int k = ::epoll_wait(epoll.get(), events.data(), static_cast<int>(events.size()), again.empty() ? 250 : 0);
      if (k < 0) {
        if (errno == EINTR) continue;
        say(fmt::format("BASP guard: epoll_wait failed: {}", std::strerror(errno)));
        return;
      }
      for (int e = 0; e < k && !stopping; ++e) {
        auto key = events[static_cast<size_t>(e)].data.u64;
        if (key == wake_key) {
          take_inbox();
          continue;
        }
        if (key == listener_key) {
          accept_some();
          continue;
        }
        auto i = conns.find(key >> 1);
        if (i == conns.end()) continue;  // closed earlier in this batch
        try {
          service(i->second, events[static_cast<size_t>(e)].events);
        } catch (const std::exception& x) {
          say(fmt::format("BASP guard: closed the connection {} {}: {}", i->second.outbound ? "to" : "from",
                          i->second.who, x.what()));
          close(key >> 1);
        }
      }
      service_again();
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
  start();
}

basp_guard::basp_guard(log_fn log) : impl_(std::make_unique<impl>()) {
  impl_->log = std::move(log);
  start();
}

void basp_guard::start() {
  auto& m = *impl_;
  m.epoll.reset(::epoll_create1(EPOLL_CLOEXEC));
  m.wake.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  m.reserve.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!m.epoll || !m.wake) throw net::socket_error("BASP guard", std::strerror(errno), errno);
  if (m.listener) m.add(m.listener.get(), listener_key, EPOLLIN);
  m.add(m.wake.get(), wake_key, EPOLLIN);
  m.thread = std::thread([i = impl_.get()] { i->run(); });
}

net::unique_fd basp_guard::adopt(net::unique_fd peer, std::unique_ptr<tls::session> session, const std::string& who,
                                 basp_check::limits check) {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
    throw net::socket_error("BASP guard: a socket pair for " + who, std::strerror(errno), errno);
  net::unique_fd mine{pair[0]}, theirs{pair[1]};
  ::fcntl(mine.get(), F_SETFL, ::fcntl(mine.get(), F_GETFL) | O_NONBLOCK);
  ::fcntl(peer.get(), F_SETFL, ::fcntl(peer.get(), F_GETFL) | O_NONBLOCK);
  check.server_stream = true;  // what the peer sends us is a server's stream
  impl::conn c{check};
  c.outbound = true;
  c.pending = false;
  c.who = who;
  c.peer = std::move(peer);
  c.node = std::move(mine);
  c.tls = std::move(session);
  c.up.buf.resize(impl_->lim.buffer_size);
  c.down.buf.resize(impl_->lim.buffer_size);
  {
    std::lock_guard<std::mutex> g{impl_->inbox_mtx};
    impl_->inbox.push_back(std::move(c));
  }
  uint64_t one = 1;
  [[maybe_unused]] auto w = ::write(impl_->wake.get(), &one, sizeof one);
  return theirs;
}

basp_guard::~basp_guard() {
  impl_->stopping = true;
  uint64_t one = 1;
  [[maybe_unused]] auto w = ::write(impl_->wake.get(), &one, sizeof one);
  impl_->thread.join();
  impl_->conns.clear();
  impl_->inbox.clear();
}

uint16_t basp_guard::port() const { return impl_->port; }

basp_guard::counts basp_guard::count() const {
  std::lock_guard<std::mutex> g{impl_->count_mtx};
  return impl_->n;
}

}  // namespace actortrain::detail
