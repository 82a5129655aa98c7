// The send seam's deadline watch (send_seam.hpp, "Timeouts") on CAF's test coordinator:
// with watch_timeouts a request still fails with sec::request_timeout at its deadline
// (not before, and exactly once), an answered one never does, and an actor's requests
// hold one clock timer between them instead of one each.

#include <actortrain/actors/core/send_seam.hpp>

// Last: CAF's test DSL defines macros (inject, expect) that clash with ordinary names.
#include "caf_test.hpp"

#include <chrono>
#include <map>
#include <memory>
#include <vector>

using namespace actortrain;
using namespace std::chrono_literals;

namespace {

using twice_atom = caf::atom_constant<caf::atom("twice")>;

// Answers x >= 0 with 2x; never answers a negative x.
caf::behavior doubler(caf::event_based_actor* self) {
  return {
    [self](twice_atom, int x) -> caf::result<int> {
      if (x >= 0) return 2 * x;
      self->make_response_promise();  // dropped undelivered: no reply, ever
      return caf::delegated<int>{};
    },
  };
}

// What each request of the requester ended with, by the value it sent.
struct outcomes {
  std::map<int, int> replies;
  std::map<int, std::vector<caf::error>> errors;
};

using ask_atom = caf::atom_constant<caf::atom("ask")>;

// Sends `x` through the seam with the timeout it is told, and records the outcome.
caf::behavior requester(caf::event_based_actor* self, std::shared_ptr<send_seam> seam, caf::actor dest,
                        std::shared_ptr<outcomes> out) {
  return {
    [=](ask_atom, int x, caf::timespan timeout) {
      seam->request(self, dest, timeout, twice_atom::value, x)
        .then([out, x](int y) { out->replies[x] = y; },
              [out, x](caf::error& e) { out->errors[x].push_back(e); });
    },
  };
}

struct watch_fixture : testing::fixture {
  std::shared_ptr<send_seam> seam = std::make_shared<send_seam>(sys, nullptr, /*watch_timeouts=*/true);
  std::shared_ptr<outcomes> out = std::make_shared<outcomes>();
  caf::actor dest = sys.spawn(doubler);
  caf::actor asker = sys.spawn(requester, seam, dest, out);

  void ask(int x, caf::timespan timeout) {
    caf::anon_send(asker, ask_atom::value, x, timeout);
    sched.run();
  }
  size_t timers() { return sched.clock().schedule().size(); }
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(seam_watch, watch_fixture)

BOOST_AUTO_TEST_CASE(answered_requests_share_one_timer_and_never_time_out) {
  for (int x = 0; x < 50; ++x) caf::anon_send(asker, ask_atom::value, x, caf::timespan{10s});
  sched.run();
  BOOST_TEST(out->replies.size() == 50u);
  BOOST_TEST(out->replies[7] == 14);
  BOOST_TEST(seam->watched(asker.id()) == 0u);
  // One timer for all 50 (CAF's own would have set 50).
  BOOST_TEST(timers() <= 1u);
  // Past every deadline: nothing answered fails after all.
  sched.advance_time(30s);
  sched.run();
  BOOST_TEST(out->errors.empty());
}

BOOST_AUTO_TEST_CASE(an_unanswered_request_times_out_at_its_deadline_once) {
  ask(-1, caf::timespan{10s});
  ask(-2, caf::timespan{10s});
  BOOST_TEST(seam->watched(asker.id()) == 2u);
  BOOST_TEST(timers() == 1u);
  sched.advance_time(9s);
  sched.run();
  BOOST_TEST(out->errors.empty());  // not before its deadline
  sched.advance_time(1s);
  sched.run();
  BOOST_REQUIRE(out->errors.count(-1) == 1u);
  BOOST_REQUIRE(out->errors.count(-2) == 1u);
  BOOST_TEST(out->errors[-1].size() == 1u);
  BOOST_TEST(out->errors[-2].size() == 1u);
  BOOST_TEST((out->errors[-1].front() == caf::sec::request_timeout));
  BOOST_TEST(seam->watched(asker.id()) == 0u);
  sched.advance_time(60s);
  sched.run();
  BOOST_TEST(out->errors[-1].size() == 1u);  // exactly once
  BOOST_TEST(timers() == 0u);
}

BOOST_AUTO_TEST_CASE(a_shorter_timeout_after_a_longer_one_fires_first) {
  ask(-1, caf::timespan{10s});
  ask(-2, caf::timespan{2s});
  ask(5, caf::timespan{1s});  // answered at once
  sched.advance_time(2s);
  sched.run();
  BOOST_TEST(out->errors.count(-2) == 1u);
  BOOST_TEST(out->errors.count(-1) == 0u);
  BOOST_TEST(out->errors.count(5) == 0u);
  BOOST_TEST(seam->watched(asker.id()) == 1u);
  sched.advance_time(8s);
  sched.run();
  BOOST_TEST(out->errors.count(-1) == 1u);
  BOOST_TEST(out->replies[5] == 10);
}

BOOST_AUTO_TEST_CASE(the_timer_is_set_again_for_the_next_deadline) {
  ask(-1, caf::timespan{2s});  // deadline 2 s: the timer
  sched.advance_time(1s);
  sched.run();
  ask(-2, caf::timespan{2s});  // deadline 3 s: no timer of its own
  BOOST_TEST(timers() == 1u);
  sched.advance_time(1s);
  sched.run();
  BOOST_TEST(out->errors.count(-1) == 1u);
  BOOST_TEST(out->errors.count(-2) == 0u);
  BOOST_TEST(timers() == 1u);  // set again, for -2
  sched.advance_time(1s);
  sched.run();
  BOOST_TEST(out->errors.count(-2) == 1u);
  BOOST_TEST(seam->watched(asker.id()) == 0u);
}

BOOST_AUTO_TEST_CASE(a_request_to_a_dead_actor_fails_and_is_forgotten) {
  caf::anon_send_exit(dest, caf::exit_reason::kill);
  sched.run();
  ask(1, caf::timespan{10s});
  BOOST_REQUIRE(out->errors.count(1) == 1u);
  BOOST_TEST((out->errors[1].front() != caf::sec::request_timeout));
  BOOST_TEST(seam->watched(asker.id()) == 0u);
}

// A one-shot sender (no behaviour): CAF keeps it alive while it awaits a response, and
// its timer is one; the timer is settled with its last request.
BOOST_AUTO_TEST_CASE(a_sender_without_a_behaviour_ends_with_its_last_reply) {
  auto running = sys.registry().running();
  auto sender = sys.spawn([s = seam, d = dest, o = out](caf::event_based_actor* self) {
    s->request(self, d, caf::timespan{10s}, twice_atom::value, 21)
      .then([o](int y) { o->replies[21] = y; }, [o](caf::error& e) { o->errors[21].push_back(e); });
  });
  BOOST_TEST(sys.registry().running() == running + 1);
  sched.run();
  BOOST_TEST(out->replies[21] == 42);
  BOOST_TEST(sys.registry().running() == running);  // ended, not held until 10 s
  BOOST_TEST(seam->watched(sender.id()) == 0u);
}

// The seam's owners let it go while a request is open: the request still times out (its
// timer keeps the seam), and the sender ends.
BOOST_AUTO_TEST_CASE(an_open_request_times_out_after_the_seam_is_dropped) {
  auto running = sys.registry().running();
  std::weak_ptr<send_seam> gone = seam;
  sys.spawn([s = seam, d = dest, o = out](caf::event_based_actor* self) {
    s->request(self, d, caf::timespan{10s}, twice_atom::value, -5)
      .then([o](int y) { o->replies[-5] = y; }, [o](caf::error& e) { o->errors[-5].push_back(e); });
  });
  sched.run();
  caf::anon_send_exit(asker, caf::exit_reason::user_shutdown);  // it holds the seam too
  sched.run();
  seam.reset();
  sched.advance_time(10s);
  sched.run();
  BOOST_REQUIRE(out->errors.count(-5) == 1u);
  BOOST_TEST((out->errors[-5].front() == caf::sec::request_timeout));
  BOOST_TEST(sys.registry().running() == running - 1);  // the sender and the asker ended
  BOOST_TEST(gone.expired());                            // and the seam with them
}

BOOST_AUTO_TEST_SUITE_END()

// Without the watch the seam is CAF's request: a timer per request.
BOOST_FIXTURE_TEST_CASE(without_the_watch_each_request_has_its_own_timer, testing::fixture) {
  auto seam = std::make_shared<send_seam>(sys);
  auto out = std::make_shared<outcomes>();
  auto dest = sys.spawn(doubler);
  auto asker = sys.spawn(requester, seam, dest, out);
  for (int x = 1; x <= 5; ++x) caf::anon_send(asker, ask_atom::value, -x, caf::timespan{10s});
  sched.run();
  BOOST_TEST(sched.clock().schedule().size() == 5u);
  BOOST_TEST(seam->watched(asker.id()) == 0u);
  sched.advance_time(10s);
  sched.run();
  BOOST_TEST(out->errors.size() == 5u);
}
