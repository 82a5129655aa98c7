// Custom training steps on a cluster (cluster_spec::train_step, Keras's train_step
// override): the workers run the step function, its gradients are applied exactly once
// (the values a one-worker synchronous cluster ends with are the trainer's with the same
// step, to the bit), its loss is the step's loss, an exception in it fails the run as an
// application error, and 100 random fault plans keep every invariant (judged from the
// ps shards' ledgers, not from the coordinator).
#include <actortrain/actors/cluster/cluster.hpp>
#include <actortrain/actors/jobs/jobs.hpp>
#include <actortrain/actors/sim/simulator.hpp>
#include <actortrain/dataset/all.hpp>
#include <actortrain/model/all.hpp>

#include <fmt/format.h>

// Last: CAF's test DSL defines macros (inject, expect) that clash with ordinary names.
#include "caf_test.hpp"
#include "fault_plans.hpp"
#include "random_matrix.hpp"

using namespace actortrain;
using model::matrix;
namespace ds = actortrain::dataset;

namespace {

model::step_function clip_step(double max_norm) {
  return {fmt::format("clip_by_global_norm({})", max_norm), [max_norm](model::step_context& s) {
            auto l = model::default_train_step(s);
            model::clip_by_global_norm(s.gradients(), max_norm);
            return l;
          }};
}

struct custom_fixture : testing::fixture {
  matrix x = testing::random_matrix(128, 4, 3);
  matrix y = testing::random_matrix(128, 1, 4) * 20.0f;  // large errors: clipping bites
  model::model net = model::model::sequential(4, {model::layers::dense(3, model::layers::activation::tanh),
                                                  model::layers::dense(1)});

  model::parameter_store train_cluster(model::step_function step, int epochs) {
    cluster_spec sp;
    sp.simulated = true;
    sp.consistency = consistency_mode::sync();
    sp.train_step = std::move(step);
    cluster c{sys, sp, net, *model::make_sgd({0.05}), model::mean_squared_error()};
    model::fit_options o;
    o.epochs = epochs;
    o.verbose = 0;
    auto d = ds::from_tensor_slices({x}, y);
    auto h = c.schedule([d](const ds::input_context&) { return d.batch(16); }, o);
    for (int i = 0; i < 100000 && !c.done(h); ++i) sched.run();
    BOOST_REQUIRE(c.done(h));
    auto r = c.join(h);
    BOOST_TEST(r.steps == epochs * 8);
    auto f = c.pull_variables();
    sched.run();
    return f.get();
  }

  std::vector<matrix> train_locally(model::step_function step, int epochs) {
    model::trainer t{net, model::make_sgd({0.05}), model::mean_squared_error(), 1};
    if (step) t.set_train_step(std::move(step));
    model::fit_options o;
    o.epochs = epochs;
    o.verbose = 0;
    t.fit(ds::from_tensor_slices({x}, y).batch(16), o);
    std::vector<matrix> out;
    for (auto& v : net.variables()) out.push_back(t.variable(v.name));
    return out;
  }
};

float max_difference(const model::parameter_store& a, const std::vector<matrix>& b) {
  float d = 0;
  for (size_t v = 0; v < b.size(); ++v)
    d = std::max(d, (a[static_cast<model::variable_id>(v)] - b[v]).cwiseAbs().maxCoeff());
  return d;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(custom_steps)

BOOST_FIXTURE_TEST_CASE(the_workers_run_the_step_and_each_steps_gradients_are_applied_once, custom_fixture) {
  auto clipped = train_cluster(clip_step(0.5), 2);
  auto local_clipped = train_locally(clip_step(0.5), 2);
  auto local_plain = train_locally({}, 2);
  BOOST_TEST(max_difference(clipped, local_clipped) == 0.0f);  // the trainer's values, to the bit
  BOOST_TEST(max_difference(clipped, local_plain) > 1e-3f);     // and the step made a difference
}

BOOST_FIXTURE_TEST_CASE(an_exception_in_the_step_fails_the_run_naming_it, custom_fixture) {
  cluster_spec sp;
  sp.simulated = true;
  sp.train_step = {"broken", [](model::step_context&) -> model::logs { throw std::runtime_error("no gradient today"); }};
  cluster c{sys, sp, net, *model::make_sgd({0.05}), model::mean_squared_error()};
  model::fit_options o;
  o.verbose = 0;
  auto d = ds::from_tensor_slices({x}, y);
  auto h = c.schedule([d](const ds::input_context&) { return d.batch(16); }, o);
  for (int i = 0; i < 100000 && !c.done(h); ++i) sched.run();
  try {
    c.join(h);
    BOOST_FAIL("the run succeeded");
  } catch (const run_failed& e) {
    BOOST_TEST(std::string(e.what()).find("no gradient today") != std::string::npos, e.what());
    BOOST_TEST(!e.retryable());  // an application error: not cured by running again
  }
}

BOOST_AUTO_TEST_CASE(a_hundred_random_fault_plans_keep_every_invariant_with_a_custom_step) {
  jobs::linear_options lo;
  lo.epochs = 2;
  lo.examples = 400;  // 20 steps an epoch
  auto j = jobs::linear(lo);
  j.spec.num_workers = 2;
  j.spec.num_ps = 2;
  j.spec.train_step = clip_step(1.0);
  testing::hundred_fault_plans(j, 40);  // 20 steps an epoch, 2 epochs
}

BOOST_AUTO_TEST_SUITE_END()
