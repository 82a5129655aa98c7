// Runs of scheduled steps (cluster::begin_steps, schedule, fetch, join_steps) and the
// distributed-dataset loop on them (distributed.hpp), on CAF's test coordinator: each
// scheduled step runs its registered function on a worker and its handle gets what the
// function returned; the ps shards' ledgers (not the coordinator) say how many steps
// were applied and that each batch was the one its pipeline defines at that position;
// a step for a replica past its data gets no value; misuse is refused by name; and 100
// random fault plans keep every invariant of a job trained by the loop.
#include <actortrain/actors/cluster/cluster.hpp>
#include <actortrain/actors/cluster/distributed.hpp>
#include <actortrain/actors/cluster/job.hpp>
#include <actortrain/actors/jobs/jobs.hpp>
#include <actortrain/actors/sim/simulator.hpp>
#include <actortrain/dataset/all.hpp>
#include <actortrain/model/all.hpp>

#include <fmt/format.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <set>

// Last: CAF's test DSL defines macros (inject, expect) that clash with ordinary names.
#include "caf_test.hpp"
#include "fault_plans.hpp"
#include "random_matrix.hpp"

using namespace actortrain;
using model::matrix;
namespace ds = actortrain::dataset;

namespace {

// A registered step: the built-in one, plus what it saw (its batch's rows and first
// feature, its randomness key) in its logs.
model::step_function probe_step() {
  return {"probe", [](model::step_context& s) {
            auto l = model::default_train_step(s);
            l["rows"] = static_cast<double>(s.data().rows());
            l["first"] = s.data().features.at(0)(0, 0);
            l["key"] = static_cast<double>(s.step_key() % 1000003);
            return l;
          }};
}

struct scheduled_fixture : testing::fixture {
  matrix x = testing::random_matrix(96, 4, 3);  // 96 rows: 6 batches of 16, 3 per pipeline
  matrix y = testing::random_matrix(96, 1, 4);
  model::model net = model::model::sequential(4, {model::layers::dense(1)});
  ds::dataset data = ds::from_tensor_slices({x}, y);

  cluster_spec spec() {
    cluster_spec sp;
    sp.simulated = true;
    sp.num_workers = 2;
    sp.num_ps = 2;
    sp.steps.push_back(probe_step());
    return sp;
  }
  ds::dataset_fn fn() {
    auto d = data;
    return [d](const ds::input_context& ctx) { return d.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(16); };
  }
  template <class Done>
  void run_until(Done done) {
    for (int i = 0; i < 200000 && !done(); ++i) sched.run();
    BOOST_REQUIRE(done());
  }
  ledger_verdict check(cluster& c, uint64_t run, int epochs, bool complete) {
    auto f = c.ledgers_async();
    sched.run();
    ledger_run lr;
    lr.run = run;
    lr.fn = fn();
    lr.num_pipelines = 2;
    lr.epochs = epochs;
    lr.complete = complete;
    return check_ledgers(f.get(), {lr});
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(scheduled_steps)

BOOST_FIXTURE_TEST_CASE(each_scheduled_step_runs_its_function_once_and_its_handle_gets_what_it_returned, scheduled_fixture) {
  cluster c{sys, spec(), net, *model::make_sgd({0.05}), model::mean_squared_error()};
  auto run = c.begin_steps(fn());
  std::vector<cluster::step_handle> hs;
  for (int i = 0; i < 5; ++i) hs.push_back(c.schedule("probe"));
  hs.push_back(c.schedule());  // the fit step: its logs are the built-in ones
  run_until([&] { return c.done(hs.back()) && c.done(hs.front()); });
  for (auto& h : hs) run_until([&] { return c.done(h); });
  std::set<double> firsts;
  for (size_t i = 0; i < 5; ++i) {
    auto l = c.fetch(hs[i]);
    BOOST_REQUIRE(l);
    BOOST_TEST(l->count("loss") == 1u);
    BOOST_TEST(l->at("rows") == 16.0);
    firsts.insert(l->at("first"));
  }
  BOOST_TEST(firsts.size() == 5u);  // five different batches
  auto fit_step = c.fetch(hs[5]);
  BOOST_REQUIRE(fit_step);
  BOOST_TEST(fit_step->count("rows") == 0u);
  // Nothing runs that was not scheduled: the shards hold six steps of the run.
  auto f = c.ledgers_async();
  sched.run();
  BOOST_TEST(steps_on_every_partition(f.get(), hs[0].run) == 6u);
  // More steps than one pass holds (6 batches): the pipelines go on into the next epoch.
  for (int i = 0; i < 8; ++i) hs.push_back(c.schedule("probe"));
  c.end_steps();
  run_until([&] { return c.done(run); });
  auto r = c.join(run);
  BOOST_TEST(r.steps == 14);
  BOOST_TEST(r.history["loss"].size() == 3u);  // epochs 1 and 2 whole, the third closed by the end
  for (auto& h : hs) BOOST_TEST(c.fetch(h).has_value());
  auto v = check(c, r.run, 3, false);  // two epochs and two steps of the third, each batch once
  BOOST_TEST(v.ok(), fmt::format("{}", fmt::join(v.violations, "\n")));
  BOOST_TEST(v.steps.at(r.run) == 14u);
}

BOOST_FIXTURE_TEST_CASE(a_step_for_a_replica_past_its_data_gets_no_value_and_the_next_epoch_starts_over, scheduled_fixture) {
  cluster c{sys, spec(), net, *model::make_sgd({0.05}), model::mean_squared_error()};
  auto run = c.begin_steps(fn());
  std::vector<cluster::step_handle> in_data, past;
  for (int k = 0; k < 3; ++k) in_data.push_back(c.schedule("probe", 1));
  past.push_back(c.schedule("probe", 1));  // pipeline 1 has 3 batches
  c.next_epoch();
  auto again = c.schedule("probe", 1);
  c.end_steps();
  run_until([&] { return c.done(run); });
  auto r = c.join(run);
  for (auto& h : in_data) BOOST_TEST(c.fetch(h).has_value());
  BOOST_TEST(!c.fetch(past[0]).has_value());
  auto first = c.fetch(in_data[0]);
  auto next = c.fetch(again);
  BOOST_REQUIRE(first && next);
  BOOST_TEST(r.steps == 4);
  // The same batch as the first epoch's first (no shuffle), but another step: its own key.
  BOOST_TEST(next->at("first") == first->at("first"));
  BOOST_TEST(next->at("key") != first->at("key"));
  auto v = check(c, r.run, 2, false);  // pipeline 0 untouched, pipeline 1 into its second epoch: a valid prefix
  BOOST_TEST(v.ok(), fmt::format("{}", fmt::join(v.violations, "\n")));
}

BOOST_FIXTURE_TEST_CASE(the_distributed_dataset_loop_covers_every_batch_of_every_pass_once, scheduled_fixture) {
  cluster c{sys, spec(), net, *model::make_sgd({0.05}), model::mean_squared_error()};
  auto dist = c.distribute_dataset(fn());
  BOOST_TEST(dist.num_replicas() == 2);
  BOOST_TEST(dist.batches_per_epoch() == 3);
  std::vector<double> pass_loss;
  for (int epoch = 0; epoch < 2; ++epoch) {
    int n = 0;
    for (auto it = dist.begin(); it != dist.end(); ++it) {
      for (int r = 0; r < dist.num_replicas(); ++r) c.schedule("probe", r);
      ++n;
    }
    BOOST_TEST(n == 3);
  }
  c.end_steps();
  run_until([&] { return c.done(dist.handle()); });
  auto r = c.join(dist.handle());
  BOOST_TEST(r.steps == 12);
  BOOST_TEST(r.history["loss"].size() == 2u);
  auto v = check(c, r.run, 2, true);
  BOOST_TEST(v.ok(), fmt::format("{}", fmt::join(v.violations, "\n")));
  per_replica pr;
  pr.values = {model::logs{{"loss", 1.0}}, std::nullopt, model::logs{{"loss", 3.0}}};
  BOOST_TEST(reduce(reduce_op::sum, pr) == 4.0);
  BOOST_TEST(reduce(reduce_op::mean, pr) == 2.0);
  BOOST_CHECK_THROW(reduce(reduce_op::sum, pr, "accuracy"), std::invalid_argument);
}

BOOST_FIXTURE_TEST_CASE(misuse_is_refused_naming_what_is_wrong, scheduled_fixture) {
  cluster c{sys, spec(), net, *model::make_sgd({0.05}), model::mean_squared_error()};
  auto says = [](auto f, const std::string& what) {
    try {
      f();
      BOOST_ERROR("not refused: " + what);
    } catch (const std::exception& e) {
      BOOST_TEST(std::string(e.what()).find(what) != std::string::npos, e.what());
    }
  };
  says([&] { c.schedule("probe"); }, "no run of scheduled steps");
  model::fit_options o;
  o.epochs = 3;
  says([&] { c.begin_steps(fn(), o); }, "epochs is a fit option");
  auto inf = data;
  says([&] { c.distribute_dataset([inf](const ds::input_context&) { return inf.repeat().batch(16); }); },
       "not known (an infinite dataset)");
  auto run = c.begin_steps(fn());
  says([&] { c.schedule("nope"); }, "no step \"nope\" is registered");
  says([&] { c.schedule("probe", 2); }, "replica 2");
  says([&] { c.begin_steps(fn()); }, "a run is in progress");
  c.end_steps();
  run_until([&] { return c.done(run); });
  auto r = c.join(run);
  BOOST_TEST(r.steps == 0);
  cluster_spec sp = spec();
  sp.consistency = consistency_mode::sync();
  cluster s{sys, sp, net, *model::make_sgd({0.05}), model::mean_squared_error()};
  says([&] { s.begin_steps(fn()); }, "consistency sync");
}

BOOST_AUTO_TEST_CASE(a_hundred_random_fault_plans_keep_every_invariant_of_a_loop_with_a_registered_step) {
  jobs::linear_options lo;
  lo.epochs = 2;
  lo.examples = 400;  // 20 steps a pass
  auto j = jobs::linear(lo);
  j.spec.num_workers = 2;
  j.spec.num_ps = 2;
  j.spec.steps.push_back(model::clipped_step(1.0));
  j.loop = true;
  j.loop_step = "clip_by_global_norm(1)";
  testing::hundred_fault_plans(j, 40);  // 20 batches a pass, 2 passes
}

// evaluate() and predict() on a cluster (real threads: they block) call the batch hooks
// as the batches are handed out and answered; the last running logs are the result.
BOOST_AUTO_TEST_CASE(evaluate_and_predict_call_the_batch_hooks_of_their_callbacks) {
  caf::actor_system_config cfg;
  configure(cfg);
  caf::actor_system real{cfg};
  cluster_spec sp;
  sp.num_workers = 2;
  matrix x = testing::random_matrix(96, 4, 3), y = testing::random_matrix(96, 1, 4);
  cluster c{real, sp, model::model::sequential(4, {model::layers::dense(1)}), *model::make_sgd({0.05}),
            model::mean_squared_error()};
  struct recorder : callback {
    int test_begun = 0, test_done = 0, predict_begun = 0, predict_done = 0;
    std::set<int64_t> test_indices;
    model::logs last;
    void on_test_batch_begin(model::training&, int64_t) override { ++test_begun; }
    void on_test_batch_end(model::training&, int64_t b, const model::logs& l) override {
      ++test_done;
      test_indices.insert(b);
      last = l;
    }
    void on_predict_batch_begin(model::training&, int64_t) override { ++predict_begun; }
    void on_predict_batch_end(model::training&, int64_t) override { ++predict_done; }
  };
  auto r = std::make_shared<recorder>();
  auto data = ds::from_tensor_slices({x}, y).batch(16);  // 6 batches
  auto result = c.evaluate(data, {r});
  BOOST_TEST(r->test_begun == 6);  // not the positions handed out past the end
  BOOST_TEST(r->test_done == 6);
  BOOST_TEST((r->test_indices == std::set<int64_t>{0, 1, 2, 3, 4, 5}));
  BOOST_TEST(r->last.at("loss") == result.at("loss"), "the last running loss is evaluate's result");
  auto out = c.predict(ds::from_tensor_slices({x}, y).batch(16), {r});
  BOOST_TEST(out.rows() == 96);
  BOOST_TEST(r->predict_begun == 6);
  BOOST_TEST(r->predict_done == 6);
  c.evaluate(data);  // without callbacks: no batch events, nothing called
  BOOST_TEST(r->test_done == 6);
}

// The checks above could fail: a roll-back that does not schedule again the steps
// dispatched since its checkpoint is caught by the ledgers in every seed where it took
// effect in a completed fit.
BOOST_AUTO_TEST_CASE(a_roll_back_that_forgets_the_steps_scheduled_since_its_checkpoint_is_caught) {
  jobs::linear_options lo;
  lo.epochs = 2;
  lo.examples = 400;
  auto j = jobs::linear(lo);
  j.spec.num_workers = 2;
  j.spec.num_ps = 2;
  j.loop = true;
  int took = 0, caught = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    sim_options so;
    so.seed = seed;
    so.plant = planted_defect::forget_grants_after_rollback;
    auto r = simulate(j, so);
    if (!r.planted_visible()) continue;
    ++took;
    if (!r.ok())
      ++caught;
    else
      BOOST_ERROR(fmt::format("seed {}: the defect took effect and was not caught: {}", seed, r.report()));
  }
  BOOST_TEST_MESSAGE(fmt::format("took effect in {} of 200 seeds, caught in {}", took, caught));
  BOOST_TEST(took >= 5, "took effect in only " << took << " seeds");
  BOOST_TEST(caught == took);
}

BOOST_AUTO_TEST_SUITE_END()
