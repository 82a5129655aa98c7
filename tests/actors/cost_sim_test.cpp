// The simulator with its cost model: the real cluster on simulated time gives the
// samples/s that the protocol's critical path says, worked out here by hand. A worker
// step: its pulls take a latency there and one back, then it computes for `step`, pushes
// and pulls again (overlap_push), so one worker does a step every step + 2 x latency;
// workers on their own cores add up; on one core they share it, one core's worth of steps.
#include <actortrain/actors/jobs/jobs.hpp>
#include <actortrain/actors/sim/cost_model.hpp>
#include <actortrain/actors/sim/simulator.hpp>

#include <boost/test/unit_test.hpp>

#include <memory>

using namespace actortrain;

namespace {

constexpr double step = 0.010, latency = 0.001;
constexpr int64_t batch = 20;

// The linear job (200 steps) on `workers` x `ps` with the costs `p`, `steps` steps a task.
sim_result simulate_with(int workers, int ps, const cost_params& p, int steps = 1) {
  jobs::linear_options lo;
  lo.epochs = 1;
  lo.examples = 4000;  // 200 steps
  lo.batch = batch;
  auto j = jobs::linear(lo);
  j.spec.num_workers = workers;
  j.spec.num_ps = ps;
  j.spec.steps_per_execution = steps;
  sim_options o;
  o.compare_values = false;
  o.checkpoint_every = 0;
  o.costs = std::make_shared<const cost_params>(p);
  auto r = simulate(j, o, nullptr);
  BOOST_TEST_REQUIRE(r.ok(), r.report());
  BOOST_TEST(r.steps == 200);  // what the shards' ledgers hold, not the model's count
  BOOST_TEST(r.timing.steps == 200);
  BOOST_TEST(r.timing.examples == 4000);
  return r;
}

// Nothing costs time but the steps and the latency.
sim_timing run(int workers, int ps, int cores, int steps = 1) {
  cost_params p;
  p.step_seconds = step;
  p.latency_seconds = latency;
  p.cores = cores;
  return simulate_with(workers, ps, p, steps).timing;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(simulated_time)

BOOST_AUTO_TEST_CASE(one_worker_steps_every_step_plus_a_round_trip) {
  auto t = run(1, 1, 8);
  BOOST_TEST(t.samples_per_second() == batch / (step + 2 * latency), boost::test_tools::tolerance(0.03));
  BOOST_TEST(t.mean_staleness == 0.0);
  // Two shards in parallel: the same.
  auto two = run(1, 2, 8);
  BOOST_TEST(two.samples_per_second() == batch / (step + 2 * latency), boost::test_tools::tolerance(0.03));
}

// Tasks of 4 steps: a step's pushes ask for the next step's values (pull_with_push) and
// their replies bring them, one round trip as the pulls took. A step's pushes to two
// shards leave together: the second does not wait for the first one's reply.
BOOST_AUTO_TEST_CASE(a_push_that_brings_the_next_steps_values_costs_the_same_round_trip) {
  for (int ps : {1, 2}) {
    auto t = run(1, ps, 8, 4);
    BOOST_TEST(t.samples_per_second() == batch / (step + 2 * latency), boost::test_tools::tolerance(0.03));
    BOOST_TEST(t.mean_staleness == 0.0);
  }
}

BOOST_AUTO_TEST_CASE(workers_on_cores_of_their_own_add_up_and_read_older_parameters) {
  auto t = run(2, 1, 8);
  BOOST_TEST(t.samples_per_second() == 2 * batch / (step + 2 * latency), boost::test_tools::tolerance(0.03));
  // Each push lands between the other worker's pull and push: staleness 1.
  BOOST_TEST(t.mean_staleness == 1.0, boost::test_tools::tolerance(0.05));
  auto four = run(4, 2, 8);
  BOOST_TEST(four.samples_per_second() == 4 * batch / (step + 2 * latency), boost::test_tools::tolerance(0.03));
  BOOST_TEST(four.mean_staleness == 3.0, boost::test_tools::tolerance(0.05));
}

BOOST_AUTO_TEST_CASE(workers_sharing_one_core_take_turns) {
  // The round trips hide behind the other worker's step: one step per `step`.
  auto t = run(2, 1, 1);
  BOOST_TEST(t.samples_per_second() == batch / step, boost::test_tools::tolerance(0.03));
}

BOOST_AUTO_TEST_CASE(a_shard_that_applies_slowly_is_the_bottleneck_and_its_load_shows_it) {
  cost_params p;
  p.step_seconds = step;
  p.latency_seconds = latency;
  p.cores = 8;
  // The linear model has 6 floats (5 weights and a bias): 1 ms per float is 6 ms per
  // apply, more than the 3 ms the 4 workers' steps leave between two pushes.
  p.apply_seconds_per_float = 1e-3;
  auto r = simulate_with(4, 1, p);
  BOOST_TEST(r.timing.samples_per_second() == batch / 0.006, boost::test_tools::tolerance(0.03));
  BOOST_TEST_REQUIRE(r.timing.ps_load.size() == 1u);
  BOOST_TEST(r.timing.ps_load[0] == 1.0, boost::test_tools::tolerance(0.03));
}

BOOST_AUTO_TEST_SUITE_END()
