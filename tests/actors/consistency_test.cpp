// Consistency modes on CAF's test coordinator: synchronous rounds equal single-process
// training on the global batch step by step (also when a worker is lost mid-round),
// bounded staleness keeps its bound under a straggler that makes async stale, and
// input_context per mode.

#include <actortrain/actors/cluster.hpp>
#include <actortrain/actors/events.hpp>
#include <actortrain/actors/fault_plan.hpp>
#include <actortrain/dataset/all.hpp>
#include <actortrain/model/all.hpp>

#include <fmt/format.h>

#include <map>
#include <set>

#include "../../actors/src/cluster_internals.hpp"

// Last: CAF's test DSL defines macros (inject, expect) that clash with ordinary names.
#include "caf_test.hpp"

using namespace actortrain;
using model::matrix;
namespace ds = actortrain::dataset;

namespace {

matrix random_matrix(Eigen::Index r, Eigen::Index c, uint64_t seed) {
  model::rng g{seed};
  matrix m(r, c);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = 2 * g.uniform() - 1;
  return m;
}

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

struct fixture : testing::fixture {
  cluster_spec spec(int ps, int workers, std::string mode) {
    cluster_spec s;
    s.num_ps = ps;
    s.num_workers = workers;
    s.simulated = true;
    s.consistency = std::move(mode);
    s.visitation_log = true;
    return s;
  }

  std::vector<event> step_events;  // of the last run()

  // Runs to the end, moving the simulated clock when nothing else can happen (delayed
  // messages, timeouts). Keeps the step events (the tests' lost workers are not
  // restarted, so the cluster needs none of the events taken here).
  // With keep = false the cluster takes every event itself (fit_result's staleness).
  fit_result run(cluster& c, ds::dataset_fn fn, int epochs = 1, bool keep = true) {
    model::fit_options o;
    o.epochs = epochs;
    o.verbose = 0;
    step_events.clear();
    auto h = c.schedule(std::move(fn), o);
    for (int i = 0; i < 100000; ++i) {
      sched.run();
      while (auto e = keep ? c.events()->pop() : std::nullopt)
        if (e->kind == event_kind::step_done) step_events.push_back(*e);
      if (c.done(h)) break;
      if (!sched.has_job()) sched.advance_time(std::chrono::milliseconds(10));
    }
    BOOST_REQUIRE(c.done(h));
    return c.join(h);
  }

  model::parameter_store variables(cluster& c) {
    auto f = c.pull_variables();
    sched.run();
    return f.get();
  }

  // Sync training with `workers` replicas against a local trainer on the global batch of
  // 16 (per-replica batch 16 / R): per round, every step reports the trainer's loss of
  // that step; at the end the parameters agree.
  void sync_matches_trainer(model::model net, int workers, std::shared_ptr<fault_plan> faults = nullptr) {
    const int64_t global = 16, rounds = 20;
    auto data = planted(global * rounds);
    auto s = spec(2, workers, "sync");
    s.faults = faults;
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
    for (auto& e : step_events) {
      BOOST_TEST(e.staleness == 0u);
      by_round[e.round].push_back(e.loss);
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
    auto got = variables(c);
    for (size_t v = 0; v < got.size(); ++v) {
      const auto& a = got[static_cast<model::variable_id>(v)];
      const auto& b = t.parameters()[static_cast<model::variable_id>(v)];
      BOOST_REQUIRE(a.rows() == b.rows());
      auto diff = (a - b).cwiseAbs().maxCoeff();
      BOOST_TEST(diff <= 1e-5f * (1 + b.cwiseAbs().maxCoeff()), "variable " << v << " differs by " << diff);
    }
    std::set<std::pair<uint32_t, uint64_t>> seen;
    for (auto& v : r.visits) BOOST_TEST(seen.emplace(v.pipeline, v.position).second);
    BOOST_TEST(seen.size() == static_cast<size_t>(rounds * workers));
    auto shards = cluster_internals::shard_stats(c);
    sched.run();
    for (auto& st : shards.get()) {
      BOOST_TEST(st.held == 0u);
      BOOST_TEST(st.applied == static_cast<uint64_t>(rounds * workers));
    }
  }
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(consistency, fixture)

BOOST_AUTO_TEST_CASE(sync_rounds_are_steps_on_the_global_batch_for_a_linear_model) { sync_matches_trainer(linear(), 2); }

BOOST_AUTO_TEST_CASE(sync_rounds_are_steps_on_the_global_batch_for_an_mlp) { sync_matches_trainer(mlp(), 4); }

BOOST_AUTO_TEST_CASE(sync_reruns_a_lost_workers_batch_within_its_round) {
  // Worker 1 dies as it is about to push its 5th step: worker 0 computes that batch in
  // the same round, on the same parameters, so training equals the trainer's still
  // (TensorFlow's synchronous strategy would fail the job).
  auto plan = std::make_shared<fault_plan>(
    std::vector<fault_rule>{rule(delivery::kind::crash, actor_role::worker, 1, actor_role::ps, "push", 5)});
  sync_matches_trainer(mlp(), 2, plan);
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
      BOOST_ERROR("accepted consistency " << s.consistency);
    } catch (const std::invalid_argument& e) {
      BOOST_TEST(std::string(e.what()).find(part) != std::string::npos, e.what());
    }
  };
  for (std::string bad : {"eventual", "bounded_staleness()", "bounded_staleness(-1)", "bounded_staleness(x)", "SYNC"})
    refused(spec(1, 2, bad), "'" + bad + "'");
  auto s = spec(1, 2, "sync");
  s.steps_per_execution = 2;
  refused(s, "steps_per_execution = 2 with consistency 'sync'");
}

BOOST_AUTO_TEST_SUITE_END()
