// The data plane's ps side: a server per shard that accepts connections presenting its
// token and puts their requests into the shard's mailbox (data_plane.hpp).
#include "data_plane_wire.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace actortrain::data_plane {

namespace {

using namespace wire;

// -- the ps side -------------------------------------------------------------------

// Where the shard's replies of one connection go: a companion actor (its enqueue runs
// on the replying thread, the shard's own) hands each reply to the connection's writer
// thread, which writes it back as the frame of its request. The reader thread puts the
// requests into the shard's mailbox itself, with the companion as their sender: per
// request, two thread hand-offs (reader to shard, shard to writer) and no timer. The
// writer keeps a peer that does not read (SIGSTOP) from stalling the shard's thread.
struct reply_sink {
  std::mutex mtx;
  std::condition_variable cv;
  std::deque<std::pair<uint64_t, caf::message>> replies;  // (frame id, reply)
  std::map<uint64_t, uint64_t> frame_of;                   // request id -> frame id
  uint64_t next_request = 0;                                // the reader's
  bool closed = false;

  // The request id for frame `id` (never 0, below CAF's 60 bits, whatever the peer sent).
  uint64_t open(uint64_t frame) {
    std::lock_guard<std::mutex> g{mtx};
    next_request = next_request % caf::message_id::request_id_mask + 1;
    frame_of[next_request] = frame;
    return next_request;
  }

  void take(caf::mailbox_element& e) {
    if (!e.mid.is_response()) return;  // only the shard's answers
    std::lock_guard<std::mutex> g{mtx};
    auto i = frame_of.find(e.mid.request_id().integer_value());
    if (i == frame_of.end() || closed) return;
    replies.emplace_back(i->second, e.move_content_to_message());
    frame_of.erase(i);
    cv.notify_one();
  }

  void close() {
    std::lock_guard<std::mutex> g{mtx};
    closed = true;
    cv.notify_one();
  }

  // The writer thread: every reply, in the order the shard gave them, until closed.
  void write_all_replies(caf::actor_system& sys, socket_link& link) {
    detail::name_this_thread("at.dp.write");
    std::unique_lock<std::mutex> lock{mtx};
    for (;;) {
      cv.wait(lock, [this] { return closed || !replies.empty(); });
      if (closed) return;
      auto [id, reply] = std::move(replies.front());
      replies.pop_front();
      lock.unlock();
      auto e = link.send(sys, id, reply);
      lock.lock();
      if (!e.empty()) {
        link.shutdown();  // the reader sees it and ends the connection
        return;
      }
    }
  }
};

bool data_plane_request(const caf::message& msg) {
  if (msg.size() == 0 || !msg.match_element<caf::atom_value>(0)) return false;
  auto kind = msg.get_as<caf::atom_value>(0);
  return kind == pull_atom::value || kind == push_atom::value || kind == pull_rows_atom::value;
}

}  // namespace

struct server::impl : std::enable_shared_from_this<server::impl> {
  caf::actor_system& sys;
  ps_shard_actor shard;
  std::chrono::milliseconds timeout;
  log_fn log;
  net::unique_fd listener;
  uint16_t port = 0;
  std::string token = fresh_token();
  std::atomic<bool> stopping{false};
  std::atomic<size_t> open{0};
  std::atomic<size_t> refused{0};
  std::atomic<size_t> shared{0};
  std::atomic<size_t> served{0};
  std::atomic<size_t> greeting{0};  // connections still before their greeting
  server::limits lim;
  std::shared_ptr<wire::byte_budget> budget;
  net::unique_fd reserve{::open("/dev/null", O_RDONLY | O_CLOEXEC)};  // given up to shed a connection at EMFILE
  size_t shed_since_log = 0;
  std::chrono::steady_clock::time_point last_shed_log{};
  std::thread acceptor;

  struct connection {
    std::shared_ptr<socket_link> link;
    std::thread reader;
    std::atomic<bool> done{false};
  };
  std::mutex mtx;
  std::list<connection> connections;

  impl(caf::actor_system& s, ps_shard_actor sh, std::chrono::milliseconds t, log_fn l)
      : sys(s), shard(std::move(sh)), timeout(t), log(std::move(l)) {}

  void refuse(const std::string& why) {
    ++refused;
    say(log, "data plane: closed a connection: " + why);
  }

  // A connection's greeting slot is given back once, before its refusal is counted (a
  // client that sees the refusal finds the slot free).
  void end_greeting(bool& greeted) {
    if (!greeted) --greeting;
    greeted = true;
  }

  // The reader thread of one accepted connection: what went wrong is a closed connection
  // and a log line, never the process.
  void serve(connection& c) {
    detail::name_this_thread("at.dp.serve");
    bool greeted = false;  // its greeting slot given back
    try {
      serve_frames(c, greeted);
    } catch (const std::exception& x) {
      end_greeting(greeted);
      refuse(std::string("a failure on the connection: ") + x.what());
      c.link->shutdown();
    }
    end_greeting(greeted);
    c.done = true;
  }

  // The token, then frames until the end (serve() marks the connection done).
  void serve_frames(connection& c, bool& greeted) {
    c.link->max_frame_bytes = lim.max_frame_bytes;
    c.link->bf16 = lim.bf16;
    c.link->budget = budget;
    c.link->budget_wait = timeout;
    hello h;
    const auto greeting_bound = std::min(timeout, lim.greeting_deadline);
    const auto greeting_until = std::chrono::steady_clock::now() + greeting_bound;
    std::string e;
    if (lim.tls) {  // between hosts: the TLS handshake first, the client's certificate checked
      try {
        c.link->tls = detail::tls::accept(c.link->fd.get(), *lim.tls, greeting_bound);
      } catch (const std::exception& x) {
        e = x.what();
      }
    }
    if (e.empty()) e = c.link->tune(timeout, timeout);
    if (e.empty()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(greeting_until - std::chrono::steady_clock::now());
      e = left.count() > 0 ? c.link->read_within(&h, sizeof h, left) : std::string("timeout");
      if (e == "timeout") e = fmt::format("none within {} ms", greeting_bound.count());
    }
    if (!e.empty() || h.magic != hello_magic || (h.version != protocol_version && h.version != protocol_shm) ||
        !same_token(h.token, token)) {
      end_greeting(greeted);
      refuse(!e.empty() ? "no greeting (" + e + ")" : "a wrong greeting or token");
      c.link->shutdown();
      return;
    }
    char ok = 1;
    if (h.version == protocol_shm) {
      shm_offer offer;
      if (auto oe = c.link->read(&offer, sizeof offer); !oe.empty()) {
        end_greeting(greeted);
        refuse("a greeting without its shared-memory offer (" + oe + ")");
        c.link->shutdown();
        return;
      }
      if (auto region = map_region(offer)) {
        c.link->region = std::move(region);
        c.link->out_ring = 1;
        ok = 2;
        ++shared;
      }
    }
    std::vector<iovec> answer{{&ok, 1}};
    if (!c.link->write(answer).empty()) {
      c.link->shutdown();
      return;
    }
    c.link->tune(std::chrono::milliseconds(0), timeout);  // idle between frames is fine
    end_greeting(greeted);
    ++open;
    auto sink = std::make_shared<reply_sink>();
    auto companion = sys.spawn<caf::actor_companion, caf::hidden>();
    auto* comp = static_cast<caf::actor_companion*>(caf::actor_cast<caf::abstract_actor*>(companion));
    comp->on_enqueue([sink](caf::mailbox_element_ptr e) {
      if (e) sink->take(*e);
    });
    auto sender = caf::actor_cast<caf::strong_actor_ptr>(companion);
    std::thread writer([this, sink, link = c.link] { sink->write_all_replies(sys, *link); });
    // However the frame loop ends (its end, a refusal, or an exception thrown past it),
    // the connection is torn down once, here: no longer counted open, the writer joined
    // (a joinable thread destroyed by an exception would end the process), and the
    // companion cleaned up, so that no handler is left on it.
    struct teardown {
      impl& server;
      std::thread& t;
      reply_sink& sink;
      socket_link& link;
      caf::actor_companion& comp;
      ~teardown() {
        --server.open;
        link.shutdown();
        sink.close();
        if (t.joinable()) t.join();
        caf::scoped_execution_unit here{&server.sys};
        comp.cleanup(caf::make_error(caf::exit_reason::user_shutdown), &here);
      }
    } done{*this, writer, *sink, *c.link, *comp};
    for (;;) {
      frame f;
      std::string err;
      try {
        err = receive(sys, *c.link, f);
      } catch (const std::exception& x) {  // CAF's deserializer on a member's bytes, or an allocation that failed
        err = std::string("a failure reading a frame: ") + x.what();
      }
      if (err == "eof" || stopping) break;
      if (!err.empty()) {
        refuse(err);
        break;
      }
      if (!data_plane_request(f.msg)) {
        // Named by its size only: printing a peer's message runs CAF's printers on its bytes.
        auto no = caf::make_message(make_error(
          error_code::invalid_request,
          fmt::format("the data plane carries pulls and pushes only, not a message of {} element(s)", f.msg.size())));
        if (!c.link->send(sys, f.id, no).empty()) break;
        continue;
      }
      ++served;
      shard->enqueue(sender, caf::make_message_id(sink->open(f.id)), std::move(f.msg), nullptr);
    }
  }

  // Out of descriptors: takes the connection waiting in the queue with the spare
  // descriptor and closes it, so that the accept loop goes on instead of spinning on it
  // or ending (logged at most once a second).
  void shed_one(const std::string& why) {
    pollfd waiting{listener.get(), POLLIN, 0};
    if (::poll(&waiting, 1, 0) == 1) {  // never wait here: the next one may be a member
      reserve.reset();
      int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      reserve.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
      if (fd < 0) return;
      ::close(fd);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // the accept thread: descriptors may come back
      return;
    }
    ++refused;
    ++shed_since_log;
    auto now = std::chrono::steady_clock::now();
    if (now - last_shed_log >= std::chrono::seconds(1)) {
      say(log, fmt::format("data plane: closed {} connection(s) at once: {}", shed_since_log, why));
      shed_since_log = 0;
      last_shed_log = now;
    }
  }

  // Joins the readers of connections that ended.
  void reap() {
    std::lock_guard<std::mutex> g{mtx};
    for (auto i = connections.begin(); i != connections.end();) {
      if (i->done) {
        if (i->reader.joinable()) i->reader.join();
        i = connections.erase(i);
      } else {
        ++i;
      }
    }
  }

  void accept_loop() {
    detail::name_this_thread("at.dp.accept");
    for (;;) {
      net::unique_fd fd;
      try {
        fd = net::accept_from(listener.get());
      } catch (const net::socket_error& e) {
        // ~server shuts the listener down to end this wait: no failure then.
        if (stopping) return;
        auto c = e.code();
        if (c == EMFILE || c == ENFILE || c == ENOBUFS || c == ENOMEM) {
          shed_one(e.what());  // out of descriptors: the waiting connection is closed, not the listener
          continue;
        }
        say(log, std::string("data plane: ") + e.what());
        return;
      }
      if (stopping) return;
      reap();
      std::lock_guard<std::mutex> g{mtx};
      if (greeting >= lim.max_greeting || connections.size() >= lim.max_connections) {
        refuse(fmt::format("{} connection(s) wait for their greeting, {} are open: no more now", greeting.load(),
                           connections.size()));
        continue;  // closed here, before any thread
      }
      auto& c = connections.emplace_back();
      c.link = std::make_shared<socket_link>(std::move(fd));
      ++greeting;
      try {
        c.reader = std::thread([this, &c] { serve(c); });
      } catch (const std::system_error& x) {
        --greeting;
        refuse(std::string("no thread for a connection: ") + x.what());
        c.link->shutdown();
        c.done = true;
      }
    }
  }
};

std::shared_ptr<const detail::tls::context> tls_context(const std::string& certificate, const std::string& key,
                                                        const std::string& ca) {
  return detail::tls::context_for({certificate, key, ca});
}

server::server(caf::actor_system& sys, ps_shard_actor shard, std::chrono::milliseconds request_timeout, log_fn log)
    : server(sys, std::move(shard), request_timeout, limits{}, std::move(log)) {}

server::server(caf::actor_system& sys, ps_shard_actor shard, std::chrono::milliseconds request_timeout, limits l,
               log_fn log)
    : impl_(std::make_shared<impl>(sys, std::move(shard), request_timeout, std::move(log))) {
  impl_->lim = l;
  impl_->budget = std::make_shared<wire::byte_budget>(l.max_bytes_in_flight != 0 ? l.max_bytes_in_flight
                                                                                   : 8 * l.max_frame_bytes);
  try {
    impl_->listener = net::listen_on(l.listen_host, 0);
    impl_->port = net::local_port(impl_->listener.get());
  } catch (const net::socket_error& e) {
    throw std::runtime_error(std::string("data plane: ") + e.what());
  }
  impl_->acceptor = std::thread([i = impl_.get()] { i->accept_loop(); });
}

server::~server() {
  impl_->stopping = true;
  ::shutdown(impl_->listener.get(), SHUT_RDWR);  // wakes accept()
  impl_->acceptor.join();
  impl_->listener.reset();
  std::lock_guard<std::mutex> g{impl_->mtx};
  for (auto& c : impl_->connections) c.link->shutdown();
  for (auto& c : impl_->connections)
    if (c.reader.joinable()) c.reader.join();
  impl_->connections.clear();
}

endpoint server::where() const {
  endpoint e;
  e.port = impl_->port;
  e.token = impl_->token;
  return e;
}

size_t server::connections() const { return impl_->open; }

size_t server::refused() const { return impl_->refused; }

size_t server::shared_memory_connections() const { return impl_->shared; }

size_t server::requests() const { return impl_->served; }

}  // namespace actortrain::data_plane
