#pragma once
// Requests to actors from a thread that is not an actor's (the application's, a
// process's main thread): each goes out from a one-shot event-based actor that ends with
// the answer, so the caller's thread never blocks a scheduler thread, and every request
// has its timeout. Internal to actors/ (they replace hand-written bridge actors).

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>

#include <future>
#include <memory>
#include <utility>
#include <vector>

namespace actortrain {

namespace detail {

// The one-shot actor behind request_from_outside, ask and ask_while_up: `ok` gets the
// reply or `err` the error, once; with `watch`, `dest` is monitored as well and its down
// message is the error caf::sec::request_receiver_down (CAF 0.17 answers a request in
// flight to a lost remote actor with nothing, only its timeout).
template <class Reply, class Handle, class Ok, class Err, class... Ts>
void request_once(caf::actor_system& sys, bool watch, Handle dest, caf::timespan timeout, Ok ok, Err err, Ts... xs) {
  sys.spawn([=](caf::event_based_actor* self) mutable {
    // Answered once (a reply and a down message may both come); the handlers may be
    // mutable callables, so they live beside the flag.
    struct pending {
      Ok ok;
      Err err;
      bool answered = false;
    };
    auto p = std::make_shared<pending>(pending{ok, err});
    auto settle = [self, p](auto&& call) {
      if (p->answered) return;
      p->answered = true;
      call(*p);
      self->quit();
    };
    if (watch) {
      self->set_down_handler([settle](caf::down_msg&) {
        settle([](pending& q) {
          caf::error e = caf::make_error(caf::sec::request_receiver_down);
          q.err(e);
        });
      });
      self->monitor(dest);
    }
    self->request(dest, timeout, std::move(xs)...)
      .then([settle](Reply& r) { settle([&r](pending& q) { q.ok(r); }); },
            [settle](caf::error& e) { settle([&e](pending& q) { q.err(e); }); });
  });
}

}  // namespace detail

/// Sends `xs...` to `dest` (a typed or untyped handle) with `timeout` and calls `ok`
/// with the reply (a `Reply&`) or `err` with the error (a `caf::error&`), once, in the
/// one-shot actor's context.
template <class Reply, class Handle, class Ok, class Err, class... Ts>
void request_from_outside(caf::actor_system& sys, Handle dest, caf::timespan timeout, Ok ok, Err err, Ts... xs) {
  detail::request_once<Reply>(sys, false, std::move(dest), timeout, std::move(ok), std::move(err), std::move(xs)...);
}

/// The same request to each of `dests`; `done` gets every answer or error, by index,
/// once all are in.
template <class Reply, class Handle, class Done, class... Ts>
void request_each_from_outside(caf::actor_system& sys, std::vector<Handle> dests, caf::timespan timeout, Done done,
                               Ts... xs) {
  sys.spawn([=](caf::event_based_actor* self) {
    using answers = std::vector<caf::expected<Reply>>;
    auto out = std::make_shared<answers>(dests.size(), caf::expected<Reply>{Reply{}});
    auto remaining = std::make_shared<size_t>(dests.size());
    auto one = [out, remaining, done](size_t i, caf::expected<Reply> x) mutable {
      (*out)[i] = std::move(x);
      if (--*remaining == 0) done(std::move(*out));
    };
    if (dests.empty()) done(answers{});
    for (size_t i = 0; i < dests.size(); ++i)
      self->request(dests[i], timeout, xs...)
        .then([=](Reply& r) mutable { one(i, std::move(r)); }, [=](caf::error& e) mutable { one(i, std::move(e)); });
  });
}

namespace detail {

// ask and ask_while_up: the waiting thread gets the one answer of request_once.
template <class Reply, class Handle, class... Ts>
caf::expected<Reply> ask_from_outside(caf::actor_system& sys, Handle dest, caf::timespan timeout, bool watch,
                                      Ts... xs) {
  auto promise = std::make_shared<std::promise<caf::expected<Reply>>>();
  auto fut = promise->get_future();
  request_once<Reply>(
    sys, watch, std::move(dest), timeout, [promise](Reply& r) { promise->set_value(std::move(r)); },
    [promise](caf::error& e) { promise->set_value(std::move(e)); }, std::move(xs)...);
  return fut.get();
}

}  // namespace detail

/// Waits for the reply (or the error) of one request; the request's timeout bounds the
/// wait.
template <class Reply, class Handle, class... Ts>
caf::expected<Reply> ask(caf::actor_system& sys, Handle dest, caf::timespan timeout, Ts... xs) {
  return detail::ask_from_outside<Reply>(sys, std::move(dest), timeout, false, std::move(xs)...);
}

/// ask, and the request fails as soon as `dest` is down (a remote actor whose process
/// or connection is lost: CAF 0.17 answers a request in flight to it with nothing, so
/// plain ask waits for the whole timeout). The error of a loss is caf::sec::
/// request_receiver_down.
template <class Reply, class Handle, class... Ts>
caf::expected<Reply> ask_while_up(caf::actor_system& sys, Handle dest, caf::timespan timeout, Ts... xs) {
  return detail::ask_from_outside<Reply>(sys, std::move(dest), timeout, true, std::move(xs)...);
}

}  // namespace actortrain
