#include <actortrain/actors/cluster.hpp>

#include "cluster_internals.hpp"
#include <actortrain/actors/configure.hpp>
#include <actortrain/actors/events.hpp>
#include <actortrain/actors/fault_plan.hpp>
#include <actortrain/actors/simulator.hpp>
#include <actortrain/dataset/all.hpp>
#include <actortrain/model/all.hpp>
#include <actortrain/model/checkpoint/memory_file_system.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <stdexcept>

#include <fmt/format.h>

namespace actortrain {

namespace {

// FNV-1a over the bytes of what the trace contains.
struct trace_hasher {
  uint64_t h = 1469598103934665603ull;
  void bytes(const void* p, size_t n) {
    auto c = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) {
      h ^= c[i];
      h *= 1099511628211ull;
    }
  }
  template <class T>
  void add(const T& x) {
    static_assert(std::is_trivially_copyable<T>::value, "plain values only");
    bytes(&x, sizeof(T));
  }
};

// The planted linear model's data: y = x w + 0.25.
struct job {
  model::matrix x, y;
  explicit job(int64_t rows, uint64_t seed) {
    model::rng g{seed, /*stream=*/7};
    x.resize(rows, 4);
    for (Eigen::Index i = 0; i < x.size(); ++i) x.data()[i] = 2 * g.uniform() - 1;
    model::matrix w(4, 1);
    w << 1.0f, -2.0f, 0.5f, 1.5f;
    y = (x * w).array() + 0.25f;
  }
};

}  // namespace

sim_result simulate(uint64_t seed, const sim_shape& shape) {
  int64_t steps_per_epoch = 0;
  for (int p = 0; p < shape.num_pipelines; ++p) {
    int64_t rows = shape.rows / shape.num_pipelines + (p < shape.rows % shape.num_pipelines ? 1 : 0);
    steps_per_epoch += (rows + shape.batch - 1) / shape.batch;
  }
  return simulate(seed, shape,
                  fault_plan::random(seed, shape.num_workers, shape.num_ps, steps_per_epoch * shape.epochs, shape.faults,
                                     /*ps_crashes=*/shape.checkpoint_every > 0));
}

sim_result simulate(uint64_t seed, const sim_shape& shape, std::shared_ptr<fault_plan> plan) {
  if (shape.num_ps < 1 || shape.num_ps > 4)
    throw std::invalid_argument(fmt::format("simulate: num_ps = {} (1 to 4: the model has 4 variables)", shape.num_ps));
  if (shape.num_workers < 1 || shape.num_pipelines < 1 || shape.rows < 1 || shape.batch < 1 || shape.epochs < 1)
    throw std::invalid_argument("simulate: workers, pipelines, rows, batch and epochs must be >= 1");
  sim_result res;
  res.seed = seed;
  if (plan)
    for (auto& r : plan->rules()) res.plan.push_back(to_string(r));
  if (!plan && shape.take_over_after > 0) plan = std::make_shared<fault_plan>();  // to cut the old coordinator off

  caf::actor_system_config cfg;
  configure(cfg);
  cfg.set("scheduler.policy", caf::atom("testing"));
  caf::actor_system sys{cfg};
  auto& sched = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  auto started = sched.clock().now();

  job data{shape.rows, seed};
  auto all = dataset::from_tensor_slices({data.x}, data.y);
  auto batch = shape.batch;
  // What each (epoch, pipeline) must contribute.
  std::vector<int64_t> batches(static_cast<size_t>(shape.num_pipelines));
  for (int p = 0; p < shape.num_pipelines; ++p) {
    auto c = all.shard(shape.num_pipelines, p).batch(batch).cardinality();
    batches[static_cast<size_t>(p)] = c.n;
    res.expected_steps += c.n * shape.epochs;
  }

  cluster_spec spec;
  spec.num_ps = shape.num_ps;
  spec.num_workers = shape.num_workers;
  spec.num_dataset_shards = shape.num_pipelines;
  spec.steps_per_execution = shape.steps_per_execution;
  spec.pull_ahead = shape.pull_ahead;
  spec.speculate_after = shape.speculate_after;
  spec.simulated = true;
  spec.seed = seed;
  spec.request_timeout = std::chrono::seconds(5);
  spec.faults = plan;
  spec.apply_log = true;
  spec.consistency = shape.consistency;
  // The bound a mode promises on version staleness (none for async).
  std::optional<uint64_t> bound;
  if (shape.consistency == "sync") bound = 0;
  if (shape.consistency.rfind("bounded_staleness(", 0) == 0)
    bound = 2 * std::stoull(shape.consistency.substr(18, shape.consistency.size() - 19));
  if (shape.checkpoint_every > 0) {
    spec.checkpoint_dir = "/sim";
    spec.checkpoint_every = shape.checkpoint_every;
    spec.checkpoint_fs = std::make_shared<model::memory_file_system>();
  }
  using model::layers::activation;
  auto net = model::model::sequential(4, {model::layers::dense(4, activation::tanh), model::layers::dense(1)});
  auto owned = std::make_unique<cluster>(sys, spec, net, *model::make_sgd({0.05}), model::mean_squared_error());
  auto& c = *owned;
  // On every way out: stop the cluster and run the test scheduler until its actors are
  // gone (the system's destructor waits for them, and only this thread runs them).
  struct stop_first {
    std::unique_ptr<cluster>& owned;
    caf::scheduler::test_coordinator& sched;
    ~stop_first() {
      owned.reset();
      for (int i = 0; i < 100000 && (sched.try_run_once() || sched.clock().trigger_timeout()); ++i) {
      }
    }
  } stopper{owned, sched};

  model::fit_options opts;
  opts.epochs = shape.epochs;
  opts.verbose = 0;
  auto h = c.schedule([all, batch](const dataset::input_context& ctx) {
    return all.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(batch);
  }, opts);

  trace_hasher trace;
  struct applied_step {
    int64_t epoch;
    uint32_t pipeline;
    uint64_t position;
  };
  std::vector<applied_step> applied;  // in order; a roll-back forgets the tail
  std::vector<std::future<uint64_t>> joins;
  bool hung = false;
  uint64_t newest_epoch = 0;  // events of a deposed coordinator are not the run's
  std::optional<cluster_internals::deposed> deposed;
  // Synchronous rounds as reported: per round, its steps and the loss they report.
  std::map<uint64_t, std::pair<int64_t, double>> rounds;
  std::set<uint64_t> bad_rounds;
  for (int guard = 0;; ++guard) {
    // While a take-over is due, one message at a time: it happens at its step count.
    bool watch = shape.take_over_after > 0 && !deposed;
    while (sched.try_run_once())
      if (watch) break;
    while (auto e = c.events()->pop()) {
      if (e->coordinator_epoch < newest_epoch) continue;
      newest_epoch = e->coordinator_epoch;
      switch (e->kind) {
        case event_kind::step_done:
          res.max_staleness = std::max(res.max_staleness, e->staleness);
          if (bound && e->staleness > *bound)
            res.violations.push_back(fmt::format("step ({}, {}) applied with staleness {} (the mode's bound is {})",
                                                 e->pipeline, e->position, e->staleness, *bound));
          if (e->round > 0) {
            auto [at, fresh] = rounds.emplace(e->round, std::make_pair(int64_t{0}, e->loss));
            ++at->second.first;
            if ((!fresh && at->second.second != e->loss) || at->second.first > shape.num_workers)
              bad_rounds.insert(e->round);
          }
          applied.push_back(applied_step{e->epoch, e->pipeline, e->position});
          trace.add(e->pipeline);
          trace.add(e->position);
          trace.add(e->worker);
          trace.add(e->generation);
          trace.add(e->loss);
          break;
        case event_kind::worker_lost:
          trace.add(uint8_t{1});
          trace.add(e->worker);
          trace.add(e->generation);
          if (res.restarts < 50) {
            ++res.restarts;
            joins.push_back(c.restart_worker_async(e->worker));
          }
          break;
        case event_kind::dataset_lost:
          trace.add(uint8_t{3});
          trace.add(e->pipeline);
          ++res.rebuilt;
          cluster_internals::rebuild_dataset_shard(c, e->pipeline);
          break;
        case event_kind::ps_lost:
          trace.add(uint8_t{4});
          trace.add(e->count);
          cluster_internals::respawn_ps(c, static_cast<uint32_t>(e->count));
          break;
        case event_kind::resumed:  // a coordinator took over from the checkpoint of this step
        case event_kind::ps_restored:
          rounds.clear();  // the rounds after the checkpoint run again
          trace.add(uint8_t{e->kind == event_kind::resumed ? uint8_t{6} : uint8_t{5}});
          trace.add(e->count);
          if (e->kind == event_kind::ps_restored) ++res.ps_restores;
          if (e->count < 0 || static_cast<size_t>(e->count) > applied.size())
            res.violations.push_back(fmt::format("restored to step {} after only {} applied", e->count, applied.size()));
          else
            applied.resize(static_cast<size_t>(e->count));
          break;
        case event_kind::worker_joined:
          trace.add(uint8_t{2});
          trace.add(e->worker);
          trace.add(e->generation);
          break;
        default:
          break;
      }
    }
    if (shape.take_over_after > 0 && !deposed && static_cast<int64_t>(applied.size()) >= shape.take_over_after &&
        shape.checkpoint_every > 0) {
      // The old coordinator is cut off for its next 30 messages (so its requests time
      // out), then wakes up: by then everything it sends must be refused.
      plan->add(fault_rule{delivery::kind::drop, actor_role::coordinator, 0, actor_role::any, -1, "", 1, 30, {}});
      deposed = cluster_internals::take_over(c);
      newest_epoch = std::max(newest_epoch, deposed->epoch_floor);
      res.taken_over = true;
      trace.add(uint8_t{7});
      continue;
    }
    if (c.done(h)) break;
    if (sched.has_job()) continue;
    // Nothing can happen until the next timer: a delayed message or a timeout.
    if (guard > 1000000 || !sched.clock().trigger_timeout()) {
      hung = true;
      break;
    }
  }
  res.simulated_seconds = std::chrono::duration<double>(sched.clock().now() - started).count();
  res.rounds = rounds.size();
  for (auto r : bad_rounds)
    res.violations.push_back(fmt::format("synchronous round {}: more than {} steps, or steps reporting different losses", r,
                                         shape.num_workers));
  if (shape.consistency == "sync" && rounds.empty() && !applied.empty())
    res.violations.push_back("sync mode applied steps outside any round");
  if (plan) res.injected = plan->injected();
  if (hung) {
    res.violations.push_back("the run hung: nothing left to run and no timer pending");
    return res;
  }
  try {
    auto r = c.join(h);
    res.completed = true;
    res.steps = r.steps;
  } catch (const std::exception& e) {
    res.error = e.what();
  }
  // Restarts asked for near the end are answered after it.
  for (int i = 0; i < 100000 && sched.try_run_once(); ++i) {
  }
  for (auto& j : joins)
    if (j.wait_for(std::chrono::seconds(0)) != std::future_status::ready)
      res.violations.push_back("a restarted worker was never answered by the coordinator");
  if (deposed) {
    // Let the zombie wake up and try: its run must end, and not as a success.
    auto& old = deposed->result;
    for (int i = 0; i < 1000000 && old.wait_for(std::chrono::seconds(0)) != std::future_status::ready; ++i)
      if (!sched.try_run_once() && !sched.clock().trigger_timeout()) break;
    if (old.wait_for(std::chrono::seconds(0)) != std::future_status::ready)
      res.violations.push_back("the deposed coordinator's run never ended");
    else if (old.get())
      res.violations.push_back("the deposed coordinator completed its run");
  }
  if (!res.completed) {
    // A step that failed the same way poison_limit times is a correct outcome.
    if (res.error.find("poison_step") == std::string::npos) res.violations.push_back("the run failed: " + res.error);
    return res;
  }
  if (res.steps != res.expected_steps)
    res.violations.push_back(fmt::format("{} steps, expected {}", res.steps, res.expected_steps));
  std::map<std::pair<int64_t, uint32_t>, int64_t> per_epoch_pipeline;
  std::set<std::pair<uint32_t, uint64_t>> positions;
  for (auto& a : applied) {
    ++per_epoch_pipeline[{a.epoch, a.pipeline}];
    if (!positions.emplace(a.pipeline, a.position).second)
      res.violations.push_back(fmt::format("pipeline {} position {} applied twice", a.pipeline, a.position));
  }
  if (static_cast<int64_t>(applied.size()) != res.expected_steps)
    res.violations.push_back(fmt::format("{} applied steps reported, expected {}", applied.size(), res.expected_steps));
  for (int e = 0; e < shape.epochs; ++e)
    for (int p = 0; p < shape.num_pipelines; ++p) {
      auto n = per_epoch_pipeline[{e, static_cast<uint32_t>(p)}];
      if (n != batches[static_cast<size_t>(p)])
        res.violations.push_back(fmt::format("epoch {} pipeline {}: {} batches applied, the data has {}", e, p, n,
                                             batches[static_cast<size_t>(p)]));
    }
  auto stats_future = cluster_internals::shard_stats(c);
  while (sched.try_run_once()) {
  }
  auto stats = stats_future.get();
  // A step is torn when its shards applied slices of different computations (a re-run
  // after a partial push): allowed in async mode, counted.
  std::map<step_id, std::set<std::tuple<uint32_t, uint64_t, uint64_t>>> computations;
  for (auto& s : stats) {
    if (static_cast<int64_t>(s.base + s.applied) != res.expected_steps)
      res.violations.push_back(fmt::format("ps {} holds {} steps ({} restored, {} applied since), expected {} (each once)",
                                           s.shard, s.base + s.applied, s.base, s.applied, res.expected_steps));
    std::set<step_id> once;
    for (auto& a : s.apply_log) {
      if (!once.insert(a.step).second)
        res.violations.push_back(fmt::format("ps {} applied step {} twice", s.shard, to_string(a.step)));
      computations[a.step].emplace(a.worker, a.generation, a.attempt);
    }
  }
  for (auto& [step, by] : computations) res.torn += by.size() > 1 ? 1 : 0;
  auto vars_future = c.pull_variables();
  while (sched.try_run_once()) {
  }
  auto vars = vars_future.get();
  for (size_t v = 0; v < vars.size(); ++v) {
    const auto& m = vars[static_cast<model::variable_id>(v)];
    trace.bytes(m.data(), static_cast<size_t>(m.size()) * sizeof(float));
  }
  res.trace_hash = trace.h;
  return res;
}

}  // namespace actortrain
