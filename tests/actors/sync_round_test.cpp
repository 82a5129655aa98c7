// The dispatch order and the synchronous round alone, without actors
// (actors/src/coordinator/sync_round.hpp): the oldest unapplied index the
// bounded-staleness gate sees, when a round may close, its manifest, the
// example-weighted loss, and a close made void by a restore or a failed run.

#include <boost/test/unit_test.hpp>

#include "../../actors/src/coordinator/sync_round.hpp"

#include <vector>

namespace at = actortrain;

namespace {

struct result {
  double loss = 0;
  int64_t example_count = 0;
};

using round = at::sync_round<result>;

at::step_id step(uint32_t pipeline, uint64_t position) { return at::step_id{1, pipeline, position}; }

}  // namespace

BOOST_AUTO_TEST_CASE(the_oldest_unapplied_index_follows_the_applied_steps) {
  round r;
  BOOST_TEST(r.dispatched() == 0u);
  BOOST_TEST(r.oldest_unapplied() == 0u);
  r.dispatch(step(0, 0), false);  // index 0
  r.dispatch(step(1, 0), false);  // index 1
  r.dispatch(step(0, 1), false);  // index 2
  BOOST_TEST(r.dispatched() == 3u);
  BOOST_TEST(r.oldest_unapplied() == 0u);
  r.settle(step(1, 0));
  BOOST_TEST(r.oldest_unapplied() == 0u);  // index 0 still out
  r.settle(step(0, 0));
  BOOST_TEST(r.oldest_unapplied() == 2u);
  r.settle(step(0, 0));  // twice: nothing
  r.past_the_data(step(0, 1));
  BOOST_TEST(r.oldest_unapplied() == 3u);  // none out: the next index
  BOOST_TEST(r.members() == 0u);           // without rounds nothing joins one
}

BOOST_AUTO_TEST_CASE(a_round_closes_when_full_and_answered_or_when_no_more_steps_can_join) {
  round r;
  r.dispatch(step(0, 0), true);
  r.dispatch(step(1, 0), true);
  BOOST_TEST(r.members() == 2u);
  BOOST_TEST(!r.ready(3, false));  // not answered
  BOOST_TEST(r.answered(step(0, 0), {0.5, 10}));
  BOOST_TEST(r.answered(step(1, 0), {1.0, 30}));
  BOOST_TEST(!r.ready(3, false));  // 2 of 3, and more may join
  BOOST_TEST(r.ready(3, true));    // the epoch has no more steps: a short round
  BOOST_TEST(r.ready(2, false));
  BOOST_TEST(!r.ready(0, true));   // no rounds at all
  BOOST_TEST(!r.answered(step(2, 0), {9.0, 1}));  // not a member
  BOOST_TEST(r.answered(step(0, 0), {7.0, 99}));  // a re-run's answer: the first one counts
  auto m = r.close();
  BOOST_TEST(r.closing());
  BOOST_TEST(!r.ready(2, true));  // its manifest is out
  BOOST_TEST(m.number == 1u);
  BOOST_TEST((m.steps == std::vector<at::step_id>{step(0, 0), step(1, 0)}));
  BOOST_TEST(m.example_count == 40);
  BOOST_TEST(r.current(m.attempt));
  auto a = r.applied();
  BOOST_TEST(a.number == 1u);
  BOOST_TEST(a.results.size() == 2u);
  BOOST_TEST(a.loss == (0.5 * 10 + 1.0 * 30) / 40, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(r.number() == 2u);
  BOOST_TEST(r.empty());
  BOOST_TEST(r.oldest_unapplied() == r.dispatched());  // its steps left the window
}

BOOST_AUTO_TEST_CASE(a_step_past_the_data_leaves_the_round) {
  round r;
  r.dispatch(step(0, 7), true);
  r.dispatch(step(1, 7), true);
  r.answered(step(0, 7), {1.0, 4});
  BOOST_TEST(!r.ready(2, false));
  r.past_the_data(step(1, 7));  // an end-of-data probe
  BOOST_TEST(r.members() == 1u);
  BOOST_TEST(r.ready(2, true));
}

BOOST_AUTO_TEST_CASE(forgetting_voids_a_close_in_progress) {
  round r;
  r.continue_at(5);  // a restored run
  r.dispatch(step(0, 0), true);
  r.answered(step(0, 0), {1.0, 1});
  auto m = r.close();
  BOOST_TEST(m.number == 5u);
  r.forget();  // a restore, or the run failed
  BOOST_TEST(!r.current(m.attempt));  // the shards' late answers to that manifest count for nothing
  BOOST_TEST(r.empty());
  BOOST_TEST(r.oldest_unapplied() == r.dispatched());
  BOOST_TEST(r.number() == 5u);  // the round is re-run under its number
  // The next close is another attempt.
  r.dispatch(step(0, 0), true);
  r.answered(step(0, 0), {1.0, 1});
  BOOST_TEST(r.close().attempt != m.attempt);
}
