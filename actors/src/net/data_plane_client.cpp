// The data plane's worker side: a stand-in per shard that carries a worker's pulls, row
// pulls and pushes over its connection and answers them with the shard's replies
// (data_plane.hpp).
#include <actortrain/actors/worker/shard_routes.hpp>

#include "data_plane_wire.hpp"

namespace actortrain::data_plane {

// -- the worker side ---------------------------------------------------------------

namespace {

using namespace wire;

// What a stand-in shares with its reader thread and its exit: the socket, the open
// requests, the route it entered. The reader answers each requester itself, as a
// response promise would (saving a hand-off through the stand-in per reply).
struct stand_in_core {
  struct waiting {
    caf::strong_actor_ptr requester;
    caf::message_id mid;
  };
  std::shared_ptr<socket_link> link;
  std::thread reader;
  std::mutex mtx;
  std::map<uint64_t, waiting> pending;  // guarded by mtx
  bool closed = false;                  // guarded by mtx: requests are refused at once
  std::atomic<uint64_t> next_id{1};
  std::weak_ptr<shard_routes> routes;
  caf::actor_addr shard;
  caf::actor_addr entry;       // the companion the route table sends requests to
  caf::actor_addr stand_in;    // told when a write fails
  caf::strong_actor_ptr self;  // the stand-in, as the sender of replies
  std::string where;

  // A request routed here, on the requester's thread (the companion's enqueue):
  // written at once, answered by the reader. No hand-off to another thread on the way out.
  void request(caf::actor_system& sys, const caf::strong_actor_ptr& sender, caf::message_id mid, caf::message msg) {
    if (!mid.is_request() || !sender) return;  // not a request: nothing to carry
    auto id = next_id++;
    bool open;
    {
      std::lock_guard<std::mutex> g{mtx};
      open = !closed;
      if (open) pending.emplace(id, waiting{sender, mid});
    }
    if (!open) {
      sender->enqueue(self, mid.response_id(),
                      caf::make_message(make_error(error_code::shard_lost, "the data plane to " + where + " closed")),
                      nullptr);
      return;
    }
    if (auto err = link->send(sys, id, msg); !err.empty()) {
      answer(id, caf::make_message(make_error(error_code::shard_lost, "data plane to " + where + ": " + err)));
      if (auto me = caf::actor_cast<caf::actor>(stand_in)) caf::anon_send(me, closed_atom::value, err);
    }
  }

  // Answers request `id` with `reply` (nothing when it was answered already).
  void answer(uint64_t id, caf::message reply) {
    waiting w;
    {
      std::lock_guard<std::mutex> g{mtx};
      auto i = pending.find(id);
      if (i == pending.end()) return;
      w = std::move(i->second);
      pending.erase(i);
    }
    w.requester->enqueue(self, w.mid.response_id(), std::move(reply), nullptr);
  }

  // Out of the route table and no request left open: before the stand-in quits (a
  // monitor of it is told before its own exit functors run).
  void leave(const std::string& why) {
    if (auto r = routes.lock()) r->leave(shard, entry);
    fail_pending(why);
  }

  void fail_pending(const std::string& why) {
    auto err = caf::make_message(make_error(error_code::shard_lost, "the data plane to " + where + " closed: " + why));
    std::map<uint64_t, waiting> all;
    {
      std::lock_guard<std::mutex> g{mtx};
      closed = true;
      all.swap(pending);
    }
    for (auto& [id, w] : all) w.requester->enqueue(self, w.mid.response_id(), err, nullptr);
  }
};

// Connects (within `timeout`: with TLS, the handshake too) and greets, offering a
// shared-memory region when `shared_memory` (the server maps it only when both are on
// one host and in one network namespace); null and `why` on failure. The link's region
// is set when the server mapped it.
std::shared_ptr<socket_link> connect_and_greet(const endpoint& at, std::chrono::milliseconds timeout,
                                               bool shared_memory, std::string& why) {
  std::shared_ptr<socket_link> link;
  try {
    if (at.tls) {
      auto c = detail::tls::dial(at.host, at.port, *at.tls, timeout, /*server_speaks_first=*/false);
      link = std::make_shared<socket_link>(std::move(c.fd));
      link->tls = std::move(c.tls);
    } else {
      link = std::make_shared<socket_link>(net::connect_to(at.host, at.port, timeout));
    }
  } catch (const net::socket_error& e) {
    why = e.reason();  // the caller names the address
    return {};
  } catch (const std::exception& e) {  // a refused TLS handshake
    why = e.what();
    return {};
  }
  why = link->tune(timeout, timeout);
  if (!why.empty()) return {};
  std::shared_ptr<shared_region> region;
  hello h;
  std::memcpy(h.token, at.token.data(), std::min(at.token.size(), token_chars));
  shm_offer offer;
  net::unique_fd memfd;  // open until the server has opened it
  if (shared_memory) {
    std::string no_shm;
    region = make_region(memfd, no_shm);  // without one, the floats go inline
    if (region) {
      auto name = offer_name(memfd);
      h.version = protocol_shm;
      std::memcpy(offer.name, name.data(), std::min(name.size(), shm_name_chars - 1));
    }
  }
  std::vector<iovec> greeting{{&h, sizeof h}};
  if (region) greeting.push_back({&offer, sizeof offer});
  char ok = 0;
  auto sent = link->write(greeting);
  auto answer = sent.empty() ? link->read(&ok, 1) : std::string{};
  memfd.reset();  // mapped by both, or by none
  if (!sent.empty()) {
    why = "cannot greet: " + sent;
  } else if (!answer.empty() || (ok != 1 && ok != 2)) {
    why = answer == "eof" || answer.empty() ? std::string("the token was refused")
                                            : "no answer to the greeting (" + answer + ")";
  } else {
    if (ok == 2) link->region = std::move(region);
    link->tune(std::chrono::milliseconds(0), timeout);  // replies may take their time
    return link;
  }
  return {};
}

struct stand_in_state {
  std::shared_ptr<stand_in_core> core;
  caf::actor entry;  // the companion requests are routed to (it holds the core)
};

caf::behavior stand_in(caf::stateful_actor<stand_in_state>* self, endpoint at, ps_shard_actor shard,
                       std::shared_ptr<shard_routes> routes, std::chrono::milliseconds timeout, log_fn log,
                       bool shared_memory) {
  detail::name_this_thread("at.dp.standin");
  auto where = fmt::format("{}:{}", at.host, at.port);
  std::string why;
  auto link = connect_and_greet(at, timeout, shared_memory, why);
  if (!link) {
    say(log, fmt::format("data plane: cannot connect to {} ({}); the ps shard is reached over BASP", where, why));
    self->quit(make_error(error_code::shard_lost, "data plane to " + where + ": " + why));
    return {};
  }
  auto core = std::make_shared<stand_in_core>();
  self->state.core = core;
  core->link = std::move(link);
  core->link->out_ring = 0;
  if (at.max_frame_bytes != 0) core->link->max_frame_bytes = at.max_frame_bytes;
  core->link->bf16 = at.bf16;
  core->routes = routes;
  core->shard = shard.address();
  core->self = caf::actor_cast<caf::strong_actor_ptr>(self);
  core->where = where;
  auto* sys = &self->system();
  // Holds the core only (not the stand-in): replies go straight to their requesters.
  core->reader = std::thread([sys, core, me_addr = self->address()] {
    detail::name_this_thread("at.dp.read");
    for (;;) {
      frame f;
      std::string err;
      try {
        err = receive(*sys, *core->link, f);
      } catch (const std::exception& x) {  // an allocation that failed: this connection ends, not the process
        err = std::string("a failure reading a frame: ") + x.what();
      }
      if (!err.empty()) {
        if (auto me = caf::actor_cast<caf::actor>(me_addr))
          caf::anon_send(me, closed_atom::value, err == "eof" ? std::string("the ps side closed it") : err);
        return;
      }
      core->answer(f.id, std::move(f.msg));
    }
  });
  // Whatever ends the stand-in: no route through it, no request left open, no thread.
  self->attach_functor([core](const caf::error&) {
    core->leave("the stand-in ended");
    core->link->shutdown();
    if (core->reader.joinable()) core->reader.join();
    core->self = nullptr;  // the core outlives the stand-in in nobody's hands but its own
  });
  self->monitor(shard);
  self->set_down_handler([self](caf::down_msg& dm) {
    self->state.core->leave("the ps shard went down");
    self->quit(dm.reason);
  });
  self->set_exit_handler([self](caf::exit_msg& em) {
    self->state.core->leave("closed by its owner");
    self->quit(em.reason);
  });
  // Requests go to a companion, whose enqueue writes them on the requester's own thread
  // (a worker's); the stand-in itself only watches the shard, the reader and its owner.
  auto entry = sys->spawn<caf::actor_companion, caf::hidden>();
  static_cast<caf::actor_companion*>(caf::actor_cast<caf::abstract_actor*>(entry))
    ->on_enqueue([sys, core](caf::mailbox_element_ptr e) {
      if (e) core->request(*sys, e->sender, e->mid, e->move_content_to_message());
    });
  // Requests sent to the stand-in itself (not through the route) take the same way.
  self->set_default_handler([self](caf::scheduled_actor*, caf::message_view& mv) -> caf::result<caf::message> {
    auto mid = self->current_message_id();
    auto requester = self->current_sender();
    if (!mid.is_request() || !requester) return caf::message{};
    self->drop_current_message_id();  // answered by the reader, not by this handler
    self->state.core->request(self->system(), requester, mid, mv.move_content_to_message());
    return caf::delegated<caf::message>{};
  });
  core->entry = entry.address();
  core->stand_in = self->address();
  self->state.entry = entry;
  if (routes) routes->enter(core->shard, entry);
  std::string how = core->link->tls && core->link->region ? " (TLS, tensors in shared memory)"
                    : core->link->tls                      ? " (TLS)"
                    : core->link->region                   ? " (tensors in shared memory)"
                                                           : "";
  say(log, fmt::format("data plane: connected to {}{}", where, how));
  return {
    [self](closed_atom, std::string& why) {
      self->state.core->leave(why);
      self->quit(make_error(error_code::shard_lost, "data plane to " + self->state.core->where + ": " + why));
    },
  };
}

}  // namespace

caf::actor open(caf::actor_system& sys, const endpoint& at, ps_shard_actor shard, std::shared_ptr<shard_routes> routes,
                std::chrono::milliseconds timeout, log_fn log, bool shared_memory) {
  return sys.spawn<caf::detached>(stand_in, at, std::move(shard), std::move(routes), timeout, std::move(log),
                                  shared_memory);
}

}  // namespace actortrain::data_plane
