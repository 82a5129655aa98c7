// The fault simulator: each fault kind at each phase of a step, by hand-written plans;
// hundreds of random seeded plans; and determinism (same seed, same trace hash).

#include <actortrain/actors/sim/fault_plan.hpp>
#include <actortrain/actors/sim/simulator.hpp>
#include <actortrain/dataset/all.hpp>
#include <actortrain/model/all.hpp>

#include <cstring>

#include <boost/test/unit_test.hpp>

#include <fmt/format.h>

using namespace actortrain;

namespace {

std::string explain(const sim_result& r) {
  return fmt::format("seed {}: {} steps in the ledgers\n{}  reproduce: {}", r.seed, r.steps, r.report(), r.replay);
}

sim_result run_plan(std::vector<fault_rule> rules, sim_shape shape = {}) {
  auto plan = std::make_shared<fault_plan>(std::move(rules));
  return simulate(7, shape, plan);
}

fault_rule rule(delivery::kind what, actor_role from, int32_t from_index, actor_role to, int32_t to_index,
                std::string message, uint64_t first, uint64_t count = 1,
                caf::timespan delay = caf::timespan{0}) {
  return fault_rule{what, from, from_index, to, to_index, std::move(message), first, count, delay};
}

// Every check passed and the plan's faults fired.
void check(const sim_result& r, size_t faults) {
  BOOST_TEST_MESSAGE("simulated seconds " << r.simulated_seconds);
  BOOST_TEST(r.ok(), explain(r));
  BOOST_TEST(r.completed(), explain(r));
  BOOST_TEST(r.injected.size() >= faults, explain(r));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(simulator)

BOOST_AUTO_TEST_CASE(a_fault_free_run_passes_every_check) {
  auto r = simulate(1, sim_shape{}, nullptr);
  check(r, 0);
  BOOST_TEST(r.steps == 2 * 18);  // 144 rows / 3 pipelines / 8 per batch, 2 epochs
  BOOST_TEST(r.restarts == 0);
  BOOST_TEST(r.torn == 0);
}

BOOST_AUTO_TEST_CASE(a_worker_crashing_before_its_pull_is_replaced_and_its_steps_rerun) {
  auto r = run_plan({rule(delivery::kind::crash, actor_role::worker, 1, actor_role::ps, -1, "pull", 3)});
  check(r, 1);
  BOOST_TEST(r.restarts == 1);
  BOOST_TEST(r.simulated_seconds < 5.0);  // recovered on the worker's loss, not a request timeout
}

BOOST_AUTO_TEST_CASE(a_worker_crashing_after_its_pull_before_any_push) {
  auto r = run_plan({rule(delivery::kind::crash, actor_role::worker, 0, actor_role::ps, 0, "push", 2)});
  check(r, 1);
  BOOST_TEST(r.restarts == 1);
  BOOST_TEST(r.simulated_seconds < 5.0);  // recovered on the worker's loss, not a request timeout
}

BOOST_AUTO_TEST_CASE(a_worker_crashing_after_pushing_to_some_shards) {
  // Delivered to ps 0; the worker dies at its push to ps 1. The re-run's push to ps 0 is
  // a duplicate there, its push to ps 1 the first.
  auto r = run_plan({rule(delivery::kind::crash_after, actor_role::worker, 2, actor_role::ps, 0, "push", 4)});
  check(r, 1);
  BOOST_TEST(r.torn == 1);  // ps 0 has the first computation's slice, ps 1 the re-run's
  BOOST_TEST(r.restarts == 1);
  BOOST_TEST(r.simulated_seconds < 5.0);  // recovered on the worker's loss, not a request timeout
}

BOOST_AUTO_TEST_CASE(a_worker_crashing_after_pushing_everywhere_before_reporting) {
  auto r = run_plan({rule(delivery::kind::crash_after, actor_role::worker, 1, actor_role::ps, 1, "push", 5)});
  check(r, 1);
  BOOST_TEST(r.torn == 0);  // every shard had the first computation: the re-run is a duplicate everywhere
  BOOST_TEST(r.restarts == 1);
  BOOST_TEST(r.simulated_seconds < 5.0);  // recovered on the worker's loss, not a request timeout
}

BOOST_AUTO_TEST_CASE(a_dataset_shard_that_dies_is_rebuilt_and_serves_from_the_same_position) {
  // Dataset shard 1 dies as its 4th batch is asked for (in epoch 1) and as the 9th is
  // (in epoch 2): each time the step re-runs on a new shard built from the same
  // dataset_fn and input_context, and every batch is applied once.
  auto r = run_plan({rule(delivery::kind::kill_receiver, actor_role::worker, -1, actor_role::dataset, 1, "batch", 4),
                     rule(delivery::kind::kill_receiver, actor_role::worker, -1, actor_role::dataset, 1, "batch", 9)});
  check(r, 2);
  BOOST_TEST(r.rebuilt == 2);
  BOOST_TEST(r.restarts == 0);
  BOOST_TEST(r.simulated_seconds < 5.0);  // no request timeout was needed
}

BOOST_AUTO_TEST_CASE(lost_pulls_pushes_batches_and_tasks_are_retried) {
  for (const char* kind : {"pull", "push", "batch", "step"}) {
    auto r = run_plan({rule(delivery::kind::drop, actor_role::any, -1, actor_role::any, -1, kind, 4, 2)});
    BOOST_TEST_CONTEXT(kind) { check(r, 2); }
    BOOST_TEST(r.simulated_seconds >= 5.0, kind);  // recovered through a request timeout
  }
}

BOOST_AUTO_TEST_CASE(duplicated_messages_are_applied_once) {
  for (const char* kind : {"pull", "push", "batch", "step"}) {
    auto r = run_plan({rule(delivery::kind::duplicate, actor_role::any, -1, actor_role::any, -1, kind, 3, 5)});
    BOOST_TEST_CONTEXT(kind) { check(r, 5); }
  }
}

BOOST_AUTO_TEST_CASE(delayed_and_reordered_messages_change_nothing_counted) {
  for (const char* kind : {"pull", "push", "batch"}) {
    auto r = run_plan({rule(delivery::kind::delay, actor_role::any, -1, actor_role::any, -1, kind, 2, 6,
                            std::chrono::milliseconds(30))});
    BOOST_TEST_CONTEXT(kind) { check(r, 6); }
  }
}

BOOST_AUTO_TEST_CASE(a_slow_worker_delays_the_run_but_not_its_result) {
  auto r = run_plan({rule(delivery::kind::delay, actor_role::worker, 0, actor_role::ps, -1, "push", 1, 8,
                          std::chrono::milliseconds(800))});
  check(r, 8);
  BOOST_TEST(r.restarts == 0);
}

BOOST_AUTO_TEST_CASE(speculation_reruns_a_straggler_elsewhere_and_applies_it_once) {
  // Worker 0's pushes take 2 s each from its 6th on: without speculation the run waits
  // for it; with speculate_after = 3 its slow steps also run elsewhere.
  auto slow = [] {
    return std::vector<fault_rule>{rule(delivery::kind::delay, actor_role::worker, 0, actor_role::ps, -1, "push", 11,
                                        20, std::chrono::seconds(2))};
  };
  auto plain = run_plan(slow());
  sim_shape s;
  s.speculate_after = 3;
  auto fast = run_plan(slow(), s);
  check(plain, 5);
  BOOST_TEST(fast.ok(), explain(fast));
  BOOST_TEST(fast.steps == 36);
  BOOST_TEST(fast.simulated_seconds < plain.simulated_seconds,
             fast.simulated_seconds << " s with speculation, " << plain.simulated_seconds << " s without");
}

BOOST_AUTO_TEST_CASE(a_partitioned_worker_that_comes_back_is_not_applied_twice) {
  // Everything worker 2 sends is lost for a while: its tasks time out and run elsewhere;
  // then it talks again (a zombie's late pushes are duplicates).
  auto r = run_plan({rule(delivery::kind::drop, actor_role::worker, 2, actor_role::any, -1, "", 3, 6)});
  check(r, 2);  // while cut off it sends little: each lost request costs it a timeout
  BOOST_TEST(r.restarts == 0);
}

BOOST_AUTO_TEST_CASE(crashes_with_pull_ahead_and_several_steps_per_task) {
  sim_shape s;
  s.pull_ahead = true;
  s.steps_per_execution = 3;
  auto r = run_plan({rule(delivery::kind::crash_after, actor_role::worker, 0, actor_role::ps, 0, "push", 3),
                     rule(delivery::kind::crash, actor_role::worker, 1, actor_role::ps, -1, "pull", 2)},
                    s);
  check(r, 2);
  BOOST_TEST(r.restarts == 2);
  BOOST_TEST(r.simulated_seconds < 5.0);
}

BOOST_AUTO_TEST_CASE(a_ps_shard_dying_with_pushes_in_flight_rolls_every_shard_back) {
  // ps 1 dies as the 20th push reaches it: the other workers' pushes to it bounce, their
  // pushes to ps 0 are applied and then rolled back with it to the checkpoint of step 10
  // or 20; every step after it runs again under a new recovery epoch.
  auto r = run_plan({rule(delivery::kind::kill_receiver, actor_role::worker, -1, actor_role::ps, 1, "push", 20)});
  check(r, 1);
  BOOST_TEST(r.ps_restores == 1);
  BOOST_TEST(r.simulated_seconds < 5.0);  // on the shard's loss, not a request timeout
}

BOOST_AUTO_TEST_CASE(a_ps_shard_lost_during_a_checkpoint_and_again_after_the_restore) {
  // With a checkpoint every step, ps 0 is likely lost while snapshots are out; it dies
  // again soon after the first restore.
  sim_shape s;
  s.checkpoint_every = 1;
  auto r = run_plan({rule(delivery::kind::kill_receiver, actor_role::worker, -1, actor_role::ps, 0, "push", 7),
                     rule(delivery::kind::kill_receiver, actor_role::worker, -1, actor_role::ps, 0, "push", 12)},
                    s);
  check(r, 2);
  BOOST_TEST(r.ps_restores == 2);
}

BOOST_AUTO_TEST_CASE(a_ps_shard_lost_without_checkpoints_ends_the_run_with_the_reason) {
  sim_shape s;
  s.checkpoint_every = 0;
  auto r = run_plan({rule(delivery::kind::kill_receiver, actor_role::worker, -1, actor_role::ps, 0, "push", 7)}, s);
  BOOST_TEST(!r.completed());
  BOOST_TEST(r.fit_errors.at(0).find("no committed checkpoint to roll back to") != std::string::npos, explain(r));
}

BOOST_AUTO_TEST_CASE(a_planted_poison_record_ends_the_run_naming_its_batch_after_three_attempts) {
  // The batch at position 4 of pipeline 1 kills every worker it reaches: its step is
  // tried 3 times (on the restarted workers too), then the run ends naming it.
  auto plan = std::make_shared<fault_plan>();
  plan->plant_poison(1, 4);
  auto r = simulate(7, sim_shape{}, plan);
  BOOST_TEST(r.ok(), explain(r));
  BOOST_TEST(!r.completed());
  auto& error = r.fit_errors.at(0);
  BOOST_TEST(error.find("poison_step") != std::string::npos, error);
  BOOST_TEST(error.find("position 4 of input pipeline 1") != std::string::npos, error);
  BOOST_TEST(error.find("failed 3 times") != std::string::npos, error);
  BOOST_TEST(r.injected.size() == 3u, explain(r));  // three attempts, three workers killed
  BOOST_TEST(r.restarts == 3);
}

BOOST_AUTO_TEST_CASE(a_new_coordinator_takes_over_and_the_zombie_cannot_finish_or_change_anything) {
  sim_shape s;
  s.take_over_after = 15;
  auto r = simulate(5, s, nullptr);
  BOOST_TEST(r.taken_over);
  check(r, 0);
}

BOOST_AUTO_TEST_CASE(random_plans_with_a_coordinator_take_over_keep_every_invariant) {
  sim_shape s;
  s.take_over_after = 12;
  int taken = 0;
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    auto r = simulate(seed, s);
    taken += r.taken_over ? 1 : 0;
    if (!r.ok()) BOOST_ERROR(explain(r));
  }
  BOOST_TEST(taken > 50);
}

BOOST_AUTO_TEST_CASE(two_hundred_random_plans_keep_every_invariant) {
  int failures = 0;
  size_t injected = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    auto r = simulate(seed);
    injected += r.injected.size();
    if (!r.ok()) {
      ++failures;
      BOOST_ERROR(explain(r));
    }
  }
  BOOST_TEST(failures == 0);
  BOOST_TEST(injected > 200u);  // the plans did something
}

BOOST_AUTO_TEST_CASE(random_plans_with_speculation_keep_every_invariant) {
  // Speculative copies answer late, sometimes for an end-of-data probe whose position
  // the next epoch reuses: answers are matched by task, not by step.
  sim_shape s;
  s.speculate_after = 2;
  for (uint64_t seed = 1; seed <= 150; ++seed) {
    auto r = simulate(seed, s);
    if (!r.ok()) BOOST_ERROR(explain(r));
  }
}

// Each consistency mode under random plans: the simulator also checks the mode's own
// invariant (bounded: staleness <= 2s; sync: staleness 0, rounds of at most R steps with
// one loss).
BOOST_AUTO_TEST_CASE(random_plans_keep_every_invariant_with_bounded_staleness) {
  sim_shape s;
  s.consistency = consistency_mode::bounded_staleness(1);
  uint64_t most = 0;
  for (uint64_t seed = 1; seed <= 120; ++seed) {
    auto r = simulate(seed, s);
    most = std::max(most, r.max_staleness);
    if (!r.ok()) BOOST_ERROR(explain(r));
  }
  BOOST_TEST(most > 0u);  // the window was used, not serialized
}

BOOST_AUTO_TEST_CASE(random_plans_keep_every_invariant_in_sync_rounds) {
  sim_shape s;
  s.consistency = consistency_mode::sync();
  uint64_t rounds = 0;
  for (uint64_t seed = 1; seed <= 120; ++seed) {
    auto r = simulate(seed, s);
    rounds += r.rounds;
    if (!r.ok()) BOOST_ERROR(explain(r));
  }
  BOOST_TEST(rounds > 120u * 6);  // 36 steps in rounds of 3
}

BOOST_AUTO_TEST_CASE(a_fault_free_sync_run_is_rounds_of_every_worker) {
  sim_shape s;
  s.consistency = consistency_mode::sync();
  auto r = simulate(1, s, nullptr);
  check(r, 0);
  BOOST_TEST(r.rounds == 12u);  // 2 epochs x 6 positions, 3 pipelines per round
  BOOST_TEST(r.max_staleness == 0u);
  auto again = simulate(1, s, nullptr);
  BOOST_TEST(again.trace_hash == r.trace_hash);
}

BOOST_AUTO_TEST_CASE(the_same_seed_gives_the_same_trace_and_parameters) {
  for (uint64_t seed : {3, 11, 42}) {
    auto a = simulate(seed), b = simulate(seed);
    BOOST_TEST(a.trace_hash == b.trace_hash, "seed " << seed);
    BOOST_TEST(a.injected == b.injected, "seed " << seed);
  }
  BOOST_TEST(simulate(3).trace_hash != simulate(4).trace_hash);
}

BOOST_AUTO_TEST_CASE(several_fits_each_exact_and_a_failed_one_leaves_a_prefix) {
  // Three fits on one cluster; the second's data has a NaN batch, so it fails with
  // invalid_gradient; the ledgers must hold runs 1 and 3 whole and a valid prefix of 2.
  sim_shape s;
  s.fits = 3;
  s.failing_fit = 1;
  auto r = run_plan({rule(delivery::kind::crash, actor_role::worker, 0, actor_role::ps, -1, "pull", 40),
                     rule(delivery::kind::kill_receiver, actor_role::worker, -1, actor_role::ps, 1, "push", 100)},
                    s);
  BOOST_TEST(r.ok(), explain(r));
  BOOST_REQUIRE(r.fit_errors.size() == 3u);
  BOOST_TEST(r.fit_errors[0].empty(), explain(r));
  BOOST_TEST(r.fit_errors[1].find("invalid_gradient") != std::string::npos, explain(r));
  BOOST_TEST(r.fit_errors[2].empty(), explain(r));
  BOOST_TEST((r.runs == std::vector<uint64_t>{1, 2, 3}));
  BOOST_TEST(r.steps >= 2 * 36);
}

BOOST_AUTO_TEST_CASE(a_corrupt_newest_checkpoint_is_skipped_by_the_restore) {
  // The 3rd checkpoint (due at step 20, written at 28 once the steps in flight landed)
  // rots as it commits; ps 0 dies after it: the roll-back goes to the one before,
  // naming the one it skipped.
  sim_shape s;
  s.corrupt_checkpoint = 3;
  auto r = run_plan({rule(delivery::kind::kill_receiver, actor_role::worker, -1, actor_role::ps, 0, "push", 33)}, s);
  check(r, 1);
  BOOST_TEST(r.skipped_checkpoints == 1);
  BOOST_TEST(r.ps_restores == 1);
}

BOOST_AUTO_TEST_CASE(lost_duplicated_and_late_control_messages_change_nothing) {
  // Every kind of control message lost once, duplicated and delayed past its retry, in
  // a run with a lost worker, a lost ps and the epoch gate's keep, restore and schedule.
  sim_shape s;
  s.callbacks = true;
  s.epochs = 3;
  std::vector<fault_rule> rules{
    rule(delivery::kind::crash, actor_role::worker, 0, actor_role::ps, -1, "pull", 6),
    rule(delivery::kind::kill_receiver, actor_role::worker, -1, actor_role::ps, 1, "push", 40)};
  int k = 0;
  for (std::string kind : {"fence", "snapshot", "init", "stats", "keep", "restore", "hyper"}) {
    auto what = k++ % 3 == 0 ? delivery::kind::drop : k % 3 == 1 ? delivery::kind::duplicate : delivery::kind::delay;
    rules.push_back(rule(what, actor_role::coordinator, -1, actor_role::ps, -1, kind, 1, 2, std::chrono::seconds(7)));
  }
  rules.push_back(rule(delivery::kind::drop, actor_role::any, -1, actor_role::coordinator, -1, "gate", 1, 1));
  auto r = run_plan(rules, s);
  BOOST_TEST(r.ok(), explain(r));
  BOOST_TEST(r.completed(), explain(r));
  BOOST_TEST(r.injected.size() >= 8u, explain(r));
}

BOOST_AUTO_TEST_CASE(sync_values_equal_a_fault_free_runs_under_faults) {
  sim_shape s;
  s.consistency = consistency_mode::sync();
  s.callbacks = true;
  s.fits = 2;
  auto r = run_plan({rule(delivery::kind::crash_after, actor_role::worker, 1, actor_role::ps, 0, "push", 5),
                     rule(delivery::kind::kill_receiver, actor_role::worker, -1, actor_role::ps, 1, "push", 30),
                     rule(delivery::kind::kill_receiver, actor_role::worker, -1, actor_role::dataset, 2, "batch", 9)},
                    s);
  check(r, 3);
  BOOST_TEST(r.values_compared);  // and equal: no violation
}

BOOST_AUTO_TEST_CASE(bounded_staleness_zero_differs_from_a_fault_free_run_only_by_a_torn_step) {
  // Sequential SGD, yet a worker that dies after pushing its step to ps 0 only leaves the
  // step on ps 0; its re-run reads ps 0's part of it, so the slices it pushes to ps 1
  // differ from the fault-free run's: a legitimate difference, counted as torn.
  sim_shape s;
  s.consistency = consistency_mode::bounded_staleness(0);
  auto torn = run_plan({rule(delivery::kind::crash_after, actor_role::worker, 1, actor_role::ps, 0, "push", 4)}, s);
  check(torn, 1);
  BOOST_TEST(torn.torn == 1);
  BOOST_TEST(!torn.values_compared);
  auto clean = simulate(7, s, nullptr);
  BOOST_REQUIRE(torn.values);
  BOOST_REQUIRE(clean.values);
  const auto& a = (*torn.values)[0];
  const auto& b = (*clean.values)[0];
  BOOST_TEST(std::memcmp(a.data(), b.data(), static_cast<size_t>(a.size()) * sizeof(float)) != 0);
  // Without the tear (the worker dies before its pushes) the values are the same.
  auto whole = run_plan({rule(delivery::kind::crash, actor_role::worker, 1, actor_role::ps, 0, "push", 4)}, s);
  check(whole, 1);
  BOOST_TEST(whole.torn == 0);
  BOOST_TEST(whole.values_compared);
}

// A user's own job through the public API: built as an application builds it.
BOOST_AUTO_TEST_CASE(a_users_own_job_runs_under_random_plans_through_the_public_api) {
  model::rng g{5};
  model::matrix x(96, 3), y(96, 1);
  for (Eigen::Index i = 0; i < x.size(); ++i) x.data()[i] = static_cast<float>(2 * g.uniform() - 1);
  y = x * (model::matrix(3, 1) << 0.5f, -1.0f, 2.0f).finished();
  auto data = dataset::from_tensor_slices({x}, y);
  job j;
  j.name = "three inputs";
  j.structure = model::model::sequential(3, {model::layers::dense(1)});
  j.optimizer = model::make_adam({0.01});
  j.loss = model::mean_squared_error();
  j.train = [data](const dataset::input_context& c) {
    return data.shard(c.num_input_pipelines, c.input_pipeline_id).shuffle(48, 3).batch(8);
  };
  j.fit.epochs = 3;
  j.spec.num_ps = 2;
  j.spec.num_workers = 2;
  j.spec.request_timeout = std::chrono::seconds(5);
  for (auto mode : {"async", "sync"}) {
    j.spec.consistency = consistency_mode::parse(mode);
    for (uint64_t seed = 1; seed <= 25; ++seed) {
      sim_options o;
      o.seed = seed;
      o.fits = 2;
      auto r = simulate(j, o);
      BOOST_TEST(r.ok(), mode << " " << explain(r));
      BOOST_TEST(r.replay.find(fmt::format("seed={}", seed)) != std::string::npos, r.replay);
    }
  }
}

// Each defect the checks exist for, planted: over 500 random seeds the checks catch it
// in every seed where it took effect in a fit that completed.
BOOST_AUTO_TEST_CASE(every_planted_defect_is_caught_whenever_it_took_effect) {
  for (auto defect : planted_defects()) {
    int took = 0, caught = 0;
    for (uint64_t seed = 1; seed <= 500; ++seed) {
      auto shape = random_shape(seed);
      shape.plant = defect;
      auto r = simulate(seed, shape);
      if (!r.planted_visible()) continue;
      ++took;
      if (!r.ok())
        ++caught;
      else
        BOOST_ERROR(to_string(defect) << " took effect and was not caught: " << explain(r));
    }
    BOOST_TEST_MESSAGE(to_string(defect) << ": took effect in " << took << " of 500 seeds, caught in " << caught);
    BOOST_TEST(took > 20, to_string(defect) << " took effect in only " << took << " seeds");
    BOOST_TEST(caught == took, to_string(defect));
  }
}

BOOST_AUTO_TEST_SUITE_END()
