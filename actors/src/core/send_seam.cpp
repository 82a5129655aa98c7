#include <actortrain/actors/core/send_seam.hpp>

#include <algorithm>
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

send_seam::send_seam(caf::actor_system& sys, std::shared_ptr<fault_policy> policy, bool watch_timeouts)
    : policy_(std::move(policy)), watch_timeouts_(watch_timeouts) {
  if (policy_) {
    black_hole_ = sys.spawn(black_hole);
    relay_ = sys.spawn(relay);
  }
}

bool send_seam::note(caf::actor_id actor, uint64_t response_id, time_point at, bool& fresh) {
  std::lock_guard<std::mutex> lock{watch_mtx_};
  auto [i, inserted] = watches_.try_emplace(actor);
  fresh = inserted;
  auto& w = i->second;
  w.open.emplace(at, response_id);
  if (w.armed && *w.armed <= at) return false;
  w.armed = at;
  return true;
}

void send_seam::armed(caf::actor_id actor, uint64_t timer) {
  std::lock_guard<std::mutex> lock{watch_mtx_};
  watches_[actor].timers.push_back(timer);
}

void send_seam::settle(caf::scheduled_actor* self, time_point deadline, uint64_t response_id) {
  std::vector<uint64_t> timers;
  {
    std::lock_guard<std::mutex> lock{watch_mtx_};
    auto w = watches_.find(self->id());
    if (w == watches_.end() || w->second.open.erase({deadline, response_id}) == 0) return;
    // Its last request: an actor without a behaviour would be kept alive by its timers
    // until they fire. Answering them ends them now.
    if (w->second.open.empty() && !self->has_behavior()) {
      timers.swap(w->second.timers);
      w->second.armed.reset();
    }
  }
  for (auto t : timers) self->eq_impl(caf::message_id{t}, nullptr, self->context(), fire_watch_atom::value);
}

std::optional<send_seam::time_point> send_seam::due(caf::actor_id actor, uint64_t timer, time_point now,
                                                     std::vector<uint64_t>& overdue) {
  std::lock_guard<std::mutex> lock{watch_mtx_};
  auto w = watches_.find(actor);
  if (w == watches_.end()) return std::nullopt;
  auto& ts = w->second.timers;
  ts.erase(std::remove(ts.begin(), ts.end(), timer), ts.end());
  auto& by = w->second.open;
  while (!by.empty() && by.begin()->first <= now) {
    overdue.push_back(by.begin()->second);
    by.erase(by.begin());
  }
  if (by.empty()) {
    // The timers still set may fire later than a new request's deadline: it sets its own.
    w->second.armed.reset();
    return std::nullopt;
  }
  auto next = by.begin()->first;
  // Another timer is set for an earlier time (or this one's): that one re-arms.
  if (!ts.empty() && w->second.armed && *w->second.armed > now && *w->second.armed <= next) return std::nullopt;
  w->second.armed = next;
  return next;
}

void send_seam::forget(caf::actor_id actor) {
  std::lock_guard<std::mutex> lock{watch_mtx_};
  watches_.erase(actor);
}

size_t send_seam::watched(caf::actor_id actor) {
  std::lock_guard<std::mutex> lock{watch_mtx_};
  auto w = watches_.find(actor);
  return w == watches_.end() ? 0 : w->second.open.size();
}

send_seam::~send_seam() {
  if (black_hole_) caf::anon_send_exit(black_hole_, caf::exit_reason::user_shutdown);
  if (relay_) caf::anon_send_exit(relay_, caf::exit_reason::user_shutdown);
}

}  // namespace actortrain
