#pragma once
// The send seam: the one path every framework message takes between ActorTrain's
// actors. Without a fault policy it is a plain CAF request or send. With one, each
// message is shown to the policy, which may deliver it, drop it (the requester then
// sees its own timeout, as with a lost packet), deliver it twice (the receiver must be
// idempotent), or delay it (which also reorders it behind later messages). Delays go
// through a relay actor and the relay's timer, so on CAF's test coordinator they follow
// simulated time: nothing sleeps. It may also crash the sender: the message is lost and
// the sending actor stops (exit reason kill) when its current handler returns; `crash_after`
// delivers the message and crashes the sender at its next one (a worker that pushed to
// every shard but never reported). A crashed actor's later sends are all dropped.
// `kill_receiver` kills the destination just before the message reaches it (a dataset
// shard that dies): the message bounces as from any dead actor.
//
// One seam per cluster (shared by its actors through a shared_ptr): two clusters in one
// process do not see each other's faults. The seam is used only from actor threads;
// the policy must be thread-safe when the cluster runs on a multi-threaded scheduler.
//
// Routes. A request may name, beside its receiver, where to carry it (`via`: a worker's
// tensor requests to a ps shard in another process go to the shard's data-plane
// stand-in, worker/shard_routes.hpp); the fault policy sees the receiver, and the seam
// decides nothing about routes.
//
// Timeouts. Every request has a finite timeout. CAF gives each request a timer of its
// own on the actor clock's thread, set when it leaves and cancelled when its reply
// comes: two wake-ups of that thread per request (40% of the embedded cluster's
// context switches). A seam made with `watch_timeouts` (owned by a shared_ptr) keeps
// the deadlines itself (deadline_watch): per actor, one clock timer at its earliest
// outstanding deadline. When it fires, each request past its deadline gets
// sec::request_timeout in its error handler, as from CAF's own timer (behind what the
// actor's mailbox already holds); a reply settles its request first. Only without a
// fault policy: the simulator's plans keep CAF's per-request timers. An actor with a
// behaviour keeps its timer while it has nothing to watch (it is alive anyway); an
// actor without one (a one-shot sender) has its timers answered with its last request,
// so that they do not keep it alive. A timer, like an open request, keeps the seam
// alive until it fires; an actor's deadlines are forgotten when it ends.
//
// Types. A request or send through the seam to a typed handle (ps_shard_actor,
// dataset_shard_actor, worker_actor, coordinator_actor) is checked when it is compiled:
// the receiver's interface must take the message, and the reply handler given to
// `then` must take what that interface answers. The message itself still travels
// untyped (it may go to the relay, the black hole or a data-plane stand-in instead of
// the receiver), so a handle erased to caf::actor is checked only at run time: a reply
// of an unexpected type reaches the error handler as sec::unexpected_response.

#include <actortrain/actors/core/messages.hpp>

#include <caf/all.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

namespace actortrain {

/// What the seam does with one message.
struct delivery {
  enum class kind : uint8_t { deliver, drop, duplicate, delay, crash, crash_after, kill_receiver };
  kind what = kind::deliver;
  caf::timespan delay{0};  ///< for kind::delay

  static delivery deliver() { return {}; }
  static delivery drop() { return {kind::drop, caf::timespan{0}}; }
  static delivery duplicate() { return {kind::duplicate, caf::timespan{0}}; }
  static delivery delay_by(caf::timespan d) { return {kind::delay, d}; }
  static delivery crash() { return {kind::crash, caf::timespan{0}}; }
  static delivery crash_after() { return {kind::crash_after, caf::timespan{0}}; }
  static delivery kill_receiver() { return {kind::kill_receiver, caf::timespan{0}}; }
};

/// What an actor of a cluster is, for fault policies that target roles.
enum class actor_role : uint8_t { any, coordinator, worker, ps, dataset };

const char* to_string(actor_role r);

/// What a fault policy sees of a message.
struct message_info {
  caf::actor_addr from;
  caf::actor_addr to;
  caf::atom_value kind;  ///< the message's leading atom (pull, push, batch, step, ...)
  bool is_request = true;
  /// For a step task: the (pipeline, position) of each of its steps.
  std::vector<std::pair<uint32_t, uint64_t>> steps;
  /// For a push: it asks for the next step's parameters too (push_request::then_pull).
  bool pulls = false;
};

namespace detail {
// What `Handle` answers to (Xs...): a type_list of the reply's types, or caf::message
// for an untyped handle.
template <class Handle, class... Xs>
struct reply_of {
  using answer = caf::response_type<typename Handle::signatures, std::decay_t<Xs>...>;
  static_assert(answer::valid, "the receiver's interface takes no such message");
  using type = typename answer::type;
};

// Whether a reply handler F takes the reply `List`.
template <class F, class List>
struct takes_reply : std::true_type {};  // caf::message: matched at run time
template <class F, class... Out>
struct takes_reply<F, caf::detail::type_list<Out...>> : std::bool_constant<std::is_invocable_v<F, Out&...>> {};

template <class T>
void note_steps(message_info&, const T&) {}
inline void note_steps(message_info& m, const step_task& t) {
  for (auto& s : t.steps) m.steps.emplace_back(s.pipeline, s.position);
}
inline void note_steps(message_info& m, const push_request& r) { m.pulls = !r.then_pull.empty(); }
}  // namespace detail

/// Decides the fate of messages (the fault-tolerance work implements seeded plans).
class fault_policy {
 public:
  virtual ~fault_policy() = default;
  virtual delivery decide(const message_info& m) = 0;
  /// The cluster names each actor it spawns (a restarted worker again, with its id).
  virtual void on_spawn(const caf::actor_addr&, actor_role, uint32_t /*index*/) {}
};

class send_seam;

namespace detail {
// Settles a watched request (send_seam's deadline watch) before its handler runs.
struct settler {
  std::shared_ptr<send_seam> seam;       // kept while the request is open
  caf::scheduled_actor* self = nullptr;  // the requester, whose handler runs this
  caf::actor_clock::time_point deadline;
  uint64_t response_id = 0;
  void operator()() const;
};

// `f` with the same arguments, calling `done` first.
template <class F, class... Args>
auto settling(F f, settler done, caf::detail::type_list<Args...>) {
  return [f = std::move(f), done](Args... xs) mutable {
    done();
    f(static_cast<Args>(xs)...);
  };
}
template <class F>
auto settling(F f, settler done) {
  using args = typename caf::detail::get_callable_trait<F>::arg_types;
  return settling(std::move(f), done, args{});
}
}  // namespace detail

/// A request's response handle whose reply handler is checked against `Reply`, what the
/// receiver's interface answers (send_seam::request).
template <class Reply, class Response>
class checked_response {
 public:
  explicit checked_response(Response r, std::optional<detail::settler> watched = std::nullopt)
      : r_(std::move(r)), watched_(watched) {}
  template <class OnReply, class OnError>
  void then(OnReply on_reply, OnError on_error) {
    static_assert(detail::takes_reply<OnReply, Reply>::value,
                  "the reply handler does not take what the receiver's interface answers");
    if (watched_)
      r_.then(detail::settling(std::move(on_reply), *watched_), detail::settling(std::move(on_error), *watched_));
    else
      r_.then(std::move(on_reply), std::move(on_error));
  }

 private:
  Response r_;
  std::optional<detail::settler> watched_;
};

using relay_atom = caf::atom_constant<caf::atom("relay")>;
using fire_watch_atom = caf::atom_constant<caf::atom("firewatch")>;
using fire_atom = caf::atom_constant<caf::atom("fire")>;

class send_seam : public std::enable_shared_from_this<send_seam> {
 public:
  /// Spawns the seam's helper actors (relay, black hole) in `sys` when a policy is given.
  /// `watch_timeouts` (without a policy): the seam keeps the requests' deadlines, one
  /// clock timer per actor instead of one per request (see "Timeouts" above).
  explicit send_seam(caf::actor_system& sys, std::shared_ptr<fault_policy> policy = nullptr,
                     bool watch_timeouts = false);
  ~send_seam();
  send_seam(const send_seam&) = delete;
  send_seam& operator=(const send_seam&) = delete;

  /// A request from `self` to `dest` with a finite `timeout`; call
  /// .then(on_reply, on_error) on what it returns.
  template <class Self, class Handle, class Atom, class... Ts>
  auto request(Self* self, const Handle& dest, caf::timespan timeout, Atom a, Ts&&... xs) {
    return request(self, dest, caf::actor{}, timeout, a, std::forward<Ts>(xs)...);
  }

  /// The same, carried to `via` instead when it is set (a data-plane stand-in answers
  /// for `dest`); faults are decided for, and a duplicate or a kill goes to, `dest`.
  template <class Self, class Handle, class Atom, class... Ts>
  auto request(Self* self, const Handle& dest, const caf::actor& via, caf::timespan timeout, Atom a, Ts&&... xs) {
    using reply = typename detail::reply_of<Handle, Atom, Ts...>::type;
    if (watch_timeouts_ && !policy_) {
      auto me = weak_from_this().lock();
      if (!me) throw std::logic_error("send_seam: watch_timeouts needs a seam owned by a shared_ptr");
      auto r = self->request(via ? via : caf::actor_cast<caf::actor>(dest), caf::infinite, a, std::forward<Ts>(xs)...);
      auto id = r.id().integer_value();
      auto at = self->clock().now() + timeout;
      watch(self, id, at);
      return checked_response<reply, decltype(r)>{std::move(r), detail::settler{std::move(me), self, at, id}};
    }
    auto r = carry(self, dest, via, timeout, a, std::forward<Ts>(xs)...);
    return checked_response<reply, decltype(r)>{std::move(r)};
  }

  /// Requests of `actor` whose deadlines the seam watches (0 without watch_timeouts).
  size_t watched(caf::actor_id actor);
  /// A watched request of `self`, due at `deadline`, was answered or failed: its deadline
  /// is forgotten (and the timers of an actor without a behaviour, when it was the last).
  void settle(caf::scheduled_actor* self, caf::actor_clock::time_point deadline, uint64_t response_id);

  /// A one-way message from `self` to `dest`.
  template <class Self, class Handle, class Atom, class... Ts>
  void send(Self* self, const Handle& dest, Atom a, Ts&&... xs) {
    static_assert(caf::response_type<typename Handle::signatures, Atom, std::decay_t<Ts>...>::valid,
                  "the receiver's interface takes no such message");
    auto target = caf::actor_cast<caf::actor>(dest);
    if (!policy_) {
      self->send(target, a, std::forward<Ts>(xs)...);
      return;
    }
    message_info info{self->address(), target.address(), Atom::value, false, {}};
    (detail::note_steps(info, xs), ...);
    auto d = fate(self, info);
    switch (d.what) {
      case delivery::kind::drop:
      case delivery::kind::crash:
        return;
      case delivery::kind::duplicate:
        self->send(target, a, xs...);
        self->send(target, a, std::forward<Ts>(xs)...);
        return;
      case delivery::kind::delay:
        self->delayed_send(target, d.delay, a, std::forward<Ts>(xs)...);
        return;
      case delivery::kind::kill_receiver:
        caf::anon_send_exit(target, caf::exit_reason::kill);
        self->send(target, a, std::forward<Ts>(xs)...);
        return;
      case delivery::kind::deliver:
      case delivery::kind::crash_after:
      default:
        self->send(target, a, std::forward<Ts>(xs)...);
    }
  }

  bool has_policy() const { return policy_ != nullptr; }

 private:
  // The request as it travels: untyped, to the receiver, `via`, the relay or the black
  // hole as the fault policy decides.
  template <class Self, class Handle, class Atom, class... Ts>
  auto carry(Self* self, const Handle& dest, const caf::actor& via, caf::timespan timeout, Atom a, Ts&&... xs) {
    auto receiver = caf::actor_cast<caf::actor>(dest);
    auto target = via ? via : receiver;
    if (!policy_) return self->request(target, timeout, a, std::forward<Ts>(xs)...);
    message_info info{self->address(), receiver.address(), Atom::value, true, {}};
    (detail::note_steps(info, xs), ...);
    auto d = fate(self, info);
    switch (d.what) {
      case delivery::kind::drop:
        return self->request(black_hole_, timeout, a, std::forward<Ts>(xs)...);
      case delivery::kind::crash:
        // CAF keeps a quitting actor until its awaited responses are settled: this one
        // fails at once, so the actor ends now (its error handlers run on the way out).
        return self->request(black_hole_, caf::timespan{0}, a, std::forward<Ts>(xs)...);
      case delivery::kind::duplicate:
        caf::anon_send(receiver, a, xs...);  // the copy's reply goes nowhere
        return self->request(target, timeout, a, std::forward<Ts>(xs)...);
      case delivery::kind::delay:
        return self->request(relay_, timeout, relay_atom::value, target,
                             caf::make_message(a, std::forward<Ts>(xs)...), d.delay, timeout);
      case delivery::kind::kill_receiver:
        caf::anon_send_exit(receiver, caf::exit_reason::kill);
        return self->request(target, timeout, a, std::forward<Ts>(xs)...);
      case delivery::kind::deliver:
      case delivery::kind::crash_after:
      default:
        return self->request(target, timeout, a, std::forward<Ts>(xs)...);
    }
  }


  using time_point = caf::actor_clock::time_point;
  // One actor's watched requests (deadline and response id, earliest first), when its
  // timer is set to fire, and its timers' response ids.
  struct deadline_watch {
    std::set<std::pair<time_point, uint64_t>> open;
    std::optional<time_point> armed;
    std::vector<uint64_t> timers;
  };

  template <class Self>
  void watch(Self* self, uint64_t response_id, time_point at) {
    bool fresh = false;
    if (note(self->id(), response_id, at, fresh)) arm(self, at);
    // Forgotten when the actor ends (once per actor: its entry lives as long as it).
    if (fresh)
      self->attach_functor([me = weak_from_this(), actor = self->id()] {
        if (auto seam = me.lock()) seam->forget(actor);
      });
  }

  // One timer for `self`, at `at`: a response handler of its own, failed by the clock.
  template <class Self>
  void arm(Self* self, time_point at) {
    auto id = self->new_request_id(caf::message_priority::normal).response_id();
    armed(self->id(), id.integer_value());
    self->add_multiplexed_response_handler(
      id, caf::behavior{[](fire_watch_atom) {},
                        [me = shared_from_this(), self, timer = id.integer_value()](caf::error&) {
                          me->expire(self, timer);
                        }});
    self->clock().set_request_timeout(at, self, id);
  }

  // Timer `timer` fired: every request past its deadline fails with request_timeout;
  // the timer is set again for the earliest one left.
  template <class Self>
  void expire(Self* self, uint64_t timer) {
    std::vector<uint64_t> overdue;
    auto next = due(self->id(), timer, self->clock().now(), overdue);
    for (auto id : overdue)
      self->eq_impl(caf::message_id{id}, nullptr, self->context(), caf::make_error(caf::sec::request_timeout));
    if (next) arm(self, *next);
  }

  // Adds a deadline; true when the actor's timer must be set (for an earlier time).
  // `fresh`: the actor had no entry yet.
  bool note(caf::actor_id actor, uint64_t response_id, time_point at, bool& fresh);
  // A timer was set for the actor.
  void armed(caf::actor_id actor, uint64_t timer);
  // Timer `timer` fired: takes the requests past `now` out; the earliest deadline left,
  // if the timer must be set for it.
  std::optional<time_point> due(caf::actor_id actor, uint64_t timer, time_point now, std::vector<uint64_t>& overdue);
  // The actor ended.
  void forget(caf::actor_id actor);

  // The policy's decision, after the seam's own: a crashed sender loses everything, and a
  // doomed one (crash_after) crashes now. A crash stops `self` once its handler returns.
  template <class Self>
  delivery fate(Self* self, const message_info& m) {
    auto d = crashed(m.from) ? delivery::crash() : policy_->decide(m);
    if (d.what == delivery::kind::crash) {
      mark(m.from, /*now=*/true);
      self->quit(caf::exit_reason::kill);
    } else if (d.what == delivery::kind::crash_after) {
      mark(m.from, /*now=*/false);
    }
    return d;
  }
  // True when `a` crashed or is doomed to crash at this send.
  bool crashed(const caf::actor_addr& a);
  void mark(const caf::actor_addr& a, bool now);

  std::shared_ptr<fault_policy> policy_;
  std::mutex mtx_;
  std::map<caf::actor_addr, bool> crashes_;  // true: crashed; false: crashes at its next send
  caf::actor black_hole_;
  caf::actor relay_;
  bool watch_timeouts_ = false;
  std::mutex watch_mtx_;
  std::unordered_map<caf::actor_id, deadline_watch> watches_;
};

inline void detail::settler::operator()() const {
  seam->settle(self, deadline, response_id);
}

using seam_ptr = std::shared_ptr<send_seam>;

}  // namespace actortrain
