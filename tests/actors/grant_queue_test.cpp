// The grants of a run of scheduled steps (coordinator/grant_queue.hpp), alone: tickets in
// the order granted, a repeat skipped, a gap refused, a step that found no batch first
// again, and a roll-back that opens what was open at the checkpoint plus every later grant.
#include <boost/test/unit_test.hpp>

#include "../../actors/src/coordinator/grant_queue.hpp"

using actortrain::grant_queue;

namespace {

std::vector<uint64_t> drain(grant_queue& q) {
  std::vector<uint64_t> out;
  while (auto t = q.front()) {
    out.push_back(*t);
    q.pop();
  }
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(tickets_come_out_in_the_order_granted_with_what_each_asks) {
  grant_queue q;
  q.add(1, {0, 2}, {-1, 1}, false);
  q.add(3, {1}, {0}, false);
  BOOST_TEST(q.granted() == 3u);
  BOOST_TEST(q.at(2).step_fn == 2u);
  BOOST_TEST(q.at(2).replica == 1);
  BOOST_TEST(q.at(3).replica == 0);
  BOOST_TEST(!q.exhausted());
  BOOST_TEST(drain(q) == (std::vector<uint64_t>{1, 2, 3}));
  BOOST_TEST(!q.exhausted());  // more may come
  q.add(4, {}, {}, true);
  BOOST_TEST(q.exhausted());
  BOOST_CHECK_THROW(q.add(4, {0}, {-1}, false), std::invalid_argument);  // nothing after the end
  BOOST_CHECK_NO_THROW(q.add(1, {0, 2, 1}, {-1, 1, 0}, true));           // the same again: known
  BOOST_TEST(q.granted() == 3u);
}

BOOST_AUTO_TEST_CASE(a_repeated_grant_is_skipped_and_a_gap_refused) {
  grant_queue q;
  q.add(1, {0, 0}, {-1, -1}, false);
  q.add(1, {0, 0, 0}, {-1, -1, -1}, false);  // sent again with one more (after a take-over)
  BOOST_TEST(q.granted() == 3u);
  BOOST_TEST(drain(q) == (std::vector<uint64_t>{1, 2, 3}));
  BOOST_CHECK_THROW(q.add(5, {0}, {-1}, false), std::invalid_argument);
  BOOST_CHECK_THROW(q.add(4, {0, 1}, {-1}, false), std::invalid_argument);
  BOOST_CHECK_THROW(q.add(0, {0}, {-1}, false), std::invalid_argument);
  BOOST_TEST(q.granted() == 3u);
}

BOOST_AUTO_TEST_CASE(a_step_that_found_no_batch_goes_first_again) {
  grant_queue q;
  q.add(1, {0, 0, 0}, {-1, -1, -1}, false);
  q.pop();
  q.pop();
  q.put_back(2);
  BOOST_TEST(drain(q) == (std::vector<uint64_t>{2, 3}));
}

BOOST_AUTO_TEST_CASE(a_roll_back_opens_what_was_open_then_and_every_later_grant) {
  grant_queue q;
  q.add(1, {0, 0, 0, 0}, {-1, -1, -1, -1}, false);
  q.pop();  // 1 dispatched and applied before the checkpoint
  std::vector<uint64_t> open_then(q.open().begin(), q.open().end());
  auto granted_then = q.granted();
  q.pop();
  q.pop();  // 2 and 3 dispatched after it
  q.add(5, {0, 0}, {-1, -1}, true);
  q.restore(open_then, granted_then);
  BOOST_TEST(drain(q) == (std::vector<uint64_t>{2, 3, 4, 5, 6}));
  BOOST_TEST(q.exhausted());
  // The run's start (nothing granted then): every ticket is open again.
  q.restore({}, 0);
  BOOST_TEST(drain(q) == (std::vector<uint64_t>{1, 2, 3, 4, 5, 6}));
  // A checkpoint from another run's grants is refused.
  BOOST_CHECK_THROW(q.restore({}, 7), std::runtime_error);
  BOOST_CHECK_THROW(q.restore({9}, 6), std::runtime_error);
}
