// The coordinator's work in hand alone, without actors (actors/src/coordinator/
// step_queue.hpp): answers matched by task id, speculative twins, fence rounds that a
// newer loss or a restore makes void, the re-queue order and who may take a re-queued
// task, failures and suspects, and the watermark. The cases the fault-tolerance defects
// of issue 16 came from are here: a late answer of a superseded task, the fence of a
// failed run acknowledged after the next run began, a re-queue after a fence.

#include <boost/test/unit_test.hpp>

#include "../../actors/src/coordinator/step_queue.hpp"

#include <string>
#include <vector>

namespace at = actortrain;

namespace {

struct task {
  std::vector<at::step_id> steps;
  std::string tag;
};

using queue = at::step_queue<task>;

task steps_of(uint32_t pipeline, uint64_t first, int n, std::string tag = "") {
  task t;
  for (int k = 0; k < n; ++k) t.steps.push_back(at::step_id{1, pipeline, first + static_cast<uint64_t>(k)});
  t.tag = std::move(tag);
  return t;
}

queue::pending pending(task t, uint64_t id, bool eval = false) {
  queue::pending p;
  p.task = std::move(t);
  p.id = id;
  p.eval = eval;
  return p;
}

}  // namespace

BOOST_AUTO_TEST_CASE(answers_are_matched_by_task_id_not_by_step) {
  queue q;
  // An end-of-data probe at position 8 (task 1) and, after the epoch turned, the next
  // epoch's step at position 8 (task 2): the late answer of task 1 settles task 1 only.
  q.sent(0, pending(steps_of(0, 8, 1, "probe"), 1));
  q.sent(0, pending(steps_of(0, 8, 1, "next epoch"), 2));
  BOOST_TEST(q.in_flight() == 2u);
  auto late = q.take(0, 1);
  BOOST_REQUIRE(late);
  BOOST_TEST(late->task.tag == "probe");
  BOOST_TEST(q.in_flight() == 1u);
  BOOST_TEST(!q.take(0, 1));  // answered once
  BOOST_TEST(!q.take(1, 2));  // another worker's answer for it is stale
  BOOST_REQUIRE(q.take(0, 2));
  BOOST_TEST(q.nothing_in_flight());
  BOOST_TEST(q.idle());
}

BOOST_AUTO_TEST_CASE(a_speculated_task_has_twins_until_one_answers) {
  queue q;
  q.sent(0, pending(steps_of(0, 0, 1), 7));
  auto [slow, owner] = q.straggler(7);
  BOOST_REQUIRE(slow);
  BOOST_TEST(owner == 0u);
  slow->speculated = true;
  auto copy = *slow;
  q.sent(2, copy);
  BOOST_TEST(!q.straggler(7).first);  // both copies are speculated: none is re-run again
  auto first = q.take(2, 7);
  BOOST_REQUIRE(first);
  BOOST_TEST(q.has_twin(7));
  BOOST_TEST((q.drop_twins(7) == std::vector<uint32_t>{0}));
  BOOST_TEST(!q.has_twin(7));
  BOOST_TEST(!q.take(0, 7));  // the slow copy's answer, when it comes, is stale
}

BOOST_AUTO_TEST_CASE(a_fence_round_releases_its_tasks_once_and_only_while_current) {
  queue q;
  q.sent(1, pending(steps_of(0, 4, 2, "a"), 1));
  q.sent(1, pending(steps_of(1, 0, 1, "eval"), 2, true));
  auto lost = q.take_all(1);
  BOOST_TEST(lost.size() == 2u);
  BOOST_TEST(q.nothing_in_flight());
  auto r1 = q.fence(1, {lost[0].task});
  BOOST_TEST(!q.idle());  // held while fenced: the phase stays open
  // The same worker is lost again (its replacement died): a newer round supersedes r1.
  auto r2 = q.fence(1, {steps_of(0, 10, 1, "b")});
  BOOST_TEST(!q.fence_current(1, r1));
  BOOST_TEST(!q.release(1, r1));  // the older round's acknowledgements release nothing
  auto released = q.release(1, r2);
  BOOST_REQUIRE(released);
  BOOST_TEST(released->size() == 2u);  // both losses' tasks, in order
  BOOST_TEST((*released)[0].tag == "a");
  BOOST_TEST((*released)[1].tag == "b");
  BOOST_TEST(!q.release(1, r2));  // once
}

BOOST_AUTO_TEST_CASE(a_restore_voids_pending_fences_so_a_failed_runs_acks_requeue_nothing) {
  queue q;
  auto r = q.fence(0, {steps_of(0, 0, 1)});
  q.requeue(steps_of(1, 3, 1));
  q.sent(1, pending(steps_of(2, 5, 1), 9));
  q.forget_work();  // the run failed, or every shard was restored
  BOOST_TEST(q.idle());
  BOOST_TEST(!q.release(0, r));  // its fence acknowledgements arrive in the next run
  BOOST_TEST(!q.take(1, 9));     // and so does the late answer
  // A new fence of the same worker in the new run gets a new round id.
  auto next = q.fence(0, {steps_of(0, 0, 1)});
  BOOST_TEST(next != r);
  BOOST_TEST(q.release(0, next).has_value());
}

BOOST_AUTO_TEST_CASE(requeued_tasks_go_in_order_to_whoever_may_take_them) {
  queue q;
  q.requeue(steps_of(0, 0, 1, "first"));
  q.requeue(steps_of(1, 0, 1, "second"));
  q.requeue(steps_of(2, 0, 1, "third"));
  std::vector<std::string> seen;
  auto t = q.take_requeued([&](const task& x) {
    seen.push_back(x.tag);
    return x.tag == "second";
  });
  BOOST_REQUIRE(t);
  BOOST_TEST(t->tag == "second");
  BOOST_TEST((seen == std::vector<std::string>{"first", "second"}));
  auto u = q.take_requeued([](const task&) { return true; });
  BOOST_TEST(u->tag == "first");
  BOOST_TEST(!q.take_requeued([](const task&) { return false; }));
  BOOST_TEST(!q.idle());  // "third" still waits
}

BOOST_AUTO_TEST_CASE(a_failed_step_is_suspect_and_avoids_the_worker_it_failed_on) {
  queue q;
  auto t = steps_of(0, 3, 2);
  BOOST_TEST(!q.suspect(t));
  BOOST_TEST(q.failed(at::step_id{1, 0, 4}, 1, 1) == 1);
  BOOST_TEST(q.suspect(t));  // a later step of the task failed
  BOOST_TEST(!q.suspect(steps_of(0, 5, 1)));
  // The first step failed on worker 1, generation 1.
  BOOST_TEST(q.failed(at::step_id{1, 0, 3}, 1, 1) == 1);
  BOOST_TEST(q.failed(at::step_id{1, 0, 3}, 1, 1) == 2);  // attempts count on
  std::vector<queue::worker_generation> alive{{0, 1}, {1, 1}};
  BOOST_TEST(q.avoids(t, {1, 1}, alive));    // worker 0 can take it
  BOOST_TEST(!q.avoids(t, {0, 1}, alive));
  BOOST_TEST(!q.avoids(t, {1, 1}, {{1, 1}}));  // alone: it goes back, or never runs
  BOOST_TEST(!q.avoids(t, {1, 2}, alive));   // the restarted worker is another generation
  q.forget_failures();                        // a new run
  BOOST_TEST(!q.suspect(t));
  BOOST_TEST(!q.avoids(t, {1, 1}, alive));
  BOOST_TEST(q.failed(at::step_id{1, 0, 3}, 1, 1) == 1);
}

BOOST_AUTO_TEST_CASE(the_watermark_stays_below_every_training_step_not_applied) {
  queue q;
  // Dispatched up to 10 in pipeline 0, 6 in pipeline 1, 3 in pipeline 2.
  std::vector<uint64_t> next{10, 6, 3};
  BOOST_TEST((q.watermark(next) == next));
  q.sent(0, pending(steps_of(0, 8, 2), 1));        // in flight
  q.sent(1, pending(steps_of(1, 0, 1), 2, true));  // evaluation: never applied, ignored
  q.requeue(steps_of(1, 4, 1));                    // re-queued
  q.fence(2, {steps_of(2, 1, 2)});                 // being fenced
  BOOST_TEST((q.watermark(next) == std::vector<uint64_t>{8, 4, 1}));
  q.take(0, 1);
  BOOST_TEST((q.watermark(next) == std::vector<uint64_t>{10, 4, 1}));
  // A step of a pipeline the run does not have moves nothing.
  q.requeue(steps_of(7, 0, 1));
  BOOST_TEST((q.watermark(next) == std::vector<uint64_t>{10, 4, 1}));
}
