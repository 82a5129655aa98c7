// Consistency modes on CAF's test coordinator: synchronous rounds equal single-process
// training on the global batch step by step (also when a worker is lost mid-round),
// bounded staleness keeps its bound under a straggler that makes async stale, and
// input_context per mode.

#include <actortrain/actors/cluster/cluster.hpp>
#include <actortrain/actors/cluster/events.hpp>
#include <actortrain/actors/sim/fault_plan.hpp>
#include <actortrain/dataset/all.hpp>
#include <actortrain/model/all.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <future>
#include <map>
#include <optional>
#include <set>

// After the others: CAF's test DSL defines macros (inject, expect) that clash with
// ordinary names.
#include "caf_test.hpp"
#include "random_matrix.hpp"
#include "sim_cluster.hpp"

using namespace actortrain;
using model::matrix;
namespace ds = actortrain::dataset;

namespace {

using testing::random_matrix;

// y = x w + 0.25 with a fixed w.
ds::dataset planted(int64_t n) {
  auto x = random_matrix(n, 4, 3);
  matrix w(4, 1);
  w << 1.0f, -2.0f, 0.5f, 1.5f;
  matrix y = (x * w).array() + 0.25f;
  return ds::from_tensor_slices({x}, y);
}

model::model linear() { return model::model::sequential(4, {model::layers::dense(1)}); }

model::model mlp() {
  using model::layers::activation;
  return model::model::sequential(4, {model::layers::dense(8, activation::tanh), model::layers::dense(1)});
}

fault_rule rule(delivery::kind what, actor_role from, int32_t from_index, actor_role to, std::string message,
                uint64_t first, uint64_t count = 1, caf::timespan delay = caf::timespan{0}) {
  return fault_rule{what, from, from_index, to, -1, std::move(message), first, count, delay};
}

struct fixture : testing::cluster_fixture {
  cluster_spec spec(int ps, int workers, std::string mode) {
    cluster_spec s;
    s.num_ps = ps;
    s.num_workers = workers;
    s.simulated = true;
    s.consistency = consistency_mode::parse(mode);
    s.visitation_log = true;
    return s;
  }

  // Sync training with `workers` replicas against a local trainer on the global batch of
  // 16 (per-replica batch 16 / R): per round, every step reports the trainer's loss of
  // that step; at the end the parameters agree.
  void sync_matches_trainer(model::model net, int workers, std::shared_ptr<fault_plan> faults = nullptr,
                            int steps_per_execution = 1) {
    const int64_t global = 16, rounds = 20;
    auto data = planted(global * rounds);
    auto s = spec(2, workers, "sync");
    s.faults = faults;
    s.steps_per_execution = steps_per_execution;
    s.apply_log = true;
    s.request_timeout = std::chrono::seconds(1);
    cluster c{sys, s, net, *model::make_adam({0.01}), model::mean_squared_error()};
    auto r = run(c, [data, global](const ds::input_context& ctx) {
      // Batch k of pipeline p is batch k * R + p of the global order: round k is global batch k.
      return data.batch(ctx.get_per_replica_batch_size(global)).shard(ctx.num_input_pipelines, ctx.input_pipeline_id);
    });
    BOOST_TEST(r.steps == rounds * workers);
    BOOST_TEST(r.max_staleness == 0u);

    model::trainer t{net, model::make_adam({0.01}), model::mean_squared_error(), 1};
    std::vector<double> losses;
    for (auto it = data.batch(global).iterate(0); auto b = it->next();) losses.push_back(t.train_step(*b));
    BOOST_REQUIRE(losses.size() == static_cast<size_t>(rounds));

    std::map<uint64_t, std::vector<double>> by_round;
    std::map<uint64_t, std::set<uint32_t>> workers_of;
    for (auto& e : step_events) {
      BOOST_TEST(e.staleness == 0u);
      by_round[e.round].push_back(e.loss);
      workers_of[e.round].insert(e.worker);
    }
    if (!faults) {  // one step per replica: every worker computes one of each round's steps
      for (auto& [round, w] : workers_of) BOOST_TEST(w.size() == static_cast<size_t>(workers), "round " << round);
      // The same from the shard's own log: it applies a round's steps together.
      auto log = shard_stats(c).at(0).apply_log;
      BOOST_REQUIRE(log.size() == static_cast<size_t>(rounds * workers));
      for (size_t k = 0; k < log.size(); k += static_cast<size_t>(workers)) {
        std::set<uint32_t> w;
        for (size_t i = k; i < k + static_cast<size_t>(workers); ++i) w.insert(log[i].worker);
        BOOST_TEST(w.size() == static_cast<size_t>(workers), "the shard's round at " << k);
      }
    }
    BOOST_REQUIRE(by_round.size() == static_cast<size_t>(rounds));
    for (auto& [round, ls] : by_round) {
      BOOST_REQUIRE(round >= 1u);
      BOOST_TEST(ls.size() == static_cast<size_t>(workers), "round " << round);
      for (auto l : ls) BOOST_TEST(l == ls.front(), "round " << round << ": every step reports the round's loss");
      auto want = losses[round - 1];
      BOOST_TEST(std::abs(ls.front() - want) <= 1e-5 * (1 + std::abs(want)),
                 "round " << round << ": " << ls.front() << " vs " << want);
    }
    close_to_trainer(c, t, "sync");
    std::set<std::pair<uint32_t, uint64_t>> seen;
    for (auto& v : r.visits) BOOST_TEST(seen.emplace(v.pipeline, v.position).second);
    BOOST_TEST(seen.size() == static_cast<size_t>(rounds * workers));
    for (auto& st : shard_stats(c)) {
      BOOST_TEST(st.held == 0u);
      BOOST_TEST(st.applied == static_cast<uint64_t>(rounds * workers));
    }
  }
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(consistency, fixture)

BOOST_AUTO_TEST_CASE(sync_rounds_are_steps_on_the_global_batch_for_a_linear_model) { sync_matches_trainer(linear(), 2); }

BOOST_AUTO_TEST_CASE(sync_rounds_are_steps_on_the_global_batch_for_an_mlp) { sync_matches_trainer(mlp(), 4); }

// A job's tasks of several steps (the main job's 8) do not reach sync rounds: tasks of one
// step, the same training.
BOOST_AUTO_TEST_CASE(sync_rounds_take_tasks_of_one_step_whatever_steps_per_execution_says) {
  sync_matches_trainer(mlp(), 2, nullptr, 8);
}

BOOST_AUTO_TEST_CASE(sync_reruns_a_lost_workers_batch_within_its_round) {
  // Worker 1 dies as it is about to push its 5th step: worker 0 computes that batch in
  // the same round, on the same parameters, so training equals the trainer's still
  // (TensorFlow's synchronous strategy would fail the job).
  auto plan = std::make_shared<fault_plan>(
    std::vector<fault_rule>{rule(delivery::kind::crash, actor_role::worker, 1, actor_role::ps, "push", 5)});
  sync_matches_trainer(mlp(), 2, plan);
  BOOST_TEST(plan->injected().size() == 1u);
}

namespace {

// Records the sends that make up the synchronous protocol, in order: T a step task,
// P a pull, U a push, M a round manifest.
class protocol_spy : public fault_policy {
 public:
  delivery decide(const message_info& m) override {
    if (m.kind == step_atom::value) trace += 'T';
    if (m.kind == pull_atom::value) trace += 'P';
    if (m.kind == push_atom::value) trace += 'U';
    if (m.kind == round_atom::value) trace += 'M';
    return delivery::deliver();
  }
  std::string trace;
};

}  // namespace

BOOST_AUTO_TEST_CASE(sync_rounds_follow_the_protocol_message_by_message) {
  // 2 workers, 2 shards: each round is two tasks, then each worker's pull from and push
  // to both shards (any interleaving), then one manifest to each shard; the next round's
  // tasks (so its pulls) go out only once every shard applied the round.
  auto spy = std::make_shared<protocol_spy>();
  auto s = spec(2, 2, "sync");
  s.faults = spy;
  cluster c{sys, s, mlp(), *model::make_adam({0.01}), model::mean_squared_error()};
  auto data = planted(160);
  auto r = run(c, [data](const ds::input_context& ctx) {
    return data.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(8);
  });
  BOOST_TEST(r.steps == 20);
  BOOST_TEST_MESSAGE("protocol trace: " << spy->trace);
  std::vector<std::string> rounds;
  std::string segment;
  for (char k : spy->trace) {
    if (k == 'M' && !segment.empty() && segment.back() != 'M' && segment.find('T') == std::string::npos) {
      BOOST_ERROR("a manifest before any task: " << spy->trace);
      return;
    }
    segment += k;
    if (k == 'M' && std::count(segment.begin(), segment.end(), 'M') == 2) {
      rounds.push_back(segment);
      segment.clear();
    }
  }
  // The last round's tasks found the data's end: their end-of-data answers close nothing.
  BOOST_TEST(std::count(segment.begin(), segment.end(), 'M') == 0, segment);
  BOOST_REQUIRE(rounds.size() == 10u);
  for (auto& round : rounds) {
    std::string sorted = round;
    std::sort(sorted.begin(), sorted.end());
    BOOST_TEST(sorted == "MMPPPPTTUUUU", round);
    BOOST_TEST(round.substr(0, 2) == "TT", round);          // both tasks before anything else
    BOOST_TEST(round.substr(round.size() - 2) == "MM", round);  // manifests after every push
  }
}

BOOST_AUTO_TEST_CASE(a_lost_round_manifest_is_sent_again) {
  // The manifest of round 3 to ps 1 is lost: the coordinator's request times out and it
  // sends it again (a shard applies a round once), and training is unchanged.
  auto plan = std::make_shared<fault_plan>(std::vector<fault_rule>{
    fault_rule{delivery::kind::drop, actor_role::coordinator, -1, actor_role::ps, 1, "round", 3, 1, {}}});
  sync_matches_trainer(linear(), 2, plan);
  BOOST_TEST(plan->injected().size() == 1u);
}

BOOST_AUTO_TEST_CASE(bounded_staleness_keeps_its_bound_under_a_straggler) {
  // Worker 2's pushes take 30 ms while the others' take none: in async mode its steps
  // land on parameters many versions newer than they read.
  auto straggle = [] {
    return std::make_shared<fault_plan>(std::vector<fault_rule>{rule(delivery::kind::delay, actor_role::worker, 2,
                                                                     actor_role::ps, "push", 1, 1000000,
                                                                     std::chrono::milliseconds(30))});
  };
  auto data = planted(240);
  auto fn = [data](const ds::input_context& ctx) {
    return data.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(8);
  };
  auto train = [&](const std::string& mode) {
    auto s = spec(1, 3, mode);
    s.faults = straggle();
    cluster c{sys, s, linear(), *model::make_sgd({0.05}), model::mean_squared_error()};
    auto r = run(c, fn, 2, /*keep=*/false);
    BOOST_TEST(r.steps == 60);
    BOOST_TEST_MESSAGE(mode << ": staleness mean " << r.mean_staleness << ", max " << r.max_staleness);
    return r;
  };
  auto async = train("async");
  BOOST_TEST(async.max_staleness > 4u);  // the straggler does make stale steps
  for (uint64_t bound : {0, 1, 2}) {
    auto r = train(fmt::format("bounded_staleness({})", bound));
    BOOST_TEST(r.max_staleness <= 2 * bound, "bound " << bound << ": staleness " << r.max_staleness);
    if (bound > 0) BOOST_TEST(r.max_staleness > 0u, "bound " << bound << ": the window was used");
    BOOST_TEST(r.mean_staleness <= async.mean_staleness);
  }
}

// Tasks of several steps (the main job's 8) share a bounded window: the first worker's
// task takes its share of the room, so the other worker computes from the start instead
// of waiting for the first worker's steps to be applied.
BOOST_AUTO_TEST_CASE(tasks_of_several_steps_share_a_bounded_window) {
  auto data = planted(160);
  auto fn = [data](const ds::input_context& ctx) {
    return data.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(8);
  };
  auto s = spec(1, 2, "bounded_staleness(2)");
  s.steps_per_execution = 8;
  s.apply_log = true;
  cluster c{sys, s, linear(), *model::make_sgd({0.05}), model::mean_squared_error()};
  auto r = run(c, fn);
  BOOST_TEST(r.steps == 20);
  // Who pushed each step, in the order the shard applied them (its own log).
  auto log = shard_stats(c).at(0).apply_log;
  BOOST_REQUIRE(log.size() == 20u);
  std::set<uint32_t> first;
  for (size_t i = 0; i < 3; ++i) first.insert(log[i].worker);
  BOOST_TEST(first.size() == 2u, "the first 3 steps applied were all one worker's");
}

BOOST_AUTO_TEST_CASE(a_worker_that_joins_enters_at_the_current_window) {
  // bounded_staleness(1), one straggler; a third worker joins after 20 steps and is
  // given steps at once, within the window: the bound of 2 holds throughout.
  auto s = spec(1, 2, "bounded_staleness(1)");
  s.faults = std::make_shared<fault_plan>(std::vector<fault_rule>{
    rule(delivery::kind::delay, actor_role::worker, 1, actor_role::ps, "push", 1, 1000000, std::chrono::milliseconds(30))});
  cluster c{sys, s, linear(), *model::make_sgd({0.05}), model::mean_squared_error()};
  auto data = planted(480);
  model::fit_options o;
  o.epochs = 1;
  o.verbose = 0;
  auto h = c.schedule([data](const ds::input_context& ctx) {
    return data.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(8);
  }, o);
  std::optional<std::future<uint64_t>> joined;
  uint64_t most = 0, by_newcomer = 0, applied = 0;
  for (int i = 0; i < 100000 && !c.done(h); ++i) {
    sched.run();
    while (auto e = c.events()->pop())
      if (e->kind == event_kind::step_done) {
        most = std::max(most, e->staleness);
        by_newcomer += e->worker == 2 ? 1 : 0;
        ++applied;
      }
    if (applied >= 20 && !joined) joined = c.add_worker_async();
    if (!sched.has_job()) sched.advance_time(std::chrono::milliseconds(10));
  }
  BOOST_REQUIRE(c.done(h));
  auto r = c.join(h);
  BOOST_REQUIRE(joined);
  BOOST_TEST(joined->get() == 1u);  // the newcomer's generation
  BOOST_TEST(r.steps == 60);
  BOOST_TEST(by_newcomer > 10u);
  BOOST_TEST(most <= 2u);
}

BOOST_AUTO_TEST_CASE(input_context_per_mode) {
  auto data = planted(96);
  for (std::string mode : {"async", "bounded_staleness(2)", "sync"}) {
    auto s = spec(1, 3, mode);
    s.num_dataset_shards = 3;
    cluster c{sys, s, linear(), *model::make_sgd({0.05}), model::mean_squared_error()};
    std::vector<ds::input_context> seen;
    run(c, [&seen, data](const ds::input_context& ctx) {
      seen.push_back(ctx);
      return data.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(8);
    });
    BOOST_REQUIRE(seen.size() == 3u);
    std::set<int64_t> ids;
    for (auto& ctx : seen) {
      BOOST_TEST(ctx.num_input_pipelines == 3);
      BOOST_TEST(ctx.num_replicas_in_sync == (mode == "sync" ? 3 : 1), mode);
      ids.insert(ctx.input_pipeline_id);
    }
    BOOST_TEST(ids == (std::set<int64_t>{0, 1, 2}));
  }
}

BOOST_AUTO_TEST_CASE(bad_consistency_modes_are_refused_naming_the_value) {
  auto refused = [&](cluster_spec s, const std::string& part) {
    try {
      cluster c{sys, s, linear(), *model::make_sgd({0.05}), model::mean_squared_error()};
      BOOST_ERROR("accepted consistency " << s.consistency.to_string());
    } catch (const std::invalid_argument& e) {
      BOOST_TEST(std::string(e.what()).find(part) != std::string::npos, e.what());
    }
  };
  // Text is refused where it becomes a mode (a flag, a cluster file).
  for (std::string bad : {"eventual", "bounded_staleness()", "bounded_staleness(-1)", "bounded_staleness(x)", "SYNC"}) {
    try {
      consistency_mode::parse(bad);
      BOOST_ERROR("parsed " << bad);
    } catch (const std::invalid_argument& e) {
      BOOST_TEST(std::string(e.what()).find("'" + bad + "'") != std::string::npos, e.what());
    }
  }
  // An option a mode cannot take is refused by the cluster, naming both.
  auto s = spec(1, 2, "sync");
  s.push_every = 2;
  refused(s, "push_every = 2 with consistency 'sync'");
}

BOOST_AUTO_TEST_SUITE_END()
