#include <thread>
// The embedded cluster driven on CAF's test coordinator (simulated: no detached
// threads, the same code fit runs): exactly-once visitation and application in a
// fault-free run, repeated fit calls, a planted model, two clusters side by side, and
// clear errors for bad use.

#include <actortrain/actors/cluster/cluster.hpp>
#include <actortrain/actors/cluster/events.hpp>
#include <actortrain/actors/sim/fault_plan.hpp>
#include <actortrain/actors/core/send_seam.hpp>
#include <actortrain/dataset/all.hpp>
#include <actortrain/model/all.hpp>
#include <actortrain/model/checkpoint/checkpoint.hpp>
#include <actortrain/model/checkpoint/fault_file_system.hpp>
#include <actortrain/model/checkpoint/memory_file_system.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <set>
#include <limits>
#include <optional>

#include "../../actors/src/cluster/cluster_internals.hpp"
#include <actortrain/actors/core/errors.hpp>

// Last: CAF's test DSL defines macros (inject, expect) that clash with ordinary names.
#include "caf_test.hpp"
#include "random_matrix.hpp"

using namespace actortrain;
using model::matrix;
namespace ds = actortrain::dataset;

namespace {

std::string temp_dir() {
  char tmpl[] = "/tmp/actortrain-ckpt-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
  return tmpl;
}

using testing::random_matrix;

struct planted {
  matrix x, y, w;
  explicit planted(int64_t n) {
    x = random_matrix(n, 4, 3);
    w.resize(4, 1);
    w << 1.0f, -2.0f, 0.5f, 1.5f;
    y = (x * w).array() + 0.25f;
  }
};

struct cluster_fixture : testing::fixture {
  planted data{256};

  cluster_spec spec(int ps, int workers) {
    cluster_spec s;
    s.num_ps = ps;
    s.num_workers = workers;
    s.simulated = true;
    return s;
  }

  ds::dataset_fn sharded(int64_t batch) {
    auto d = ds::from_tensor_slices({data.x}, data.y);
    return [d, batch](const ds::input_context& ctx) {
      return d.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(batch);
    };
  }

  fit_result run(cluster& c, ds::dataset_fn fn, model::fit_options o) {
    o.verbose = 0;
    auto h = c.schedule(std::move(fn), o);
    for (int i = 0; i < 100000 && !c.done(h); ++i) sched.run();
    BOOST_REQUIRE(c.done(h));
    return c.join(h);
  }

  // Runs the scheduler until run `h` is done; when nothing can run, moves the simulated
  // clock by `tick` (a request timeout, or the delay of a held message).
  void drive(cluster& c, const cluster::run_handle& h, caf::timespan tick) {
    for (int i = 0; i < 1000 && !c.done(h); ++i) {
      sched.run();
      if (!sched.has_job()) sched.advance_time(tick);
    }
    BOOST_REQUIRE(c.done(h));
  }

  // One message at a time, handing the events to the callbacks in between, as the
  // application thread does while the actors run; the clock moves when nothing can.
  void step_through(cluster& c, const cluster::run_handle& h) {
    for (int i = 0; i < 200000 && !c.done(h); ++i)
      if (sched.has_job())
        sched.run_once();
      else
        sched.advance_time(std::chrono::seconds(1));
    BOOST_REQUIRE(c.done(h));
  }

  model::parameter_store variables(cluster& c) {
    auto f = c.pull_variables();
    sched.run();
    return f.get();
  }

  // The run's visits name each of `steps` (pipeline, position) once, and both shards'
  // state holds each step once. Returns the ps report.
  std::string every_step_once(cluster& c, const fit_result& r, size_t steps) {
    BOOST_TEST(r.visits.size() == steps);
    std::set<std::pair<uint32_t, uint64_t>> seen;
    for (auto& v : r.visits) BOOST_TEST(seen.emplace(v.pipeline, v.position).second);
    auto text = report(c);
    for (int p = 0; p < 2; ++p)
      BOOST_TEST(text.find(fmt::format("ps {}: applied {}, ", p, steps)) != std::string::npos, text);
    return text;
  }

  std::string report(cluster& c) {
    auto f = c.ps_report_async();
    sched.run();
    return f.get();
  }

  std::vector<event> drain(cluster& c) {
    std::vector<event> out;
    while (auto e = c.events()->pop()) out.push_back(*e);
    return out;
  }
};

// ps 1 dies when the 40th push reaches it (pushes to ps 0 and ps 1 in flight).
std::shared_ptr<fault_plan> kill_ps1_at_push40() {
  return std::make_shared<fault_plan>(std::vector<fault_rule>{
    {delivery::kind::kill_receiver, actor_role::worker, -1, actor_role::ps, 1, "push", 40, 1, {}}});
}

model::fit_options epochs(int n) {
  model::fit_options o;
  o.epochs = n;
  o.verbose = 0;
  return o;
}

}  // namespace

BOOST_FIXTURE_TEST_SUITE(embedded_cluster, cluster_fixture)

BOOST_AUTO_TEST_CASE(every_position_of_every_pipeline_is_applied_exactly_once) {
  cluster c{sys, spec(2, 3), model::model::sequential(4, {model::layers::dense(1)}), *model::make_sgd({0.05}),
            model::mean_squared_error()};
  auto r = run(c, sharded(10), epochs(2));
  BOOST_TEST(r.history["loss"].size() == 2u);
  // 256 rows over 3 pipelines: 86, 85, 85 rows -> 9 batches each of 10 (last smaller).
  BOOST_TEST(r.steps == 2 * 27);
  auto s = report(c);
  BOOST_TEST(s.find("ps 0: applied 54, duplicates 0, rejected 0") != std::string::npos, s);
  BOOST_TEST(s.find("ps 1: applied 54, duplicates 0, rejected 0") != std::string::npos, s);
  // The watermark lets the shards forget: they keep about the steps in flight (3 workers
  // x 3 tasks), not all 54.
  for (int p = 0; p < 2; ++p) {
    auto at = s.find("remembered ", s.find(fmt::format("ps {}:", p)));
    BOOST_REQUIRE(at != std::string::npos);
    BOOST_TEST(std::stoi(s.substr(at + 11)) <= 18, s);
  }
}

BOOST_AUTO_TEST_CASE(step_events_name_each_position_once) {
  cluster_spec sp = spec(1, 2);
  sp.num_dataset_shards = 2;
  cluster c{sys, sp, model::model::sequential(4, {model::layers::dense(1)}), *model::make_sgd({0.05}),
            model::mean_squared_error()};
  model::fit_options o = epochs(1);
  o.verbose = 0;
  auto h = c.schedule(sharded(16), o);
  // Drive the scheduler without polling, so the events stay in the queue for the test.
  sched.run();
  std::set<std::pair<uint32_t, uint64_t>> positions;
  size_t steps = 0;
  for (auto& e : drain(c))
    if (e.kind == event_kind::step_done) {
      ++steps;
      positions.emplace(e.pipeline, e.position);
    }
  BOOST_TEST(steps == positions.size());  // no position twice
  BOOST_TEST(steps == 16u);               // 128 rows per pipeline / 16
  for (uint32_t p = 0; p < 2; ++p)
    for (uint64_t k = 0; k < 8; ++k) BOOST_TEST(positions.count({p, k}) == 1u, "pipeline " << p << " position " << k);
  BOOST_TEST(c.done(h));
}

BOOST_AUTO_TEST_CASE(recovers_a_planted_linear_model) {
  cluster c{sys, spec(2, 2), model::model::sequential(4, {model::layers::dense(1)}), *model::make_adam({0.05}),
            model::mean_squared_error()};
  auto r = run(c, sharded(16), epochs(60));
  auto vars = variables(c);
  const matrix& w = vars[c.structure().find_variable("dense/kernel")];
  BOOST_TEST((w - data.w).cwiseAbs().maxCoeff() < 0.05, "learned\n" << w << "\nplanted\n" << data.w);
  BOOST_TEST(std::abs(vars[c.structure().find_variable("dense/bias")](0, 0) - 0.25f) < 0.05);
  BOOST_TEST(r.history["loss"].back() < 1e-3);
}

BOOST_AUTO_TEST_CASE(workers_that_wait_for_push_acks_train_the_same_model) {
  auto sp = spec(2, 2);
  sp.overlap_push = false;
  cluster c{sys, sp, model::model::sequential(4, {model::layers::dense(1)}), *model::make_adam({0.05}),
            model::mean_squared_error()};
  auto r = run(c, sharded(16), epochs(60));
  auto vars = variables(c);
  const matrix& w = vars[c.structure().find_variable("dense/kernel")];
  BOOST_TEST((w - data.w).cwiseAbs().maxCoeff() < 0.05, "learned\n" << w << "\nplanted\n" << data.w);
  BOOST_TEST(r.steps == 60 * 16);
}

BOOST_AUTO_TEST_CASE(workers_that_pull_ahead_train_the_same_model_one_update_behind) {
  auto sp = spec(1, 1);
  sp.pull_ahead = true;
  cluster c{sys, sp, model::model::sequential(4, {model::layers::dense(1)}), *model::make_adam({0.05}),
            model::mean_squared_error()};
  auto h = c.schedule(sharded(16), epochs(60));
  sched.run();  // without polling: the events stay in the queue for the test
  uint64_t max_staleness = 0;
  size_t steps = 0, behind = 0;
  for (auto& e : drain(c))
    if (e.kind == event_kind::step_done) {
      ++steps;
      max_staleness = std::max(max_staleness, e.staleness);
      behind += e.staleness == 1;
    }
  BOOST_REQUIRE(c.done(h));
  auto r = c.join(h);
  BOOST_TEST(r.steps == 60 * 16);
  BOOST_TEST(steps == 60u * 16u);
  BOOST_TEST(max_staleness == 1u);  // one worker: only its own last update is missing
  BOOST_TEST(behind > steps / 2);   // and the rounds sent ahead are used
  auto vars = variables(c);
  const matrix& w = vars[c.structure().find_variable("dense/kernel")];
  BOOST_TEST((w - data.w).cwiseAbs().maxCoeff() < 0.05, "learned\n" << w << "\nplanted\n" << data.w);
}

BOOST_AUTO_TEST_CASE(a_worker_added_during_a_run_takes_steps_and_a_restart_is_refused_while_alive) {
  auto sp = spec(1, 1);
  sp.visitation_log = true;
  cluster c{sys, sp, model::model::sequential(4, {model::layers::dense(1)}), *model::make_sgd({0.05}),
            model::mean_squared_error()};
  auto h = c.schedule(sharded(8), epochs(3));
  for (int i = 0; i < 40; ++i) sched.run_once();  // the run is under way on worker 0
  auto joined = c.add_worker_async();
  sched.run();
  BOOST_TEST(joined.get() == 1u);  // a new member starts at generation 1, as the first workers did
  auto refused = c.restart_worker_async(0);  // worker 0 is alive
  sched.run();
  BOOST_CHECK_THROW(refused.get(), std::runtime_error);
  BOOST_REQUIRE(c.done(h));
  auto r = c.join(h);
  BOOST_TEST(r.steps == 3 * 32);
  size_t by_new = 0;
  std::set<std::pair<uint32_t, uint64_t>> seen;
  for (auto& v : r.visits) {
    by_new += v.worker == 1;
    BOOST_TEST(seen.emplace(v.pipeline, v.position).second);
  }
  BOOST_TEST(by_new > 0u);
  BOOST_TEST(seen.size() == 96u);
}

BOOST_AUTO_TEST_CASE(coordinated_checkpoints_hold_every_shard_at_one_step_and_keep_the_newest) {
  char tmpl[] = "/tmp/actortrain-ckpt-XXXXXX";
  BOOST_REQUIRE(mkdtemp(tmpl) != nullptr);
  std::string dir = tmpl;
  auto sp = spec(2, 2);
  sp.checkpoint_dir = dir;
  sp.checkpoint_every = 16;
  sp.checkpoint_keep = 2;
  auto net = model::model::sequential(4, {model::layers::dense(1)});
  {
    cluster c{sys, sp, net, *model::make_adam({0.05}), model::mean_squared_error()};
    auto r = run(c, sharded(8), epochs(1));  // 2 pipelines x 16 batches
    BOOST_TEST(r.steps == 32);
    auto& fs = model::posix_file_system();
    auto list = model::list_checkpoints(fs, dir);
    // Written: step 0; when step 16 fell due (at 16 plus the steps then in flight, which
    // are applied first: one step for every shard); 32. The newest 2 are kept.
    BOOST_REQUIRE(list.size() == 2u);
    BOOST_TEST(list[0].step >= 16);
    BOOST_TEST(list[0].step < 32);
    BOOST_TEST(list[1].step == 32);
    auto data = model::read_checkpoint(fs, list[1].path);
    auto vars = variables(c);
    for (auto& v : data.variables) {
      BOOST_REQUIRE(v.partitions.size() == 1u);
      auto& p = v.partitions[0];
      BOOST_TEST((p.values - vars[c.structure().find_variable(v.name)]).cwiseAbs().maxCoeff() == 0.0f, v.name);
      BOOST_TEST(p.iterations == 32, v.name);  // every shard at the same step
      BOOST_TEST(p.slots.count("m") == 1u);
      BOOST_TEST(p.slots.count("v") == 1u);
    }
    BOOST_TEST(data.extra.at("run").get<int>() == 1);
  }
  // The newest checkpoint restores into a local model: same values, same step.
  {
    model::trainer t{net, model::make_adam({0.05}), model::mean_squared_error()};
    t.restore(dir);
    BOOST_TEST(t.steps() == 32);
    auto data = model::read_checkpoint(model::posix_file_system(), model::list_checkpoints(model::posix_file_system(), dir)[1].path);
    for (auto& v : data.variables)
      BOOST_TEST((t.variable(v.name) - v.partitions[0].values).cwiseAbs().maxCoeff() == 0.0f, v.name);
  }
  // A new cluster's first fit refuses a directory that holds checkpoints, unless it
  // resumes from it.
  cluster again{sys, sp, net, *model::make_adam({0.05}), model::mean_squared_error()};
  try {
    again.schedule(sharded(8), epochs(1));
    BOOST_FAIL("expected an error");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("already holds checkpoints (up to step 32)") != std::string::npos, e.what());
    BOOST_TEST(std::string(e.what()).find("resume_from") != std::string::npos, e.what());
  }
  std::filesystem::remove_all(dir);
}

BOOST_FIXTURE_TEST_CASE(a_run_cut_short_resumes_step_exact_and_bit_identical_into_other_shard_counts,
                        cluster_fixture) {
  auto dir = temp_dir();
  using model::layers::activation;
  auto net = model::model::sequential(4, {model::layers::dense(8, activation::tanh), model::layers::dense(1)});
  auto fn = sharded(16);  // one worker, one pipeline: 16 batches per epoch
  // The reference: the whole run without interruption, on one ps shard.
  fit_result full;
  model::parameter_store reference;
  {
    auto sp = spec(1, 1);
    sp.visitation_log = true;
    cluster c{sys, sp, net, *model::make_adam({0.01}), model::mean_squared_error()};
    full = run(c, fn, epochs(3));
    reference = variables(c);
  }
  BOOST_REQUIRE(full.steps == 48);
  // The same run on two shards, with checkpoints every 10 steps, cut short (the cluster
  // is destroyed, as a process would die) once a checkpoint past step 20 committed.
  {
    auto sp = spec(2, 1);
    sp.checkpoint_dir = dir;
    sp.checkpoint_every = 10;
    sp.checkpoint_keep = 10;
    sp.visitation_log = true;
    cluster c{sys, sp, net, *model::make_adam({0.01}), model::mean_squared_error()};
    c.schedule(fn, epochs(3));
    auto& fs = model::posix_file_system();
    for (int i = 0; i < 200000; ++i) {
      sched.run_once();
      if (i % 8 != 0) continue;
      auto l = model::list_checkpoints(fs, dir);
      if (!l.empty() && l.back().step >= 20) break;
    }
  }
  sched.run();
  auto committed = model::list_checkpoints(model::posix_file_system(), dir);
  BOOST_REQUIRE(!committed.empty());
  BOOST_REQUIRE(committed.back().step >= 20);
  BOOST_REQUIRE(committed.back().step < 48);  // the run was cut short
  // A new cluster on three shards resumes it.
  auto sp = spec(3, 1);
  sp.checkpoint_dir = dir;
  sp.checkpoint_every = 10;
  sp.visitation_log = true;
  cluster c{sys, sp, net, *model::make_adam({0.01}), model::mean_squared_error()};
  auto o = epochs(3);
  o.resume_from = dir;
  auto r = run(c, fn, o);
  BOOST_TEST(r.resumed_at == committed.back().step);
  BOOST_TEST(r.steps == 48);
  BOOST_REQUIRE(r.visits.size() == full.visits.size());
  std::set<std::pair<uint32_t, uint64_t>> seen;
  for (size_t i = 0; i < r.visits.size(); ++i) {
    BOOST_TEST(seen.emplace(r.visits[i].pipeline, r.visits[i].position).second);
    BOOST_TEST(r.visits[i].position == full.visits[i].position);  // the same steps, in the same order
  }
  BOOST_REQUIRE(r.history["loss"].size() == 3u);
  for (size_t e = 0; e < 3; ++e) BOOST_TEST(r.history["loss"][e] == full.history["loss"][e], "epoch " << e);
  auto vars = variables(c);
  for (size_t v = 0; v < vars.size(); ++v)
    BOOST_TEST((vars[static_cast<model::variable_id>(v)] - reference[static_cast<model::variable_id>(v)])
                 .cwiseAbs()
                 .maxCoeff() == 0.0f,
               "variable " << v);
  // Resuming a finished run is refused with the reason (its final checkpoint is past the
  // last epoch).
  cluster done{sys, sp, net, *model::make_adam({0.01}), model::mean_squared_error()};
  auto h = done.schedule(fn, o);
  for (int i = 0; i < 10000 && !done.done(h); ++i) sched.run();
  BOOST_CHECK_EXCEPTION(done.join(h), std::runtime_error, [](const std::runtime_error& e) {
    return std::string(e.what()).find("only 3 epochs") != std::string::npos;
  });
  std::filesystem::remove_all(dir);
}

BOOST_FIXTURE_TEST_CASE(a_lost_ps_shard_is_respawned_and_every_shard_rolls_back_to_the_last_checkpoint,
                        cluster_fixture) {
  auto dir = temp_dir();
  auto plan = kill_ps1_at_push40();
  auto sp = spec(2, 2);
  sp.checkpoint_dir = dir;
  sp.checkpoint_every = 16;
  sp.visitation_log = true;
  sp.faults = plan;
  cluster c{sys, sp, model::model::sequential(4, {model::layers::dense(1)}), *model::make_adam({0.05}),
            model::mean_squared_error()};
  auto h = c.schedule(sharded(8), epochs(3));
  drive(c, h, std::chrono::seconds(1));
  auto r = c.join(h);
  BOOST_TEST(plan->injected().size() == 1u);
  BOOST_TEST(r.ps_restores == 1);
  BOOST_TEST(r.steps == 96);
  // Both shards' state holds every step once: the respawned one from the checkpoint on.
  auto text = every_step_once(c, r, 96);
  BOOST_TEST(r.history["loss"].back() < r.history["loss"].front());
  std::filesystem::remove_all(dir);
}

// checkpoint.shared: each shard writes its own partitions, the coordinator commits the
// records. The same run writes the same checkpoints, file for file, as with the
// coordinator writing everything; and a lost shard is restored from them.
BOOST_FIXTURE_TEST_CASE(shards_writing_their_own_partitions_make_the_same_checkpoints, cluster_fixture) {
  auto net = model::model::sequential(4, {model::layers::dense(3), model::layers::dense(1)});
  auto checkpoints_of = [&](bool shared) {
    auto fs = std::make_shared<model::memory_file_system>();
    auto sp = spec(2, 2);
    sp.checkpoint_dir = "/ck";
    sp.checkpoint_every = 16;
    sp.checkpoint_keep = 10;
    sp.checkpoint_fs = fs;
    sp.checkpoint_shared = shared;
    cluster c{sys, sp, net, *model::make_adam({0.05}), model::mean_squared_error()};
    auto o = epochs(2);
    o.verbose = 0;
    auto h = c.schedule(sharded(8), o);
    sched.run();  // without polling: the events stay in the queue for the test
    auto events = drain(c);
    BOOST_REQUIRE(c.done(h));
    auto r = c.join(h);
    BOOST_TEST(r.steps == 64);
    // Shared: no tensor came to the coordinator for any checkpoint.
    size_t checkpoints = 0;
    for (auto& e : events)
      if (e.kind == event_kind::checkpoint_done) {
        ++checkpoints;
        BOOST_TEST((e.values.at("bytes_to_coordinator") == 0.0) == shared);
      }
    BOOST_TEST(checkpoints >= 3u);
    std::map<std::string, std::string> files;  // path -> bytes
    for (auto& ck : model::list_checkpoints(*fs, "/ck")) {
      model::read_checkpoint(*fs, ck.path);  // every CRC and shape checks out
      std::vector<std::string> names;
      BOOST_REQUIRE(fs->list_dir(ck.path, names).ok());
      for (auto& n : names) BOOST_REQUIRE(fs->read_file(ck.path + "/" + n, files[ck.path + "/" + n]).ok());
    }
    return files;
  };
  auto by_shards = checkpoints_of(true);
  auto by_coordinator = checkpoints_of(false);
  BOOST_TEST(by_shards.size() >= 3u * 9u);  // 3 or more checkpoints of 4 partitions x (values, m, v) + manifest
  BOOST_TEST(by_shards.size() == by_coordinator.size());
  for (auto& [path, bytes] : by_coordinator) {
    auto i = by_shards.find(path);
    BOOST_REQUIRE_MESSAGE(i != by_shards.end(), path);
    BOOST_TEST((i->second == bytes), path);
  }
  // ps 1 dies mid-run: it is respawned and every shard rolls back to a shared checkpoint.
  auto plan = kill_ps1_at_push40();
  auto sp = spec(2, 2);
  sp.checkpoint_dir = "/ck";
  sp.checkpoint_every = 16;
  sp.checkpoint_fs = std::make_shared<model::memory_file_system>();
  sp.checkpoint_shared = true;
  sp.visitation_log = true;
  sp.faults = plan;
  cluster c{sys, sp, net, *model::make_adam({0.05}), model::mean_squared_error()};
  auto h = c.schedule(sharded(8), epochs(3));
  drive(c, h, std::chrono::seconds(1));
  auto r = c.join(h);
  BOOST_TEST(plan->injected().size() == 1u);
  BOOST_TEST(r.ps_restores == 1);
  BOOST_TEST(r.steps == 96);
  every_step_once(c, r, 96);
}

// cluster::status: workers, shards with their partitions, the last checkpoint, and a
// lost ps shard with the roll-back among the recent events.
BOOST_FIXTURE_TEST_CASE(the_status_names_workers_shards_the_last_checkpoint_and_recent_failures, cluster_fixture) {
  auto plan = kill_ps1_at_push40();
  auto sp = spec(2, 2);
  sp.checkpoint_dir = "/ck";
  sp.checkpoint_every = 16;
  sp.checkpoint_fs = std::make_shared<model::memory_file_system>();
  sp.faults = plan;
  cluster c{sys, sp, model::model::sequential(4, {model::layers::dense(3), model::layers::dense(1)}),
            *model::make_adam({0.05}), model::mean_squared_error()};
  auto h = c.schedule(sharded(8), epochs(2));
  drive(c, h, std::chrono::seconds(1));
  auto r = c.join(h);
  BOOST_REQUIRE(r.ps_restores == 1);
  auto f = c.status_async();
  sched.run();
  BOOST_REQUIRE(f.wait_for(std::chrono::seconds(0)) == std::future_status::ready);
  auto text = f.get();
  BOOST_TEST_MESSAGE(text);
  auto has = [&](const std::string& part) { return text.find(part) != std::string::npos; };
  BOOST_TEST(has("run 1: idle, 2 epoch(s) done, 64 steps applied"), text);
  BOOST_TEST(has("  worker 0  idle  generation 1  "), text);
  BOOST_TEST(has("  worker 1  idle  generation 1  "), text);
  BOOST_TEST(has("    dense/kernel part 0  rows [0, 4) x 3  48 B  version "), text);
  BOOST_TEST(has("  ps 1  "), text);
  BOOST_TEST(has("last checkpoint: step 64, "), text);
  BOOST_TEST(has("ps shard 1 lost"), text);
  BOOST_TEST(has("every ps shard restored to the checkpoint of step "), text);
}

// Counts the messages of each kind and delivers them all.
// The largest difference between two sets of variables (0: bit-identical).
float max_difference(const model::parameter_store& a, const model::parameter_store& b) {
  BOOST_REQUIRE(a.size() == b.size());
  float d = 0;
  for (size_t i = 0; i < a.size(); ++i)
    d = std::max(d, (a[static_cast<model::variable_id>(i)] - b[static_cast<model::variable_id>(i)]).cwiseAbs().maxCoeff());
  return d;
}

struct counting_policy : fault_policy {
  std::mutex mtx;
  std::map<caf::atom_value, size_t> seen;
  delivery decide(const message_info& m) override {
    std::lock_guard<std::mutex> g{mtx};
    ++seen[m.kind];
    return delivery::deliver();
  }
};

// 2 epochs of 64 steps on 2 ps shards and 2 workers, the spec changed by `tune`: every
// step applied once; `sent` is how many messages of `kind` went out.
template <class Tune>
fit_result counted_run(cluster_fixture& fx, const model::model& net, Tune tune, caf::atom_value kind, size_t& sent) {
  auto count = std::make_shared<counting_policy>();
  auto sp = fx.spec(2, 2);
  tune(sp);
  sp.visitation_log = true;
  sp.faults = count;
  cluster c{fx.sys, sp, net, *model::make_adam({0.05}), model::mean_squared_error()};
  auto r = fx.run(c, fx.sharded(8), epochs(2));
  BOOST_TEST(r.steps == 64);
  fx.every_step_once(c, r, 64);
  sent = count->seen[kind];
  return r;
}

// Downpour's n_fetch: with pull_every 4 a worker pulls for about a quarter of its
// training steps, every step is still applied once, and the staleness shows the reuse.
BOOST_FIXTURE_TEST_CASE(pull_every_n_steps_pulls_a_quarter_as_often_and_reports_the_staleness, cluster_fixture) {
  auto net = model::model::sequential(4, {model::layers::dense(3), model::layers::dense(1)});
  size_t every = 0, fourth = 0;
  auto r1 = counted_run(*this, net, [](cluster_spec&) {}, pull_atom::value, every);
  auto r4 = counted_run(*this, net, [](cluster_spec& sp) { sp.pull_every = 4; }, pull_atom::value, fourth);
  // Each step asks both shards (plus the evaluation's pulls, the same in both runs).
  BOOST_TEST(every >= 2u * 64u);
  BOOST_TEST(fourth * 2 < every, fourth << " pulls with pull_every 4, " << every << " with 1");
  BOOST_TEST(r4.max_staleness > r1.max_staleness);
  BOOST_TEST(r4.mean_staleness > r1.mean_staleness);
  // Refused where it would break a guarantee.
  auto sp = spec(2, 2);
  sp.pull_every = 4;
  sp.consistency = consistency_mode::bounded_staleness(1);
  BOOST_CHECK_THROW((cluster{sys, sp, net, *model::make_adam({0.05}), model::mean_squared_error()}), std::invalid_argument);
  sp.consistency = consistency_mode::async();
  sp.pull_ahead = true;
  BOOST_CHECK_THROW((cluster{sys, sp, net, *model::make_adam({0.05}), model::mean_squared_error()}), std::invalid_argument);
}

// Downpour's local update: with one worker and SGD at the shard, a local step at the
// shard's own rate moves the reused copy exactly where the shard's update moves its
// variables, so pulling every 2 steps then trains like pulling every step (to float
// rounding); without it the reused steps compute at stale values and end elsewhere.
BOOST_FIXTURE_TEST_CASE(local_updates_make_a_reused_pull_what_a_fresh_one_would_be, cluster_fixture) {
  auto net = model::model::sequential(4, {model::layers::dense(3), model::layers::dense(1)});
  auto one_worker = [&](int pull_every, double local_lr) {
    auto sp = spec(1, 1);
    sp.pull_every = pull_every;
    sp.local_learning_rate = local_lr;
    sp.overlap_push = false;
    cluster c{sys, sp, net, *model::make_sgd({0.05}), model::mean_squared_error()};
    auto r = run(c, sharded(8), epochs(2));
    BOOST_TEST(r.steps == 64);
    return variables(c);
  };
  auto fresh = one_worker(1, 0), local = one_worker(2, 0.05), stale = one_worker(2, 0);
  BOOST_TEST(max_difference(local, fresh) < 1e-5f, "local steps at the shard's rate against pulling every step");
  BOOST_TEST(max_difference(stale, fresh) > 1e-3f, "reusing the pull as it came");
  BOOST_TEST(max_difference(one_worker(2, 0.025), fresh) > 1e-4f);  // another rate: another path
  // Refused where there is no copy to move, or no sense in the rate.
  auto sp = spec(1, 1);
  sp.local_learning_rate = 0.05;
  BOOST_CHECK_THROW((cluster{sys, sp, net, *model::make_sgd({0.05}), model::mean_squared_error()}), std::invalid_argument);
  sp.pull_every = 2;
  sp.local_learning_rate = -1;
  BOOST_CHECK_THROW((cluster{sys, sp, net, *model::make_sgd({0.05}), model::mean_squared_error()}), std::invalid_argument);
}

// Downpour's n_push: with push_every 4 a worker pushes once per 4 steps (a quarter of
// the pushes), every step still counts applied once on every shard; and with pull_every
// equal to it, one worker's mean of two batches of 8 is one step on their 16 examples:
// the same variables as a run with batches of 16, up to float rounding.
BOOST_FIXTURE_TEST_CASE(push_every_n_steps_pushes_their_mean_once, cluster_fixture) {
  auto net = model::model::sequential(4, {model::layers::dense(3), model::layers::dense(1)});
  size_t every = 0, fourth = 0;
  counted_run(*this, net, [](cluster_spec& sp) { sp.steps_per_execution = 4; }, push_atom::value, every);
  counted_run(*this, net, [](cluster_spec& sp) { sp.push_every = sp.steps_per_execution = 4; }, push_atom::value, fourth);
  BOOST_TEST(every == 2u * 64u);
  BOOST_TEST(fourth == 2u * 16u, fourth << " pushes with push_every 4");
  // The data ends inside a group: 6 batches of 24 per pipeline, tasks of 4; the last
  // group (2 steps) is pushed before its task reports the end.
  {
    auto sp = spec(2, 2);
    sp.push_every = sp.steps_per_execution = 4;
    sp.visitation_log = true;
    cluster c{sys, sp, net, *model::make_adam({0.05}), model::mean_squared_error()};
    auto r = run(c, sharded(24), epochs(2));
    BOOST_TEST(r.steps == 2 * 2 * 6);
    every_step_once(c, r, 24);
  }
  auto one_worker = [&](int batch, int every_n) {
    auto sp = spec(1, 1);
    sp.push_every = sp.pull_every = sp.steps_per_execution = every_n;
    sp.overlap_push = false;
    cluster c{sys, sp, net, *model::make_adam({0.05}), model::mean_squared_error()};
    auto r = run(c, sharded(batch), epochs(2));
    BOOST_TEST(r.steps == 2 * 256 / batch);
    return variables(c);
  };
  auto grouped = one_worker(8, 2), large = one_worker(16, 1);
  BOOST_TEST(max_difference(grouped, large) < 1e-5f, "mean of two batches of 8 vs one batch of 16");
  BOOST_TEST(max_difference(grouped, one_worker(8, 1)) > 1e-3f);  // and not the same as pushing each
  // A worker that crashes mid-group: its task runs again whole elsewhere, each step once.
  {
    auto sp = spec(2, 2);
    sp.push_every = sp.steps_per_execution = 4;
    sp.visitation_log = true;
    sp.restart_lost_workers = true;
    sp.faults = std::make_shared<fault_plan>(std::vector<fault_rule>{
      {delivery::kind::crash, actor_role::worker, 0, actor_role::ps, -1, "pull", 10, 1, {}}});
    cluster c{sys, sp, net, *model::make_adam({0.05}), model::mean_squared_error()};
    auto h = c.schedule(sharded(8), epochs(2));
    drive(c, h, std::chrono::seconds(1));
    auto r = c.join(h);
    BOOST_TEST(r.restarts == 1);
    BOOST_TEST(r.steps == 64);
    every_step_once(c, r, 64);
  }
  // Refused where it cannot hold.
  auto sp = spec(2, 2);
  sp.push_every = 2;
  BOOST_CHECK_THROW((cluster{sys, sp, net, *model::make_adam({0.05}), model::mean_squared_error()}), std::invalid_argument);
  sp.steps_per_execution = 2;
  sp.consistency = consistency_mode::sync();
  BOOST_CHECK_THROW((cluster{sys, sp, net, *model::make_adam({0.05}), model::mean_squared_error()}), std::invalid_argument);
}

// Callbacks: each hook once per thing it reports, on the thread in join; a CSV row per
// epoch with the history's values; an exponential learning-rate schedule that the
// shards' optimizer (as the last checkpoint records it) follows; a throwing callback
// fails the run at its end, naming the error.
struct recording_callback : callback {
  std::map<std::string, int> calls;
  std::vector<int64_t> epochs_begun;
  std::vector<failure_info> failures;
  std::thread::id thread;
  void seen(const char* what) {
    ++calls[what];
    thread = std::this_thread::get_id();
  }
  void on_train_begin(training&) override { seen("train_begin"); }
  void on_train_end(training&, bool failed) override { seen(failed ? "train_failed" : "train_end"); }
  void on_epoch_begin(training&, int64_t e) override {
    seen("epoch_begin");
    epochs_begun.push_back(e);
  }
  void on_epoch_end(training&, int64_t, const std::map<std::string, double>&) override { seen("epoch_end"); }
  void on_train_batch_end(training&, const step_info&) override { seen("step_end"); }
  void on_failure(training&, const failure_info& f) override {
    seen("failure");
    failures.push_back(f);
  }
  void on_checkpoint(training&, int64_t, const std::string&) override { seen("checkpoint"); }
};

BOOST_FIXTURE_TEST_CASE(callbacks_see_the_run_log_epochs_and_schedule_the_learning_rate, cluster_fixture) {
  auto dir = temp_dir();
  auto fs = std::make_shared<model::memory_file_system>();
  auto sp = spec(2, 2);
  sp.checkpoint_dir = "/ck";
  sp.checkpoint_every = 1000;  // the first and the last
  sp.checkpoint_fs = fs;
  cluster c{sys, sp, model::model::sequential(4, {model::layers::dense(1)}), *model::make_adam({0.05}),
            model::mean_squared_error()};
  auto rec = std::make_shared<recording_callback>();
  c.add_callback(rec);
  c.add_callback(csv_logger(dir + "/log.csv"));
  auto schedule = exponential_decay(0.05, 0.5);
  c.add_callback(learning_rate_schedule(schedule));
  auto h = c.schedule(sharded(8), epochs(3));
  step_through(c, h);
  auto r = c.join(h);
  BOOST_TEST(r.steps == 96);
  BOOST_TEST(rec->calls["train_begin"] == 1);
  BOOST_TEST(rec->calls["train_end"] == 1);
  BOOST_TEST(rec->epochs_begun == (std::vector<int64_t>{0, 1, 2}), "epochs begun");
  BOOST_TEST(rec->calls["epoch_end"] == 3);
  // Every applied step but those the bounded queue dropped (and the redone ones again).
  BOOST_TEST(rec->calls["step_end"] + static_cast<int>(c.events()->dropped()) >= 96);
  BOOST_TEST(rec->calls["checkpoint"] >= 2);
  BOOST_TEST(rec->failures.empty());
  BOOST_TEST((rec->thread == std::this_thread::get_id()));  // the application's thread
  // The CSV: a header and a row per epoch with the history's numbers.
  std::ifstream in(dir + "/log.csv");
  std::string header, line;
  std::getline(in, header);
  BOOST_TEST(header.rfind("epoch,", 0) == 0u, header);
  BOOST_TEST(header.find("loss") != std::string::npos, header);
  std::vector<std::string> rows;
  while (std::getline(in, line)) rows.push_back(line);
  BOOST_REQUIRE(rows.size() == 3u);
  auto losses = r.history["loss"];
  for (size_t e = 0; e < 3; ++e) {
    BOOST_TEST(rows[e].rfind(std::to_string(e) + ",", 0) == 0u, rows[e]);
    BOOST_TEST(rows[e].find(fmt::format("{:.9g}", losses[e])) != std::string::npos, rows[e] << " lacks " << losses[e]);
  }
  // The last checkpoint records the rate of the last epoch.
  auto last = model::latest_checkpoint(*fs, "/ck");
  BOOST_REQUIRE(last);
  auto data = model::read_checkpoint(*fs, last->path);
  double lr = -1;
  for (auto& [k, v] : data.hyperparams)
    if (k == "learning_rate") lr = v;
  BOOST_TEST(lr == schedule(2), "learning rate " << lr);
  std::filesystem::remove_all(dir);
  // A lost ps shard: on_failure hears the loss and the roll-back (and a redone epoch
  // begins again).
  auto sp2 = spec(2, 2);
  sp2.checkpoint_dir = "/ck2";
  sp2.checkpoint_every = 16;
  sp2.checkpoint_fs = fs;
  sp2.faults = kill_ps1_at_push40();
  cluster c2{sys, sp2, model::model::sequential(4, {model::layers::dense(1)}), *model::make_adam({0.05}),
             model::mean_squared_error()};
  auto rec2 = std::make_shared<recording_callback>();
  c2.add_callback(rec2);
  // A rate set after a checkpoint and lost with the roll-back: what callbacks read of the
  // hyperparameters follows the shards back to the checkpoint's.
  struct rate_watch : callback {
    bool set = false;
    double after_restore = -1;
    int64_t restored_to = -1;
    void on_train_batch_end(training& t, const step_info& s) override {
      if (!set && s.step >= 34) {
        t.set_hyperparams({{"learning_rate", 0.5}});
        set = true;
      }
    }
    void on_failure(training& t, const failure_info& f) override {
      if (f.kind != "ps_restored") return;
      after_restore = t.hyperparams().at("learning_rate");
      restored_to = f.count;
    }
  };
  auto watch = std::make_shared<rate_watch>();
  c2.add_callback(watch);
  auto h2 = c2.schedule(sharded(8), epochs(3));
  drive(c2, h2, std::chrono::seconds(1));
  BOOST_TEST(c2.join(h2).steps == 96);
  BOOST_TEST(watch->set);
  BOOST_REQUIRE(watch->restored_to >= 0);
  {
    double in_checkpoint = -1;
    for (auto& ck : model::list_checkpoints(*fs, "/ck2"))
      if (ck.step == watch->restored_to)
        for (auto& [k, v] : model::read_checkpoint(*fs, ck.path).hyperparams)
          if (k == "learning_rate") in_checkpoint = v;
    if (in_checkpoint < 0) in_checkpoint = 0.05;  // pruned since: the run's rate until the set
    BOOST_TEST(watch->after_restore == in_checkpoint);
  }
  bool lost = false, restored = false;
  for (auto& f : rec2->failures) {
    lost = lost || (f.kind == "ps_lost" && f.index == 1 && !f.text.empty());
    restored = restored || (f.kind == "ps_restored" && f.count >= 16);
  }
  BOOST_TEST(lost);
  BOOST_TEST(restored);
  BOOST_TEST(rec2->calls["train_end"] == 1);
}

// The callbacks of one fit (fit_options::callbacks) with Keras's fit options on a
// cluster: initial_epoch numbers the epochs, validation_freq picks the epochs that
// validate (on_test_begin/end before their on_epoch_end), every step handed to a worker
// begins a batch, and reduce_lr_on_plateau lowers the rate the ps shards hold (read
// from the shards' last checkpoint, not from the callback).
BOOST_FIXTURE_TEST_CASE(callbacks_of_one_fit_and_keras_fit_options_on_a_cluster, cluster_fixture) {
  struct hooks : callback {
    std::vector<int64_t> epochs_begun;
    int begun = 0, ended = 0, tests = 0, tests_ended_with_loss = 0;
    cluster* seen_cluster = nullptr;
    bool waits_for_epoch_end() const override { return true; }
    void on_train_begin(training& t) override { seen_cluster = &cluster_of(t); }
    void on_epoch_begin(training&, int64_t e) override { epochs_begun.push_back(e); }
    void on_train_batch_begin(training&, int64_t, int64_t) override { ++begun; }
    void on_train_batch_end(training&, const step_info&) override { ++ended; }
    void on_test_begin(training&) override { ++tests; }
    void on_test_end(training&, const model::logs& l) override { tests_ended_with_loss += l.count("loss") ? 1 : 0; }
  };
  auto fs = std::make_shared<model::memory_file_system>();
  auto sp = spec(2, 2);
  sp.checkpoint_dir = "/ck";
  sp.checkpoint_every = 1000;  // the first and the last
  sp.checkpoint_fs = fs;
  cluster c{sys, sp, model::model::sequential(4, {model::layers::dense(1)}), *model::make_adam({0.05}),
            model::mean_squared_error()};
  auto rec = std::make_shared<hooks>();
  reduce_lr_options ro;
  ro.monitor = "loss";
  ro.mode = "max";  // a falling loss never improves: every epoch after the first lowers the rate
  ro.patience = 1;
  ro.factor = 0.5;
  auto plateau = std::make_shared<reduce_lr_on_plateau>(ro);
  auto o = epochs(4);
  o.verbose = 0;
  o.initial_epoch = 1;
  o.validation_freq = 2;  // after epochs 1 and 3 (from 0)
  o.validation = ds::from_tensor_slices({data.x}, data.y).batch(32);
  o.callbacks = {rec, plateau};
  auto h = c.schedule(sharded(8), o);
  step_through(c, h);
  auto r = c.join(h);
  BOOST_TEST(r.steps == 96);
  BOOST_TEST(rec->seen_cluster == &c);
  BOOST_TEST(rec->epochs_begun == (std::vector<int64_t>{1, 2, 3}), boost::test_tools::per_element());
  BOOST_TEST(r.history["loss"].size() == 3u);
  BOOST_TEST(r.history["val_loss"].size() == 2u);
  BOOST_TEST(rec->tests == 2);
  BOOST_TEST(rec->tests_ended_with_loss == 2);
  BOOST_TEST(r.dropped_events == 0u);
  // Every step begins before it ends; an epoch that ends with its data also begins the
  // probes past its end, which find no batch and never end.
  BOOST_TEST(rec->begun >= 96);
  BOOST_TEST(rec->ended == 96);
  BOOST_TEST(plateau->rates() == (std::vector<double>{0.025, 0.0125}), boost::test_tools::per_element());
  auto last = model::latest_checkpoint(*fs, "/ck");
  BOOST_REQUIRE(last);
  double lr = -1;
  for (auto& [k, v] : model::read_checkpoint(*fs, last->path).hyperparams)
    if (k == "learning_rate") lr = v;
  BOOST_TEST(lr == 0.0125, boost::test_tools::tolerance(1e-12));
  // The next fit is without them.
  auto o2 = epochs(1);
  run(c, sharded(8), o2);
  BOOST_TEST(rec->ended == 96);
  // What a cluster refuses, saying what to do instead.
  auto refused = [&](model::fit_options bad, const std::string& words) {
    try {
      c.schedule(sharded(8), bad);
      BOOST_FAIL("scheduled: " << words);
    } catch (const std::invalid_argument& e) {
      BOOST_TEST(std::string(e.what()).find(words) != std::string::npos, e.what());
    }
  };
  auto bad = epochs(2);
  bad.validation_split = 0.2;
  refused(bad, "take()/skip()");
  bad = epochs(2);
  bad.class_weight = {{0, 1.0}};
  refused(bad, "model::class_weighted(loss, weights)");
  bad = epochs(2);
  bad.validation_freq = 0;
  refused(bad, "validation_freq = 0 < 1");
}

// TensorFlow's InputOptions: fit_options::input.per_replica_buffer_size is how far the
// run's dataset shards read ahead. Measured from outside: batches made by the pipeline
// (a counting map) against steps applied (the event stream), message by message.
BOOST_FIXTURE_TEST_CASE(input_options_set_how_far_the_dataset_shards_read_ahead, cluster_fixture) {
  auto lead = [&](size_t buffer) {
    auto made = std::make_shared<int64_t>(0);
    auto d = ds::from_tensor_slices({data.x}, data.y).batch(4).map([made](ds::element e) {
      ++*made;
      return e;
    });
    auto sp = spec(1, 1);
    sp.num_dataset_shards = 1;
    sp.prefetch = 2;
    cluster c{sys, sp, model::model::sequential(4, {model::layers::dense(1)}), *model::make_sgd({0.01}),
              model::mean_squared_error()};
    auto o = epochs(1);
    o.verbose = 0;
    o.input.per_replica_buffer_size = buffer;
    auto applied = std::make_shared<int64_t>(0);
    cluster_internals::observe(c, [applied](const event& e) { *applied += e.kind == event_kind::step_done; });
    auto h = c.schedule([d](const ds::input_context&) { return d; }, o);
    int64_t most = 0;
    for (int i = 0; i < 200000 && !c.done(h); ++i) {  // done() hands each event to the observer
      if (sched.has_job())
        sched.run_once();
      else
        sched.advance_time(std::chrono::seconds(1));
      most = std::max(most, *made - *applied);
    }
    BOOST_REQUIRE(c.done(h));
    BOOST_TEST(c.join(h).steps == 64);
    return most;
  };
  const auto small = lead(0), large = lead(24);  // 0: the cluster's prefetch (2)
  BOOST_TEST_MESSAGE("batches made ahead of the steps applied: " << small << " with the default, " << large
                                                                  << " with a buffer of 24");
  BOOST_TEST(large >= 24);
  BOOST_TEST(small <= 10);
}

// TerminateOnNaN on a cluster: the run stops at the end of the epoch whose step
// reported a loss that is not finite. (A gradient that is not finite never gets that
// far: the ps shards refuse it and the run fails at once, invalid_gradient.) The loss
// here reports NaN with mean squared error's finite gradient.
BOOST_FIXTURE_TEST_CASE(terminate_on_nan_stops_a_cluster_at_that_epochs_end, cluster_fixture) {
  struct nan_loss : model::loss {
    model::loss_ptr mse = model::mean_squared_error();
    std::string describe() const override { return "nan_loss"; }
    double compute(const model::matrix& p, const model::matrix& y, model::matrix* d) const override {
      mse->compute(p, y, d);
      return std::nan("");
    }
    void per_example(const model::matrix& p, const model::matrix& y, model::matrix& out) const override {
      mse->per_example(p, y, out);
    }
  };
  cluster c{sys, spec(1, 2), model::model::sequential(4, {model::layers::dense(1)}), *model::make_sgd({0.01}),
            std::make_shared<nan_loss>()};
  auto nan = std::make_shared<terminate_on_nan>();
  auto o = epochs(5);
  o.callbacks = {nan};
  auto r = run(c, sharded(8), o);
  BOOST_TEST(nan->terminated_at() > 0);
  BOOST_TEST(r.stopped_epoch == 0);
  BOOST_TEST(r.history["loss"].size() == 1u);
  BOOST_TEST(r.steps == 32);
}

BOOST_FIXTURE_TEST_CASE(a_throwing_callback_fails_the_run_at_its_end, cluster_fixture) {
  struct thrower : callback {
    void on_epoch_end(training&, int64_t e, const std::map<std::string, double>&) override {
      if (e == 0) throw std::runtime_error("the log disk is full");
    }
  };
  cluster c{sys, spec(1, 1), model::model::sequential(4, {model::layers::dense(1)}), *model::make_adam({0.05}),
            model::mean_squared_error()};
  c.add_callback(std::make_shared<thrower>());
  try {
    run(c, sharded(8), epochs(2));
    BOOST_FAIL("the run succeeded");
  } catch (const std::exception& e) {
    BOOST_TEST(std::string(e.what()).find("a callback failed: the log disk is full") != std::string::npos, e.what());
  }
  BOOST_CHECK_THROW(c.add_callback(nullptr), std::invalid_argument);
  BOOST_CHECK_THROW(exponential_decay(0, 0.5), std::invalid_argument);
  BOOST_CHECK_THROW(cosine_decay(0.1, 0), std::invalid_argument);
  auto cos = cosine_decay(0.1, 4, 0.01);
  BOOST_TEST(cos(0) == 0.1);
  BOOST_TEST(std::abs(cos(4) - 0.01) < 1e-12);
  BOOST_TEST(std::abs(cos(2) - 0.055) < 1e-12);
  BOOST_TEST(step_decay(0.1, 0.5, 2)(3) == 0.05);
}


// Early stopping at the epoch gate: "loss" monitored with mode max never improves after
// epoch 0 (the loss falls), so patience 2 stops the run after epoch 2, and restore_best
// leaves the variables of epoch 0's end, bit for bit those of a one-epoch run.
BOOST_FIXTURE_TEST_CASE(early_stopping_stops_after_its_patience_and_restores_the_best_epoch, cluster_fixture) {
  auto net = model::model::sequential(4, {model::layers::dense(1)});
  auto one_epoch = [&] {
    cluster c{sys, spec(2, 1), net, *model::make_adam({0.05}), model::mean_squared_error()};
    run(c, sharded(8), epochs(1));
    return variables(c);
  }();
  for (bool restore : {true, false}) {
    cluster c{sys, spec(2, 1), net, *model::make_adam({0.05}), model::mean_squared_error()};
    auto stopper = std::make_shared<early_stopping>(early_stopping_options{"loss", 2, 0, "max", restore});
    auto rec = std::make_shared<recording_callback>();
    c.add_callback(stopper);
    c.add_callback(rec);
    auto r = run(c, sharded(8), epochs(6));
    BOOST_TEST(r.history["loss"].size() == 3u);
    BOOST_TEST(r.steps == 3 * 32);
    BOOST_TEST(r.stopped_epoch == 2);
    BOOST_TEST(stopper->stopped_epoch() == 2);
    BOOST_TEST(stopper->best_epoch() == 0);
    BOOST_TEST(rec->epochs_begun == (std::vector<int64_t>{0, 1, 2}), "no epoch begins after the stop");
    BOOST_TEST(rec->calls["train_end"] == 1);
    BOOST_TEST(r.restored_epoch == (restore ? 0 : -1));
    auto d = max_difference(variables(c), one_epoch);
    if (restore)
      BOOST_TEST(d == 0.0f);
    else
      BOOST_TEST(d > 0.0f);
  }
  // A monitor the logs lack fails the run after the first epoch, naming the keys there.
  cluster c{sys, spec(1, 1), net, *model::make_adam({0.05}), model::mean_squared_error()};
  c.add_callback(std::make_shared<early_stopping>(early_stopping_options{}));
  try {
    run(c, sharded(8), epochs(4));
    BOOST_FAIL("the run succeeded");
  } catch (const std::exception& e) {
    BOOST_TEST(std::string(e.what()).find("no 'val_loss' in the logs of epoch 1 (loss): give fit validation data") !=
                 std::string::npos, e.what());
  }
  BOOST_CHECK_THROW(early_stopping(early_stopping_options{"loss", -1, 0, "auto", false}), std::invalid_argument);
  BOOST_CHECK_THROW(early_stopping(early_stopping_options{"loss", 0, 0, "sideways", false}), std::invalid_argument);
  BOOST_CHECK_THROW(c.stop_training(), std::logic_error);  // no run
  BOOST_CHECK_THROW(c.keep_state(), std::logic_error);
}

// A ps shard lost after the best epoch was kept: every shard rolls back to the last
// checkpoint, dropping the kept state; training still stops at its patience with the
// exact step count. When the roll-back redid the best epoch's end, that end is kept
// anew and restored; else the run ends with its last state.
BOOST_FIXTURE_TEST_CASE(early_stopping_survives_a_lost_ps_shard_and_ends_without_the_dropped_state, cluster_fixture) {
  auto fs = std::make_shared<model::memory_file_system>();
  auto sp = spec(2, 2);
  sp.checkpoint_dir = "/ck";
  sp.checkpoint_every = 16;
  sp.checkpoint_fs = fs;
  sp.faults = kill_ps1_at_push40();  // in epoch 1, after epoch 0's state was kept
  cluster c{sys, sp, model::model::sequential(4, {model::layers::dense(1)}), *model::make_adam({0.05}),
            model::mean_squared_error()};
  auto stopper = std::make_shared<early_stopping>(early_stopping_options{"loss", 2, 0, "max", true});
  auto rec = std::make_shared<recording_callback>();
  c.add_callback(stopper);
  c.add_callback(rec);
  auto h = c.schedule(sharded(8), epochs(6));
  drive(c, h, std::chrono::seconds(1));
  auto r = c.join(h);
  BOOST_TEST(r.ps_restores >= 1);
  BOOST_TEST(r.steps == 96);
  BOOST_TEST(r.history["loss"].size() == 3u);
  BOOST_TEST(r.stopped_epoch == 2);
  BOOST_TEST(stopper->best_epoch() == 0);
  bool redone = rec->calls["epoch_end"] == 4;  // epoch 0's end, again after the roll-back
  BOOST_TEST_MESSAGE("epoch ends seen: " << rec->calls["epoch_end"] << ", restored " << r.restored_epoch);
  BOOST_TEST(rec->calls["epoch_end"] == (redone ? 4 : 3));
  BOOST_TEST(r.restored_epoch == (redone ? 0 : -1));
}

// A resumed run continues the learning-rate schedule: its first epoch begins at the
// checkpoint's epoch with that epoch's rate, and with the epoch gate every checkpoint
// inside an epoch records that epoch's rate (none is written before it took effect).
BOOST_FIXTURE_TEST_CASE(a_resumed_run_continues_the_learning_rate_schedule, cluster_fixture) {
  auto fs = std::make_shared<model::memory_file_system>();
  auto net = model::model::sequential(4, {model::layers::dense(1)});
  auto schedule = step_decay(0.08, 0.5, 1);
  auto rate_of = [&](const std::string& path) {
    auto data = model::read_checkpoint(*fs, path);
    for (auto& [k, v] : data.hyperparams)
      if (k == "learning_rate") return std::make_pair(data.extra.at("epoch").get<int64_t>(), v);
    return std::make_pair(int64_t{-1}, -1.0);
  };
  auto sp = spec(2, 2);
  sp.checkpoint_dir = "/ck";
  sp.checkpoint_every = 12;
  sp.checkpoint_keep = 100;
  sp.checkpoint_fs = fs;
  {
    cluster c{sys, sp, net, *model::make_adam({0.08}), model::mean_squared_error()};
    c.add_callback(learning_rate_schedule(schedule));
    auto o = epochs(2);
    auto r = run(c, sharded(8), o);
    BOOST_TEST(r.steps == 64);
  }
  auto list = model::list_checkpoints(*fs, "/ck");
  BOOST_REQUIRE(list.size() >= 6u);
  for (auto& ck : list) {
    auto [epoch, lr] = rate_of(ck.path);
    // The run's final checkpoint is taken after its last epoch ended (its epoch is 2).
    BOOST_TEST(lr == schedule(ck.step == 64 ? 1 : epoch), "step " << ck.step << " epoch " << epoch);
  }
  cluster c{sys, sp, net, *model::make_adam({0.08}), model::mean_squared_error()};
  auto rec = std::make_shared<recording_callback>();
  c.add_callback(rec);
  c.add_callback(learning_rate_schedule(schedule));
  auto o = epochs(4);
  o.resume_from = "/ck";
  auto r = run(c, sharded(8), o);
  BOOST_TEST(r.resumed_at == 64);
  BOOST_TEST(r.steps == 128);
  BOOST_TEST(r.history["loss"].size() == 4u);
  // The newest checkpoint was taken at the last step of epoch 1, before that epoch
  // ended: the resumed run begins there (and ends it at once), then runs epochs 2 and 3.
  BOOST_TEST(rec->epochs_begun == (std::vector<int64_t>{1, 2, 3}), fmt::format("{}", fmt::join(rec->epochs_begun, ",")));
  auto last = model::latest_checkpoint(*fs, "/ck");
  BOOST_REQUIRE(last);
  BOOST_TEST(last->step == 128);
  BOOST_TEST(rate_of(last->path).second == schedule(3));
}

// model_checkpoint: one every 40 steps (at the next point with nothing in flight) and one
// at each epoch end whose loss is the best so far (each is: the loss falls), in its own
// directory, readable as checkpoints of the run; the cluster's own directory is refused.
BOOST_FIXTURE_TEST_CASE(model_checkpoints_fall_every_n_steps_and_at_the_best_epochs, cluster_fixture) {
  auto fs = std::make_shared<model::memory_file_system>();
  auto sp = spec(2, 2);
  sp.checkpoint_fs = fs;
  cluster c{sys, sp, model::model::sequential(4, {model::layers::dense(1)}), *model::make_adam({0.05}),
            model::mean_squared_error()};
  auto mc = std::make_shared<model_checkpoint>(model_checkpoint_options{"/mc", 40, "loss", "auto", 10});
  auto rec = std::make_shared<recording_callback>();
  c.add_callback(mc);
  c.add_callback(rec);
  auto h = c.schedule(sharded(8), epochs(3));
  step_through(c, h);
  auto r = c.join(h);
  BOOST_TEST(r.steps == 96);
  BOOST_TEST(mc->best_epochs() == (std::vector<int64_t>{0, 1, 2}));
  BOOST_TEST(mc->asked() == 5);
  std::set<int64_t> steps;
  for (auto& ck : model::list_checkpoints(*fs, "/mc")) {
    steps.insert(ck.step);
    auto data = model::read_checkpoint(*fs, ck.path);
    BOOST_TEST(data.variables.size() == 2u);
    for (auto& v : data.variables) BOOST_TEST(v.partitions[0].slots.count("m") == 1u);
  }
  BOOST_TEST(steps.count(32) == 1u);
  BOOST_TEST(steps.count(64) == 1u);
  BOOST_TEST(steps.count(96) == 1u);
  auto between = [&](int64_t lo, int64_t hi) {
    return std::count_if(steps.begin(), steps.end(), [&](int64_t s) { return s >= lo && s <= hi; });
  };
  BOOST_TEST(between(40, 64) >= 1);  // the step-40 one (maybe at 64 itself)
  BOOST_TEST(between(80, 96) >= 1);
  BOOST_TEST(rec->calls["checkpoint"] >= 4);
  // The last is the run's end: the variables fit left.
  auto last = model::read_checkpoint(*fs, model::latest_checkpoint(*fs, "/mc")->path);
  auto vars = variables(c);
  for (auto& v : last.variables)
    BOOST_TEST((v.partitions[0].values - vars[c.structure().find_variable(v.name)]).cwiseAbs().maxCoeff() == 0.0f);
  BOOST_CHECK_THROW(model_checkpoint(model_checkpoint_options{"/mc", 0, "", "auto", 1}), std::invalid_argument);  // never writes
  auto sp2 = spec(1, 1);
  sp2.checkpoint_fs = fs;
  sp2.checkpoint_dir = "/own";
  cluster c2{sys, sp2, model::model::sequential(4, {model::layers::dense(1)}), *model::make_adam({0.05}),
             model::mean_squared_error()};
  c2.add_callback(std::make_shared<model_checkpoint>(model_checkpoint_options{"/own", 10, "", "auto", 1}));
  try {
    run(c2, sharded(8), epochs(1));
    BOOST_FAIL("the run succeeded");
  } catch (const std::exception& e) {
    BOOST_TEST(std::string(e.what()).find("/own is the training's own checkpoint directory") != std::string::npos, e.what());
  }
}

// A slow application thread: step events beyond the queue's capacity are dropped and
// counted, never waited for; epoch events are kept. Training finishes while nothing
// drains the queue. With a callback that waits for epoch ends, each epoch gate holds at
// most the request timeout, then training goes on.
BOOST_FIXTURE_TEST_CASE(a_slow_runner_drops_step_events_and_never_holds_training_up, cluster_fixture) {
  struct step_counter : callback {
    bool gate;
    explicit step_counter(bool g) : gate(g) {}
    bool waits_for_epoch_end() const override { return gate; }
    int steps = 0, begun = 0, epochs_ended = 0;
    void on_train_batch_begin(training&, int64_t, int64_t) override { ++begun; }
    void on_train_batch_end(training&, const step_info&) override { ++steps; }
    void on_epoch_end(training&, int64_t, const std::map<std::string, double>&) override { ++epochs_ended; }
  };
  for (bool gate : {false, true}) {
    auto sp = spec(2, 2);
    sp.event_queue_capacity = 16;
    sp.request_timeout = std::chrono::seconds(5);
    cluster c{sys, sp, model::model::sequential(4, {model::layers::dense(1)}), *model::make_adam({0.05}),
              model::mean_squared_error()};
    auto counter = std::make_shared<step_counter>(gate);
    c.add_callback(counter);
    auto h = c.schedule(sharded(8), epochs(3));
    // The application thread does not come back until the run has ended.
    int ticks = 0;
    for (int i = 0; i < 100; ++i) {
      sched.run();
      if (!sched.has_job() && ticks < 50) {
        sched.advance_time(std::chrono::seconds(6));  // past a gate's timeout
        ++ticks;
      }
    }
    auto r = c.join(h);
    BOOST_TEST(r.steps == 96);
    BOOST_TEST(r.history["loss"].size() == 3u);
    BOOST_TEST(r.dropped_events > 0u);
    BOOST_TEST(counter->steps + static_cast<int>(r.dropped_events) == 96);
    BOOST_TEST(counter->epochs_ended == 3);
    BOOST_TEST(ticks >= (gate ? 2 : 0));  // with the gate, each of the first two epochs waited its timeout
  }
}

BOOST_FIXTURE_TEST_CASE(a_new_coordinator_takes_over_the_run_and_the_old_one_is_fenced_out, cluster_fixture) {
  auto dir = temp_dir();
  auto sp = spec(2, 2);
  sp.checkpoint_dir = dir;
  sp.checkpoint_every = 16;
  sp.visitation_log = true;
  cluster c{sys, sp, model::model::sequential(4, {model::layers::dense(1)}), *model::make_adam({0.05}),
            model::mean_squared_error()};
  auto h = c.schedule(sharded(8), epochs(3));
  for (int i = 0; i < 200000; ++i) {
    sched.run_once();
    if (i % 8 != 0) continue;
    auto l = model::list_checkpoints(model::posix_file_system(), dir);
    if (!l.empty() && l.back().step >= 16) break;
  }
  // A restarted coordinator resumes the run; the old one goes on as if it had only been
  // cut off for a while, and everything it sends from now on is refused.
  auto old = std::move(cluster_internals::take_over(c).result);
  drive(c, h, std::chrono::seconds(1));
  auto r = c.join(h);
  BOOST_TEST(r.resumed_at >= 16);
  BOOST_TEST(r.steps == 96);
  auto text = every_step_once(c, r, 96);
  BOOST_TEST(text.find("fenced 0,") == std::string::npos, text);  // the old one's pushes were refused
  // The old coordinator's run cannot finish: its tasks and pushes are fenced out.
  sched.run();
  BOOST_REQUIRE(old.wait_for(std::chrono::seconds(0)) == std::future_status::ready);
  auto outcome = old.get();
  BOOST_REQUIRE(!outcome);
  BOOST_TEST(describe(outcome.error()).find("fenced") != std::string::npos, describe(outcome.error()));
  std::filesystem::remove_all(dir);
}

BOOST_FIXTURE_TEST_CASE(a_lost_ps_shard_without_checkpoints_fails_the_run_with_the_reason, cluster_fixture) {
  auto plan = std::make_shared<fault_plan>(std::vector<fault_rule>{
    {delivery::kind::kill_receiver, actor_role::worker, -1, actor_role::ps, 0, "push", 10, 1, {}}});
  auto sp = spec(1, 1);
  sp.faults = plan;
  cluster c{sys, sp, model::model::sequential(4, {model::layers::dense(1)}), *model::make_sgd({0.05}),
            model::mean_squared_error()};
  auto h = c.schedule(sharded(8), epochs(2));
  drive(c, h, std::chrono::seconds(1));
  BOOST_CHECK_EXCEPTION(c.join(h), std::runtime_error, [](const std::runtime_error& e) {
    std::string w = e.what();
    return w.find("ps shard 0 was lost") != std::string::npos && w.find("set checkpoint_dir") != std::string::npos;
  });
  // The respawned shard serves the next fit, initialized afresh.
  auto r = run(c, sharded(8), epochs(1));
  BOOST_TEST(r.steps == 32);
}

BOOST_FIXTURE_TEST_CASE(checkpoints_also_fall_due_by_time_on_the_actor_clock, cluster_fixture) {
  auto dir = temp_dir();
  // Every push is held 30 ms of simulated time, so the run takes simulated time.
  auto plan = std::make_shared<fault_plan>(std::vector<fault_rule>{
    {delivery::kind::delay, actor_role::worker, -1, actor_role::ps, -1, "push", 1, 1000000, std::chrono::milliseconds(30)}});
  auto sp = spec(1, 1);
  sp.checkpoint_dir = dir;
  sp.checkpoint_interval = std::chrono::milliseconds(200);
  sp.checkpoint_keep = 100;
  sp.faults = plan;
  cluster c{sys, sp, model::model::sequential(4, {model::layers::dense(1)}), *model::make_sgd({0.05}),
            model::mean_squared_error()};
  auto started = sched.clock().now();
  auto h = c.schedule(sharded(8), epochs(2));
  drive(c, h, std::chrono::milliseconds(10));
  auto r = c.join(h);
  BOOST_TEST(r.steps == 64);
  auto took = std::chrono::duration<double>(sched.clock().now() - started).count();
  auto list = model::list_checkpoints(model::posix_file_system(), dir);
  // Step 0, the end, and one per 200 ms in between (give or take the last one).
  BOOST_REQUIRE(list.size() >= 3u);
  BOOST_TEST(list.front().step == 0);
  BOOST_TEST(list.back().step == 64);
  auto between = static_cast<double>(list.size() - 2);
  BOOST_TEST(between >= std::floor(took / 0.2) - 1, between << " checkpoints in " << took << " s");
  BOOST_TEST(between <= std::floor(took / 0.2) + 1, between << " checkpoints in " << took << " s");
  std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(a_disk_that_fills_during_a_checkpoint_ends_the_run_and_keeps_the_committed_ones) {
  char tmpl[] = "/tmp/actortrain-ckpt-XXXXXX";
  BOOST_REQUIRE(mkdtemp(tmpl) != nullptr);
  std::string dir = tmpl;
  auto fs = std::make_shared<model::fault_file_system>(model::posix_file_system());
  auto sp = spec(2, 2);
  sp.checkpoint_dir = dir;
  sp.checkpoint_every = 16;
  sp.checkpoint_fs = fs;
  cluster c{sys, sp, model::model::sequential(4, {model::layers::dense(1)}), *model::make_adam({0.05}),
            model::mean_squared_error()};
  auto h = c.schedule(sharded(8), epochs(1));
  // Let the step-0 checkpoint commit, then leave room for less than a second one.
  for (int i = 0; i < 100000 && model::list_checkpoints(*fs, dir).empty(); ++i) sched.run_once();
  fs->set_write_budget(200);
  drive(c, h, std::chrono::seconds(1));
  try {
    c.join(h);
    BOOST_FAIL("expected the run to fail");
  } catch (const std::runtime_error& e) {
    std::string what = e.what();
    BOOST_TEST(what.find("checkpoint_failed") != std::string::npos, what);
    BOOST_TEST(what.find("No space left on device") != std::string::npos, what);  // names the file and the cause
  }
  fs->clear_faults();
  auto list = model::list_checkpoints(*fs, dir);
  BOOST_REQUIRE(list.size() == 1u);  // the step-0 checkpoint, whole; the torn one is not listed
  BOOST_TEST(list[0].step == 0);
  BOOST_CHECK_NO_THROW(model::read_checkpoint(*fs, list[0].path));
  std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(twenty_fit_calls_all_train) {
  cluster c{sys, spec(1, 2), model::model::sequential(4, {model::layers::dense(8), model::layers::dense(1)}),
            *model::make_adam({1e-3}), model::mean_squared_error()};
  auto d = ds::from_tensor_slices({data.x}, data.y);
  auto fn = [d](const ds::input_context& ctx) {
    return d.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).shuffle(10, 1).repeat().batch(10);
  };
  model::fit_options o = epochs(5);
  o.steps_per_epoch = 10;
  std::vector<double> losses;
  int64_t steps = 0;
  for (int call = 0; call < 20; ++call) {
    auto r = run(c, fn, o);
    steps += r.steps;
    losses.push_back(r.history.last("loss"));
  }
  BOOST_TEST(steps == 20 * 5 * 10);
  BOOST_TEST(losses.back() < 0.5 * losses[1]);  // each call goes on training
}

BOOST_AUTO_TEST_CASE(two_clusters_run_side_by_side) {
  cluster a{sys, spec(1, 1), model::model::sequential(4, {model::layers::dense(1)}), *model::make_sgd({0.1}),
            model::mean_squared_error()};
  cluster_spec sb = spec(2, 2);
  sb.seed = 7;
  cluster b{sys, sb, model::model::sequential(4, {model::layers::dense(1)}), *model::make_sgd({0.1}),
            model::mean_squared_error()};
  auto ha = a.schedule(sharded(32), epochs(1));
  auto hb = b.schedule(sharded(32), epochs(3));
  for (int i = 0; i < 100000 && !(a.done(ha) && b.done(hb)); ++i) sched.run();
  BOOST_TEST(a.join(ha).steps == 8);
  BOOST_TEST(b.join(hb).steps == 3 * 8);
  BOOST_TEST(report(a).find("applied 8,") != std::string::npos, report(a));
}

BOOST_AUTO_TEST_CASE(metrics_and_validation_reach_the_history) {
  matrix labels(256, 1);
  for (int i = 0; i < 256; ++i) labels(i, 0) = data.x(i, 0) > 0 ? 1.f : 0.f;
  auto d = ds::from_tensor_slices({data.x}, labels);
  std::vector<model::metric_ptr> metrics;
  metrics.push_back(model::accuracy());
  cluster c{sys, spec(1, 2), model::model::sequential(4, {model::layers::dense(2)}), *model::make_adam({0.05}),
            model::softmax_cross_entropy(), std::move(metrics)};
  auto o = epochs(20);
  o.validation = d.batch(64);
  auto r = run(c, [d](const ds::input_context& ctx) { return d.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(16); }, o);
  BOOST_TEST(r.history.has("accuracy"));
  BOOST_TEST(r.history.has("val_accuracy"));
  BOOST_TEST(r.history.last("val_accuracy") > 0.9);
  auto fe = c.evaluate_async(d.batch(50));
  sched.run();
  auto e = fe.get();
  BOOST_TEST(e.at("accuracy") == r.history.last("val_accuracy"), boost::test_tools::tolerance(1e-9));
}

BOOST_AUTO_TEST_CASE(a_gradient_that_is_not_finite_fails_the_run_before_any_shard_applies) {
  matrix x = data.x;
  x(5, 1) = std::numeric_limits<float>::quiet_NaN();
  auto d = ds::from_tensor_slices({x}, data.y);
  cluster c{sys, spec(2, 1), model::model::sequential(4, {model::layers::dense(1)}), *model::make_sgd({0.1}),
            model::mean_squared_error()};
  auto h = c.schedule([d](const ds::input_context&) { return d.batch(8); }, epochs(1));
  for (int i = 0; i < 1000 && !c.done(h); ++i) sched.run();
  try {
    c.join(h);
    BOOST_FAIL("expected the run to fail");
  } catch (const std::runtime_error& e) {
    BOOST_TEST(std::string(e.what()).find("not finite") != std::string::npos, e.what());
  }
  auto s = report(c);
  BOOST_TEST(s.find("ps 0: applied 0,") != std::string::npos, s);  // batch 0 holds the NaN
  BOOST_TEST(s.find("ps 1: applied 0,") != std::string::npos, s);
}

namespace {
// A layer that throws: user code failing inside a worker.
class exploding : public model::layer {
 public:
  std::string describe() const override { return "exploding"; }
  std::string kind() const override { return "exploding"; }
  int64_t build(model::variable_registry&, const std::vector<int64_t>& w, model::node_state&) override { return w[0]; }
  void forward(const model::forward_context&, const std::vector<const matrix*>&, matrix&, model::node_state&) const override {
    throw std::runtime_error("boom in a user layer");
  }
  void backward(const model::backward_context&, const std::vector<const matrix*>&, const matrix&, const matrix&,
                const std::vector<matrix*>&, model::node_state&) const override {}
};
}  // namespace

BOOST_AUTO_TEST_CASE(a_user_exception_surfaces_with_its_message) {
  cluster c{sys, spec(1, 1),
            model::model::sequential(4, {model::layers::dense(2), std::make_shared<exploding>(), model::layers::dense(1)}),
            *model::make_sgd({0.1}), model::mean_squared_error()};
  auto h = c.schedule(sharded(8), epochs(1));
  for (int i = 0; i < 1000 && !c.done(h); ++i) sched.run();
  try {
    c.join(h);
    BOOST_FAIL("expected the run to fail");
  } catch (const std::runtime_error& e) {
    BOOST_TEST(std::string(e.what()).find("boom in a user layer") != std::string::npos, e.what());
  }
}

BOOST_AUTO_TEST_CASE(a_dataset_fn_that_throws_fails_the_run_naming_its_pipeline) {
  cluster c{sys, spec(1, 2), model::model::sequential(4, {model::layers::dense(1)}), *model::make_sgd({0.1}),
            model::mean_squared_error()};
  auto d = ds::from_tensor_slices({data.x}, data.y);
  auto h = c.schedule([d](const ds::input_context& ctx) {
    // A pipeline of 2 needs a batch size its replicas divide: TensorFlow's wording.
    if (ctx.input_pipeline_id == 1) ds::input_context{2, 1, 4}.get_per_replica_batch_size(130);
    return d.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(8);
  }, epochs(1));
  for (int i = 0; i < 1000 && !c.done(h); ++i) sched.run();
  BOOST_REQUIRE(c.done(h));
  try {
    c.join(h);
    BOOST_FAIL("expected the run to fail");
  } catch (const std::runtime_error& e) {
    std::string what = e.what();
    BOOST_TEST(what.find("input pipeline 1 of 2") != std::string::npos, what);
    BOOST_TEST(what.find("130") != std::string::npos, what);
  }
}

BOOST_AUTO_TEST_CASE(bad_cluster_specs_are_refused_with_the_value) {
  auto net = model::model::sequential(4, {model::layers::dense(1)});
  try {
    cluster c{sys, spec(1, 0), net, *model::make_sgd({0.1}), model::mean_squared_error()};
    BOOST_FAIL("expected an error");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("num_workers = 0") != std::string::npos, e.what());
  }
  BOOST_CHECK_THROW((cluster{sys, spec(0, 1), net, *model::make_sgd({0.1}), model::mean_squared_error()}),
                    std::invalid_argument);
  auto s = spec(1, 1);
  s.tasks_in_flight = -1;
  BOOST_CHECK_THROW((cluster{sys, s, net, *model::make_sgd({0.1}), model::mean_squared_error()}), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_CASE(a_system_without_configure_is_refused) {
  caf::actor_system_config cfg;
  caf::actor_system plain{cfg};
  try {
    cluster c{plain, cluster_spec{}, model::model::sequential(4, {model::layers::dense(1)}), *model::make_sgd({0.1}),
              model::mean_squared_error()};
    BOOST_FAIL("expected an error");
  } catch (const std::logic_error& e) {
    BOOST_TEST(std::string(e.what()).find("configure") != std::string::npos, e.what());
  }
}

// Real threads (no test coordinator): a system of 2 scheduler threads, 128 examples.
struct threaded_fixture {
  caf::actor_system_config cfg;
  std::optional<caf::actor_system> sys_;
  planted data{128};
  ds::dataset d = ds::from_tensor_slices({data.x}, data.y);
  threaded_fixture() {
    configure(cfg);
    cfg.set("scheduler.max-threads", 2);
    sys_.emplace(cfg);
  }
};

BOOST_FIXTURE_TEST_CASE(a_threaded_cluster_trains_and_shuts_down_cleanly, threaded_fixture) {
  auto& sys = *sys_;
  {
    cluster_spec s;
    s.num_ps = 2;
    s.num_workers = 2;
    cluster c{sys, s, model::model::sequential(4, {model::layers::dense(1)}), *model::make_adam({0.05}),
              model::mean_squared_error()};
    model::fit_options o;
    o.epochs = 30;
    o.verbose = 0;
    auto h = c.fit(d, o);
    BOOST_TEST(h["loss"].size() == 30u);
    BOOST_TEST(h["loss"].back() < h["loss"].front());
  }
  // Leaving the scope destroys the cluster; the system's destructor then waits for every
  // actor: the test finishing is the check that nothing was left running.
}

// The epoch gate with real threads: early stopping ends the run at its epoch and leaves
// the kept variables; a checkpoint asked for at the gate holds exactly them.
BOOST_FIXTURE_TEST_CASE(a_threaded_cluster_stops_early_and_restores_the_kept_epoch, threaded_fixture) {
  auto& sys = *sys_;
  auto fs = std::make_shared<model::memory_file_system>();
  cluster_spec s;
  s.num_ps = 2;
  s.num_workers = 2;
  s.checkpoint_fs = fs;
  cluster c{sys, s, model::model::sequential(4, {model::layers::dense(1)}), *model::make_adam({0.05}),
            model::mean_squared_error()};
  // The loss falls, so "loss" in mode max is best at epoch 0: patience 2 stops after epoch 2.
  auto stopper = std::make_shared<early_stopping>(early_stopping_options{"loss", 2, 0, "max", true});
  c.add_callback(stopper);
  c.add_callback(std::make_shared<model_checkpoint>(model_checkpoint_options{"/best", 0, "loss", "max", 1}));
  model::fit_options o;
  o.epochs = 20;
  o.verbose = 0;
  auto h = c.fit(d.batch(8), o);
  BOOST_TEST(h["loss"].size() == 3u);
  BOOST_TEST(stopper->stopped_epoch() == 2);
  BOOST_TEST(stopper->best_epoch() == 0);
  auto list = model::list_checkpoints(*fs, "/best");
  BOOST_REQUIRE(list.size() == 1u);
  BOOST_TEST(list[0].step == 16);  // epoch 0's end: 128 examples in batches of 8
  auto kept = model::read_checkpoint(*fs, list[0].path);
  auto vars = c.variables();
  for (auto& v : kept.variables)
    BOOST_TEST((v.partitions[0].values - vars[c.structure().find_variable(v.name)]).cwiseAbs().maxCoeff() == 0.0f, v.name);
}

BOOST_AUTO_TEST_CASE(a_threaded_cluster_survives_killed_workers_and_a_killed_ps_shard_applying_every_step_once) {
  caf::actor_system_config cfg;
  configure(cfg);
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system sys{cfg};
  planted data{256};
  auto d = ds::from_tensor_slices({data.x}, data.y);
  auto dir = temp_dir();
  // Worker 1 dies after pushing its 15th step's slice to ps 0 (before ps 1); worker 0
  // dies before its 30th pull; both are replaced under new generations. ps 1 dies as the
  // 150th push reaches it: it is respawned and every shard rolls back to the last
  // checkpoint (every 40 steps).
  auto plan = std::make_shared<fault_plan>(std::vector<fault_rule>{
    {delivery::kind::crash_after, actor_role::worker, 1, actor_role::ps, 0, "push", 15, 1, {}},
    {delivery::kind::crash, actor_role::worker, 0, actor_role::ps, 0, "pull", 30, 1, {}},
    {delivery::kind::kill_receiver, actor_role::worker, -1, actor_role::ps, 1, "push", 150, 1, {}}});
  fit_result r;
  std::string report;
  {
    cluster_spec s;
    s.num_ps = 2;
    s.num_workers = 2;
    s.faults = plan;
    s.restart_lost_workers = true;
    s.visitation_log = true;
    s.request_timeout = std::chrono::seconds(10);
    s.checkpoint_dir = dir;
    s.checkpoint_every = 40;
    s.metrics_file = dir + "/metrics.jsonl";
    cluster c{sys, s, model::model::sequential(4, {model::layers::dense(1)}), *model::make_adam({0.05}),
              model::mean_squared_error()};
    model::fit_options o;
    o.epochs = 20;
    o.verbose = 0;
    r = c.join(c.schedule([d](const ds::input_context& ctx) {
      return d.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(16);
    }, o));
    report = c.ps_report();
  }
  BOOST_TEST(plan->injected().size() == 3u);
  BOOST_TEST(r.restarts == 2);
  BOOST_TEST(r.ps_restores == 1);
  BOOST_TEST(r.steps == 20 * 16);
  BOOST_REQUIRE(r.visits.size() == 320u);
  std::set<std::pair<uint32_t, uint64_t>> seen;
  std::set<std::pair<uint32_t, uint64_t>> computed_by;  // (worker, generation)
  for (auto& v : r.visits) {
    BOOST_TEST(seen.emplace(v.pipeline, v.position).second, "pipeline " << v.pipeline << " position " << v.position);
    computed_by.emplace(v.worker, v.generation);
  }
  BOOST_TEST(computed_by.size() >= 3u);  // workers before and after their restarts
  BOOST_TEST(report.find("ps 0: applied 320, ") != std::string::npos, report);
  BOOST_TEST(report.find("ps 1: applied 320, ") != std::string::npos, report);
  BOOST_TEST(report.find("restored at step") != std::string::npos, report);
  BOOST_TEST(r.history["loss"].back() < 0.01);  // the planted model is still learned
  // The metrics file has the loss and the roll-back, with how long the recovery took.
  std::ifstream in{dir + "/metrics.jsonl"};
  std::string line;
  int lost = 0, restored = 0;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j["event"] == "ps_lost") ++lost;
    if (j["event"] == "worker_lost" || j["event"] == "steps_requeued" || j["event"] == "ps_lost")
      BOOST_TEST_MESSAGE(line);  // loss and re-queue times: how long a loss holds training up
    if (j["event"] == "ps_restored") {
      ++restored;
      BOOST_TEST_MESSAGE("ps recovery took " << j["values"]["recovery_seconds"].get<double>() << " s, "
                                             << j["values"]["steps_lost"].get<double>() << " steps redone");
    }
  }
  BOOST_TEST(lost == 1);
  BOOST_TEST(restored == 1);
  std::filesystem::remove_all(dir);
}

namespace {

// Duplicates every push and drops the first pull of each worker: the seam's faults.
class test_faults : public fault_policy {
 public:
  delivery decide(const message_info& m) override {
    if (m.kind == push_atom::value) return delivery::duplicate();
    if (m.kind == pull_atom::value && dropped_ < 2) {
      ++dropped_;
      return delivery::drop();
    }
    return delivery::deliver();
  }
  int dropped_ = 0;
};

}  // namespace

BOOST_FIXTURE_TEST_CASE(duplicated_pushes_and_lost_pulls_still_apply_every_step_once, cluster_fixture) {
  auto sp = spec(2, 2);
  auto faults = std::make_shared<test_faults>();
  sp.faults = faults;
  cluster c{sys, sp, model::model::sequential(4, {model::layers::dense(1)}), *model::make_sgd({0.05}),
            model::mean_squared_error()};
  auto h = c.schedule(sharded(16), epochs(1));
  // A dropped pull is noticed only through its timeout: when nothing else can run,
  // move the simulated clock past the request timeout (not past the fit call's own).
  drive(c, h, sp.request_timeout + std::chrono::seconds(1));
  auto r = c.join(h);
  BOOST_TEST(faults->dropped_ == 2);
  BOOST_TEST(r.steps == 16);  // 2 pipelines x 128 rows / 16
  auto s = report(c);
  // Every push arrived at least twice (steps of a lost pull may also be re-run): each
  // step applied exactly once per shard, every other arrival acknowledged as duplicate.
  for (int p = 0; p < 2; ++p) {
    auto at = s.find(fmt::format("ps {}: applied 16, duplicates ", p));
    BOOST_REQUIRE_MESSAGE(at != std::string::npos, s);
    auto dups = std::stoi(s.substr(at + std::string("ps 0: applied 16, duplicates ").size()));
    BOOST_TEST(dups >= 16, s);
    BOOST_TEST(dups <= 16 + 2 * 2, s);  // at most the two re-run tasks, twice each
  }
}

namespace {

// Drops every push of one worker's steps: they can never complete.
class black_hole_pushes : public fault_policy {
 public:
  delivery decide(const message_info& m) override {
    return m.kind == push_atom::value ? delivery::drop() : delivery::deliver();
  }
};

}  // namespace

BOOST_FIXTURE_TEST_CASE(a_step_that_keeps_failing_ends_the_run_as_a_poison_step, cluster_fixture) {
  auto sp = spec(1, 1);
  sp.faults = std::make_shared<black_hole_pushes>();
  cluster c{sys, sp, model::model::sequential(4, {model::layers::dense(1)}), *model::make_sgd({0.05}),
            model::mean_squared_error()};
  auto h = c.schedule(sharded(64), epochs(1));
  drive(c, h, sp.request_timeout + std::chrono::seconds(1));
  try {
    c.join(h);
    BOOST_FAIL("expected the run to fail");
  } catch (const std::runtime_error& e) {
    std::string what = e.what();
    BOOST_TEST(what.find("poison_step") != std::string::npos, what);
    BOOST_TEST(what.find("failed 3 times") != std::string::npos, what);
    BOOST_TEST(what.find("of input pipeline 0") != std::string::npos, what);
    BOOST_TEST(what.find("last on worker 0") != std::string::npos, what);
    BOOST_TEST(what.find("request_timeout") != std::string::npos, what);  // how: its pushes never arrived
  }
  // The limit is the spec's.
  sp.poison_limit = 5;
  cluster five{sys, sp, model::model::sequential(4, {model::layers::dense(1)}), *model::make_sgd({0.05}),
               model::mean_squared_error()};
  auto h5 = five.schedule(sharded(64), epochs(1));
  drive(five, h5, sp.request_timeout + std::chrono::seconds(1));
  BOOST_CHECK_EXCEPTION(five.join(h5), std::runtime_error, [](const std::runtime_error& e) {
    return std::string(e.what()).find("failed 5 times") != std::string::npos;
  });
  sp.poison_limit = 0;
  BOOST_CHECK_THROW((cluster{sys, sp, model::model::sequential(4, {model::layers::dense(1)}), *model::make_sgd({0.05}),
                             model::mean_squared_error()}),
                    std::invalid_argument);
}

namespace {

// Delays every third push by 10 ms of (simulated) time: it then arrives behind later
// messages. Counts the delays and, per receiver, the step tasks it sees.
class delaying_faults : public fault_policy {
 public:
  delivery decide(const message_info& m) override {
    if (m.kind == step_atom::value) ++tasks_to[m.to];
    if (m.kind == push_atom::value && ++pushes_ % 3 == 0) {
      ++delayed;
      return delivery::delay_by(std::chrono::milliseconds(10));
    }
    return delivery::deliver();
  }
  int delayed = 0;
  std::map<caf::actor_addr, int> tasks_to;

 private:
  int pushes_ = 0;
};

}  // namespace

BOOST_FIXTURE_TEST_CASE(delayed_pushes_arrive_late_and_are_applied_once, cluster_fixture) {
  auto sp = spec(2, 2);
  auto faults = std::make_shared<delaying_faults>();
  sp.faults = faults;
  cluster c{sys, sp, model::model::sequential(4, {model::layers::dense(1)}), *model::make_sgd({0.05}),
            model::mean_squared_error()};
  auto h = c.schedule(sharded(16), epochs(1));
  // The relay holds a delayed push until the simulated clock reaches its time.
  drive(c, h, std::chrono::milliseconds(10));
  auto r = c.join(h);
  BOOST_TEST(r.steps == 16);
  BOOST_TEST(faults->delayed >= 16 * 2 / 3 - 1);  // pushes: 16 steps x 2 shards
  auto s = report(c);
  BOOST_TEST(s.find("ps 0: applied 16, duplicates 0, rejected 0, fenced 0") != std::string::npos, s);
  BOOST_TEST(s.find("ps 1: applied 16, duplicates 0, rejected 0, fenced 0") != std::string::npos, s);
}

BOOST_FIXTURE_TEST_CASE(predict_runs_on_the_workers_and_returns_every_row_in_order, cluster_fixture) {
  auto sp = spec(2, 2);
  auto faults = std::make_shared<delaying_faults>();  // delays pushes only; counts tasks
  sp.faults = faults;
  auto net = model::model::sequential(4, {model::layers::dense(3, model::layers::activation::tanh),
                                          model::layers::dense(2)});
  cluster c{sys, sp, net, *model::make_adam({0.01}), model::mean_squared_error()};
  auto y2 = matrix(data.x.rows(), 2);
  y2 << data.y, -data.y;
  auto train = ds::from_tensor_slices({data.x}, y2);
  auto h = c.schedule([train](const ds::input_context& ctx) {
    return train.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(16);
  }, epochs(1));
  drive(c, h, std::chrono::milliseconds(10));
  c.join(h);
  faults->tasks_to.clear();
  // 250 rows without labels in batches of 32: the last batch is short.
  auto x = random_matrix(250, 4, 11);
  auto data_in = ds::from_tensor_slices({x}).batch(32);
  auto fut = c.predict_async(data_in);
  sched.run();
  auto out = fut.get();
  auto vars = variables(c);
  model::executor ex{net};
  auto expected = model::predict(ex, vars, data_in);
  BOOST_REQUIRE(out.rows() == 250);
  BOOST_REQUIRE(out.cols() == 2);
  BOOST_TEST((out - expected).cwiseAbs().maxCoeff() < 1e-6);
  BOOST_TEST(faults->tasks_to.size() == 2u);  // both workers computed batches
  int tasks = 0;
  for (auto& [to, n] : faults->tasks_to) tasks += n;
  BOOST_TEST(tasks >= 8);  // 8 batches (plus positions found past the end)
  BOOST_CHECK_THROW(c.predict_async(ds::from_tensor_slices({x}).repeat().batch(32)), std::invalid_argument);
}

BOOST_FIXTURE_TEST_CASE(hyperparameters_change_on_every_shard_and_bad_ones_change_nothing, cluster_fixture) {
  cluster c{sys, spec(2, 1), model::model::sequential(4, {model::layers::dense(1)}), *model::make_sgd({0.05}),
            model::mean_squared_error()};
  run(c, sharded(16), epochs(1));
  auto set = [&](std::map<std::string, double> v) {
    auto f = c.set_hyperparams_async(v);
    sched.run();
    f.get();
  };
  set({{"learning_rate", 0.0}});
  auto before = variables(c);
  run(c, sharded(16), epochs(1));  // learning rate 0: nothing moves
  auto after = variables(c);
  for (size_t v = 0; v < before.size(); ++v)
    BOOST_TEST((before[static_cast<model::variable_id>(v)] - after[static_cast<model::variable_id>(v)]).cwiseAbs().maxCoeff() == 0.0f);
  try {
    set({{"learning_rate", 0.1}, {"momentum_typo", 0.9}});
    BOOST_FAIL("expected an error");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("momentum_typo") != std::string::npos, e.what());
  }
  BOOST_CHECK_THROW(set({{"learning_rate", -1.0}}), std::invalid_argument);
  run(c, sharded(16), epochs(1));  // still 0: the refused changes did not reach any shard
  auto still = variables(c);
  for (size_t v = 0; v < before.size(); ++v)
    BOOST_TEST((before[static_cast<model::variable_id>(v)] - still[static_cast<model::variable_id>(v)]).cwiseAbs().maxCoeff() == 0.0f);
  set({{"learning_rate", 0.05}});
  run(c, sharded(16), epochs(1));
  auto moved = variables(c);
  BOOST_TEST((before[c.structure().find_variable("dense/kernel")] - moved[c.structure().find_variable("dense/kernel")])
               .cwiseAbs().maxCoeff() > 0.0f);
}
