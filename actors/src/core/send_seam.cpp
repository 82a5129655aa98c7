#include <actortrain/actors/core/send_seam.hpp>

#include <map>

namespace actortrain {

namespace {

// Swallows requests without answering: the requester sees its own timeout.
caf::behavior black_hole(caf::event_based_actor* self) {
  self->set_default_handler([](caf::scheduled_actor* s, caf::message_view&) -> caf::result<caf::message> {
    s->make_response_promise();  // dropped undelivered: no reply, ever
    return caf::delegated<caf::message>{};
  });
  return {[](stop_atom) {}};
}

struct relay_state {
  struct pending {
    caf::response_promise rp;
    caf::actor dest;
    caf::message msg;
  };
  uint64_t next = 0;
  std::map<uint64_t, pending> waiting;
};

// Holds a request for its delay, then delegates it, so the receiver answers the
// original requester.
caf::behavior relay(caf::stateful_actor<relay_state>* self) {
  return {
    [=](relay_atom, caf::actor dest, caf::message msg, caf::timespan delay,
        caf::timespan) -> caf::result<caf::message> {
      auto id = self->state.next++;
      self->state.waiting.emplace(id, relay_state::pending{self->make_response_promise(), dest, std::move(msg)});
      self->delayed_send(self, delay, fire_atom::value, id);
      return caf::delegated<caf::message>{};
    },
    [=](fire_atom, uint64_t id) {
      auto i = self->state.waiting.find(id);
      if (i == self->state.waiting.end()) return;
      auto p = std::move(i->second);
      self->state.waiting.erase(i);
      p.rp.delegate(p.dest, std::move(p.msg));
    },
  };
}

}  // namespace

const char* to_string(actor_role r) {
  switch (r) {
    case actor_role::any: return "any";
    case actor_role::coordinator: return "coordinator";
    case actor_role::worker: return "worker";
    case actor_role::ps: return "ps";
    case actor_role::dataset: return "dataset";
  }
  return "unknown";
}

bool send_seam::crashed(const caf::actor_addr& a) {
  std::lock_guard<std::mutex> lock{mtx_};
  return crashes_.count(a) > 0;
}

void send_seam::mark(const caf::actor_addr& a, bool now) {
  std::lock_guard<std::mutex> lock{mtx_};
  auto& c = crashes_[a];
  c = c || now;
}

send_seam::send_seam(caf::actor_system& sys, std::shared_ptr<fault_policy> policy) : policy_(std::move(policy)) {
  if (policy_) {
    black_hole_ = sys.spawn(black_hole);
    relay_ = sys.spawn(relay);
  }
}

send_seam::~send_seam() {
  if (black_hole_) caf::anon_send_exit(black_hole_, caf::exit_reason::user_shutdown);
  if (relay_) caf::anon_send_exit(relay_, caf::exit_reason::user_shutdown);
}

}  // namespace actortrain
