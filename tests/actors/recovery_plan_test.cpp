// The coordinator's recovery planner alone, without actors
// (actors/src/coordinator/recovery_plan.hpp), over real checkpoints in a memory file
// system: a roll-back stays inside its run (its own checkpoints, or the one marked as its
// start), resuming continues the newest run even past a corrupt checkpoint, a checkpoint
// that does not read back is skipped and named, what happens when none serves in each
// phase, which recovery each phase starts, and epochs above everything the shards have
// seen (late answers under an older coordinator epoch included).

#include <boost/test/unit_test.hpp>

#include "../../actors/src/coordinator/recovery_plan.hpp"
#include "../../actors/src/coordinator/run_state.hpp"

#include <actortrain/model/checkpoint/fault_file_system.hpp>
#include <actortrain/model/checkpoint/memory_file_system.hpp>

#include <ostream>
#include <string>
#include <vector>

using namespace actortrain;
using nlohmann::json;

// The planner's answers by name, so a failed check says which it got.
namespace actortrain {
std::ostream& operator<<(std::ostream& os, when_none w) {
  const char* names[] = {"wait_for_fit", "initial_values", "fail_run"};
  return os << names[static_cast<int>(w)];
}
std::ostream& operator<<(std::ostream& os, recovery_kind k) {
  const char* names[] = {"resume", "wait_for_fit", "restore_values", "start_state", "roll_back"};
  return os << names[static_cast<int>(k)];
}
}  // namespace actortrain

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A directory /ck of checkpoints of one 4x2 variable "w", written whole (one partition)
// and restored into a placement of two shards (two partitions), so a pick is cut to it.
struct checkpoints_fixture {
  model::memory_file_system fs;
  std::vector<model::variable_spec> specs{{"w", {4, 2}, {}, false}};
  model::fixed_shards two{2};
  model::placement pl = model::place(specs, &two, 2);
  const std::string dir = "/ck";

  // The run state a checkpoint of run `run` keeps, as the coordinator writes it.
  static json run_extra(uint64_t run, uint64_t coordinator_epoch = 1) {
    run_state s;
    s.run = run;
    s.coordinator_epoch = coordinator_epoch;
    s.watermark = {run * 100};
    return to_json(s);
  }

  // Commits a checkpoint at `step` whose values are all `step` and whose manifest's
  // extra is `extra`; returns its path.
  std::string write(int64_t step, json extra) {
    model::checkpoint_data d;
    d.step = step;
    model::variable_data v{"w", model::shape2{4, 2}, {}};
    model::partition_data p;
    p.row_begin = 0;
    p.row_end = 4;
    p.values = model::matrix::Constant(4, 2, static_cast<float>(step));
    v.partitions.push_back(std::move(p));
    d.variables.push_back(std::move(v));
    d.extra = std::move(extra);
    return model::write_checkpoint(fs, dir, d);
  }

  // Flips a byte of the checkpoint's array: its manifest still lists it, its CRC fails.
  void corrupt(const std::string& path) {
    std::string bytes;
    BOOST_TEST_REQUIRE(fs.read_file(path + "/w.part0.npy", bytes).ok());
    bytes[bytes.size() - 1] ^= 0x10;
    BOOST_TEST_REQUIRE(fs.write_file(path + "/w.part0.npy", bytes).ok());
  }

  std::optional<restore_source> pick(restore_kind kind, uint64_t run, std::vector<std::string>& skipped) {
    return pick_checkpoint(fs, dir, pl, kind, run, skipped);
  }
  std::optional<restore_source> pick(restore_kind kind, uint64_t run) {
    std::vector<std::string> skipped;
    return pick(kind, run, skipped);
  }
};

// A worker as the coordinator keeps it, as far as the fences go.
struct worker {
  uint32_t id = 0;
  uint64_t generation = 1;
  bool alive = true;
};

fence epochs(uint64_t coordinator_epoch, uint64_t recovery_epoch) {
  fence f;
  f.coordinator_epoch = coordinator_epoch;
  f.recovery_epoch = recovery_epoch;
  return f;
}

recovery_view view(run_stage stage, bool committed, bool has_checkpoints, uint64_t steps = 10, bool resuming = false) {
  recovery_view v;
  v.stage = stage;
  v.run_start_committed = committed;
  v.has_checkpoints = has_checkpoints;
  v.steps_total = steps;
  v.resuming = resuming;
  return v;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(recovery_plan)

// -- run boundaries ----------------------------------------------------------------------

BOOST_FIXTURE_TEST_CASE(a_roll_back_takes_the_newest_checkpoint_of_its_own_run_cut_to_the_placement,
                        checkpoints_fixture) {
  write(10, run_extra(1));
  write(20, run_extra(2));
  auto newest_of_2 = write(30, run_extra(2));
  write(40, run_extra(3));
  auto src = pick(restore_kind::this_run, 2);
  BOOST_TEST_REQUIRE(src.has_value());
  BOOST_TEST(src->path == newest_of_2);
  BOOST_TEST(src->data.step == 30);
  BOOST_TEST(src->state.at("run").get<uint64_t>() == 2u);
  BOOST_TEST(src->state.at("watermark") == json::array({200}));
  // Cut to two shards' partitions, values intact.
  BOOST_TEST_REQUIRE(src->data.variables.size() == 1u);
  BOOST_TEST_REQUIRE(src->data.variables[0].partitions.size() == 2u);
  BOOST_TEST(src->data.variables[0].partitions[1].row_begin == 2);
  BOOST_TEST(src->data.variables[0].partitions[1].values(1, 1) == 30.0f);
  // Run 1's own checkpoint is older than every one of run 2 and 3, and still the one it gets.
  auto first = pick(restore_kind::this_run, 1);
  BOOST_TEST_REQUIRE(first.has_value());
  BOOST_TEST(first->data.step == 10);
}

BOOST_FIXTURE_TEST_CASE(a_checkpoint_marked_as_the_runs_start_serves_it_with_the_starting_state,
                        checkpoints_fixture) {
  // Run 1's final checkpoint, marked as run 2's start (its manifest gained run 2's state).
  auto extra = run_extra(1);
  extra["run_starts"] = json::array({run_extra(2, 3)});
  auto path = write(10, extra);
  auto src = pick(restore_kind::this_run, 2);
  BOOST_TEST_REQUIRE(src.has_value());
  BOOST_TEST(src->path == path);
  BOOST_TEST(src->state.at("run").get<uint64_t>() == 2u);  // run 2's state, not run 1's
  BOOST_TEST(src->state.at("coordinator_epoch").get<uint64_t>() == 3u);
  // Run 1 still finds its own state there, and values take the manifest's extra as it is.
  BOOST_TEST(pick(restore_kind::this_run, 1)->state.at("run").get<uint64_t>() == 1u);
  BOOST_TEST(pick(restore_kind::values, 7)->state == extra);
}

BOOST_FIXTURE_TEST_CASE(an_earlier_runs_checkpoint_does_not_serve_a_roll_back, checkpoints_fixture) {
  write(10, run_extra(1));
  write(20, run_extra(1));
  BOOST_TEST(!pick(restore_kind::this_run, 2).has_value());
  auto plan = plan_restore(fs, dir, pl, restore_kind::this_run, 2, run_stage::running);
  BOOST_TEST(!plan.source.has_value());
  BOOST_TEST(plan.skipped.empty());
  BOOST_TEST(plan.none == when_none::fail_run);
  BOOST_TEST(plan.problem == "no committed checkpoint under /ck of run 2");
}

BOOST_FIXTURE_TEST_CASE(resuming_continues_the_newest_run_and_never_falls_back_into_an_earlier_one,
                        checkpoints_fixture) {
  write(10, run_extra(1));
  auto newest = write(20, run_extra(2));
  // Whole: the newest run's newest checkpoint.
  auto src = pick(restore_kind::newest, 0);
  BOOST_TEST_REQUIRE(src.has_value());
  BOOST_TEST(src->path == newest);
  // Corrupt: run 2 has no other checkpoint, and run 1's does not stand in for it.
  corrupt(newest);
  std::vector<std::string> skipped;
  BOOST_TEST(!pick(restore_kind::newest, 0, skipped).has_value());
  BOOST_TEST_REQUIRE(skipped.size() == 1u);
  BOOST_TEST(contains(skipped[0], newest + ": "), skipped[0]);
  auto plan = plan_restore(fs, dir, pl, restore_kind::newest, 0, run_stage::starting);
  BOOST_TEST(plan.none == when_none::fail_run);
  BOOST_TEST(contains(plan.problem, "no checkpoint under /ck validates: " + newest + ": "), plan.problem);
  // An older good checkpoint of run 2 is where it falls back to.
  auto older = write(15, run_extra(2));
  src = pick(restore_kind::newest, 0);
  BOOST_TEST_REQUIRE(src.has_value());
  BOOST_TEST(src->path == older);
  BOOST_TEST(src->state.at("run").get<uint64_t>() == 2u);
}

BOOST_FIXTURE_TEST_CASE(resuming_past_a_corrupt_checkpoint_lands_on_the_runs_marked_start, checkpoints_fixture) {
  auto extra = run_extra(1);
  extra["run_starts"] = json::array({run_extra(2)});
  auto start = write(10, extra);
  corrupt(write(20, run_extra(2)));
  auto src = pick(restore_kind::newest, 0);
  BOOST_TEST_REQUIRE(src.has_value());
  BOOST_TEST(src->path == start);
  BOOST_TEST(src->state.at("run").get<uint64_t>() == 2u);  // run 2's starting state, not run 1's end
}

// -- checkpoints that do not read back ---------------------------------------------------

BOOST_FIXTURE_TEST_CASE(a_checkpoint_that_does_not_read_back_is_skipped_and_named, checkpoints_fixture) {
  auto good = write(10, run_extra(1));
  auto crc = write(20, run_extra(1));
  corrupt(crc);
  auto mistyped = run_extra(1);
  mistyped["run"] = "one";  // its run state does not say which run
  auto bad_state = write(30, mistyped);
  auto unreadable = write(40, run_extra(1));
  model::fault_file_system faulty(fs);
  faulty.fail_path(model::fault_file_system::op::read, unreadable + "/w.part0.npy");
  std::vector<std::string> skipped;
  auto src = pick_checkpoint(faulty, dir, pl, restore_kind::this_run, 1, skipped);
  BOOST_TEST_REQUIRE(src.has_value());
  BOOST_TEST(src->path == good);
  // Newest first, each with its path and its fault.
  BOOST_TEST_REQUIRE(skipped.size() == 3u);
  BOOST_TEST(contains(skipped[0], unreadable + ": "), skipped[0]);
  BOOST_TEST(contains(skipped[0], "w.part0.npy"), skipped[0]);
  BOOST_TEST(contains(skipped[1], bad_state + ": "), skipped[1]);
  BOOST_TEST(contains(skipped[2], crc + ": "), skipped[2]);
  BOOST_TEST(contains(skipped[2], "CRC"), skipped[2]);
  // The plan says the same, and has nothing to decide without a source.
  auto plan = plan_restore(faulty, dir, pl, restore_kind::this_run, 1, run_stage::running);
  BOOST_TEST_REQUIRE(plan.source.has_value());
  BOOST_TEST(plan.source->path == good);
  BOOST_TEST(plan.skipped == skipped);
  BOOST_TEST(plan.problem.empty());
}

// -- when no checkpoint serves -----------------------------------------------------------

BOOST_FIXTURE_TEST_CASE(without_a_checkpoint_each_phase_does_its_own_thing, checkpoints_fixture) {
  // Nothing committed.
  auto between = plan_restore(fs, dir, pl, restore_kind::values, 1, run_stage::between_runs);
  BOOST_TEST(!between.source.has_value());
  BOOST_TEST(between.none == when_none::wait_for_fit);
  BOOST_TEST(between.problem == "no committed checkpoint under /ck");
  BOOST_TEST(plan_restore(fs, dir, pl, restore_kind::values, 1, run_stage::starting).none == when_none::initial_values);
  BOOST_TEST(plan_restore(fs, dir, pl, restore_kind::values, 1, run_stage::running).none == when_none::fail_run);
  // Only a start from values may fall back to the initial values: a resumed run may not.
  auto resumed = plan_restore(fs, dir, pl, restore_kind::newest, 1, run_stage::starting);
  BOOST_TEST(resumed.none == when_none::fail_run);
  BOOST_TEST(resumed.problem == "no committed checkpoint under /ck");
  auto rolled = plan_restore(fs, dir, pl, restore_kind::this_run, 3, run_stage::running);
  BOOST_TEST(rolled.none == when_none::fail_run);
  BOOST_TEST(rolled.problem == "no committed checkpoint under /ck of run 3");
  // Between runs even a roll-back's kind waits for the next fit.
  BOOST_TEST(plan_restore(fs, dir, pl, restore_kind::this_run, 3, run_stage::between_runs).none ==
             when_none::wait_for_fit);
  // Only corrupt ones: the problem names each and its fault.
  auto a = write(10, run_extra(1));
  auto b = write(20, run_extra(1));
  corrupt(a);
  corrupt(b);
  auto plan = plan_restore(fs, dir, pl, restore_kind::values, 1, run_stage::starting);
  BOOST_TEST(plan.none == when_none::initial_values);
  BOOST_TEST(plan.skipped.size() == 2u);
  BOOST_TEST(contains(plan.problem, "no checkpoint under /ck validates: " + b + ": "), plan.problem);
  BOOST_TEST(contains(plan.problem, "; " + a + ": "), plan.problem);
  // A directory that cannot be listed: the problem is why.
  model::fault_file_system faulty(fs);
  faulty.fail_path(model::fault_file_system::op::list, dir);
  auto unlisted = plan_restore(faulty, dir, pl, restore_kind::this_run, 1, run_stage::running);
  BOOST_TEST(!unlisted.source.has_value());
  BOOST_TEST(unlisted.none == when_none::fail_run);
  BOOST_TEST(contains(unlisted.problem, "/ck"), unlisted.problem);
  BOOST_TEST(!contains(unlisted.problem, "no committed checkpoint"), unlisted.problem);
}

// -- which recovery ----------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(each_phase_starts_its_own_recovery) {
  // Resuming goes first, whatever else holds.
  BOOST_TEST(recovery_for(view(run_stage::starting, false, true, 10, true)) == recovery_kind::resume);
  BOOST_TEST(recovery_for(view(run_stage::running, true, true, 10, true)) == recovery_kind::resume);
  // Between runs: the newest good checkpoint's values, or nothing until the next fit.
  BOOST_TEST(recovery_for(view(run_stage::between_runs, true, true)) == recovery_kind::restore_values);
  BOOST_TEST(recovery_for(view(run_stage::between_runs, true, false)) == recovery_kind::wait_for_fit);
  // Before the run's start is committed: the state it starts from.
  BOOST_TEST(recovery_for(view(run_stage::starting, false, false)) == recovery_kind::start_state);
  BOOST_TEST(recovery_for(view(run_stage::starting, false, true)) == recovery_kind::start_state);
  BOOST_TEST(recovery_for(view(run_stage::running, false, true)) == recovery_kind::start_state);
  // After it: a roll-back within the run.
  BOOST_TEST(recovery_for(view(run_stage::running, true, true)) == recovery_kind::roll_back);
}

BOOST_AUTO_TEST_CASE(a_run_that_applied_steps_with_nothing_to_roll_back_to_cannot_go_on) {
  BOOST_TEST(loss_ends_run(view(run_stage::running, true, false, 10)));
  BOOST_TEST(loss_ends_run(view(run_stage::starting, false, false, 10)));
  BOOST_TEST(!loss_ends_run(view(run_stage::running, true, true, 10)));      // it rolls back
  BOOST_TEST(!loss_ends_run(view(run_stage::starting, false, false, 0)));    // nothing applied: initial values
  BOOST_TEST(!loss_ends_run(view(run_stage::between_runs, false, false, 10)));  // no run to end
}

// -- which epochs ------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(a_roll_back_takes_a_recovery_epoch_above_every_one_seen_under_its_coordinator_epoch) {
  auto seen = fences_seen::before_restore(json{{"coordinator_epoch", 9}}, /*takeover=*/false);
  BOOST_TEST(seen.newest().coordinator_epoch == 0u);  // the checkpoint's epoch is no roll-back's concern
  seen.add(epochs(2, 7), {});
  // A late answer: a higher recovery epoch under an older coordinator epoch is older.
  seen.add(epochs(1, 9), {});
  BOOST_TEST(seen.newest().coordinator_epoch == 2u);
  BOOST_TEST(seen.newest().recovery_epoch == 7u);
  auto next = epochs_after_restore(epochs(2, 5), seen, false);
  BOOST_TEST(next.coordinator_epoch == 2u);
  BOOST_TEST(next.recovery_epoch == 8u);
  // Above its own when the shards saw less.
  BOOST_TEST(epochs_after_restore(epochs(2, 12), seen, false).recovery_epoch == 13u);
  // Only the late answer: it does not raise ours.
  fences_seen late;
  late.add(epochs(1, 9), {});
  BOOST_TEST(epochs_after_restore(epochs(2, 5), late, false).recovery_epoch == 6u);
  // Nothing seen: one above its own.
  BOOST_TEST(epochs_after_restore(epochs(2, 5), fences_seen{}, false).recovery_epoch == 6u);
}

BOOST_AUTO_TEST_CASE(a_takeover_takes_a_coordinator_epoch_above_the_checkpoints_and_every_shards) {
  // The checkpoint was written under coordinator epoch 4; a shard has seen 5.
  auto seen = fences_seen::before_restore(json{{"coordinator_epoch", 4}}, /*takeover=*/true);
  BOOST_TEST(seen.newest().coordinator_epoch == 4u);
  BOOST_TEST(epochs_after_restore(epochs(1, 3), seen, true).coordinator_epoch == 5u);
  seen.add(epochs(3, 20), {});  // older than the checkpoint's: changes nothing
  seen.add(epochs(5, 2), {});
  auto next = epochs_after_restore(epochs(1, 3), seen, true);
  BOOST_TEST(next.coordinator_epoch == 6u);
  BOOST_TEST(next.recovery_epoch == 0u);
  // Its own, when above everything seen.
  BOOST_TEST(epochs_after_restore(epochs(9, 3), seen, true).coordinator_epoch == 9u);
  // A run state without one: above the shards' only.
  auto bare = fences_seen::before_restore(json::object(), true);
  BOOST_TEST(bare.newest().coordinator_epoch == 0u);
  BOOST_TEST(epochs_after_restore(epochs(0, 0), bare, true).coordinator_epoch == 1u);
}

BOOST_AUTO_TEST_CASE(a_takeover_raises_every_workers_generation_above_the_fences_the_shards_report) {
  std::vector<worker> ws{{1, 1, true}, {2, 5, true}, {3, 2, false}};
  fences_seen seen;
  seen.add(epochs(1, 1), {{1, 4}});
  seen.add(epochs(1, 1), {{1, 6}, {3, 1}});
  BOOST_TEST(seen.generation(1) == 6u);  // the highest any shard fences
  BOOST_TEST(seen.generation(2) == 0u);
  raise_generations_for_takeover(ws, seen);
  BOOST_TEST(ws[0].generation == 7u);  // above the predecessor's fence
  BOOST_TEST(ws[1].generation == 6u);  // above its own
  BOOST_TEST(ws[2].generation == 3u);
  // The fences a restore hands the shards: a lost worker's next generation.
  auto fences = min_generations(ws);
  BOOST_TEST_REQUIRE(fences.size() == 3u);
  BOOST_TEST((fences[0] == std::pair<uint32_t, uint64_t>{1, 7}));
  BOOST_TEST((fences[1] == std::pair<uint32_t, uint64_t>{2, 6}));
  BOOST_TEST((fences[2] == std::pair<uint32_t, uint64_t>{3, 4}));
}

// -- the run state's parts ---------------------------------------------------------------

BOOST_AUTO_TEST_CASE(a_run_state_offers_each_kind_its_own_state) {
  auto extra = checkpoints_fixture::run_extra(1);
  BOOST_TEST(state_for(extra, restore_kind::this_run, 1).value() == extra);
  BOOST_TEST(!state_for(extra, restore_kind::this_run, 2).has_value());
  BOOST_TEST(state_for(extra, restore_kind::newest, 0).value() == extra);
  extra["run_starts"] = json::array({checkpoints_fixture::run_extra(2), checkpoints_fixture::run_extra(3)});
  BOOST_TEST(state_for(extra, restore_kind::newest, 0)->at("run") == 3);  // the last run that began there
  BOOST_TEST(state_for(extra, restore_kind::this_run, 2)->at("run") == 2);
  BOOST_TEST(state_for(extra, restore_kind::values, 9).value() == extra);
  BOOST_TEST(!loads_run_state(restore_kind::values));
  BOOST_TEST(loads_run_state(restore_kind::this_run));
  BOOST_TEST(loads_run_state(restore_kind::newest));
}

BOOST_AUTO_TEST_CASE(the_hyperparameters_a_run_state_carries) {
  BOOST_TEST(hyperparams_of(json::object()).empty());
  auto h = hyperparams_of(json{{"hyperparams", {{"learning_rate", 0.01}, {"beta_1", 0.9}}}});
  BOOST_TEST_REQUIRE(h.size() == 2u);
  BOOST_TEST(h[0].first == "beta_1");
  BOOST_TEST(h[0].second == 0.9);
  BOOST_TEST(h[1].first == "learning_rate");
  BOOST_TEST(h[1].second == 0.01);
  BOOST_CHECK_THROW(hyperparams_of(json{{"hyperparams", {{"learning_rate", "fast"}}}}), json::exception);
}

BOOST_AUTO_TEST_CASE(a_run_marks_the_previous_runs_final_checkpoint_only_when_nothing_changed_since) {
  BOOST_TEST(can_mark_start(true, 40, 40, "/ck", "/ck"));
  BOOST_TEST(!can_mark_start(false, 40, 40, "/ck", "/ck"));  // a failed run's late push may have landed
  BOOST_TEST(!can_mark_start(true, 30, 40, "/ck", "/ck"));   // steps applied since
  BOOST_TEST(!can_mark_start(true, 40, 40, "/resumed", "/ck"));  // another directory's
  BOOST_TEST(!can_mark_start(true, 40, 40, "", ""));          // no checkpoint at all
}

BOOST_AUTO_TEST_SUITE_END()
