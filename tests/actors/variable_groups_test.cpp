// Variables with optimizers of their own on the ps shards (cluster_spec::variable_groups):
// the wide-and-deep ctr job, its wide part updated by Adagrad and the rest by Adam. What
// the shards hold says so, not the coordinator: their checkpoint keeps each partition's
// slots under its own optimizer's names, a group's learning rate set to zero leaves
// exactly that group's variables where they started, and 100 random fault plans with a
// clipping custom step keep exactly-once (the ledgers) and every other invariant.
#include <actortrain/actors/cluster/cluster.hpp>
#include <actortrain/actors/cluster/job.hpp>
#include <actortrain/actors/jobs/jobs.hpp>
#include <actortrain/actors/sim/simulator.hpp>
#include <actortrain/dataset/all.hpp>
#include <actortrain/model/all.hpp>
#include <actortrain/model/checkpoint/memory_file_system.hpp>

#include <fmt/format.h>

// Last: CAF's test DSL defines macros (inject, expect) that clash with ordinary names.
#include "caf_test.hpp"
#include "fault_plans.hpp"

using namespace actortrain;

namespace {

job wide_and_deep() {
  jobs::ctr_options o;
  o.rows = 1600;
  o.test_rows = 200;
  o.batch = 80;  // 10 steps an epoch per pipeline pair
  o.epochs = 2;
  o.buckets = 512;
  o.dim = 4;
  o.wide_optimizer = "adagrad(0.1)";
  return jobs::ctr(o);
}

struct groups_fixture : testing::fixture {
  job j = wide_and_deep();

  model::parameter_store train(cluster& c) {
    auto fo = j.fit;
    fo.verbose = 0;
    auto h = c.schedule(j.train, fo);
    for (int i = 0; i < 400000 && !c.done(h); ++i) sched.run();
    BOOST_REQUIRE(c.done(h));
    c.join(h);
    auto f = c.pull_variables();
    sched.run();
    return f.get();
  }
  const model::matrix& value(const model::parameter_store& p, const std::string& name) {
    auto& vars = j.structure.variables();
    for (size_t v = 0; v < vars.size(); ++v)
      if (vars[v].name == name) return p[static_cast<model::variable_id>(v)];
    throw std::runtime_error("no variable " + name);
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(variable_groups)

BOOST_FIXTURE_TEST_CASE(each_partition_keeps_the_slots_of_its_own_optimizer, groups_fixture) {
  auto fs = std::make_shared<model::memory_file_system>();
  j.spec.simulated = true;
  j.spec.num_ps = 2;
  j.spec.num_workers = 2;
  j.spec.checkpoint_dir = "/ckpt";
  j.spec.checkpoint_fs = fs;
  cluster c{sys, j};
  auto trained = train(c);
  BOOST_TEST(value(trained, "wide_embedding/embeddings").cwiseAbs().maxCoeff() > 0.0f);  // it learned
  auto list = model::list_checkpoints(*fs, "/ckpt");
  BOOST_REQUIRE(!list.empty());
  auto data = model::read_checkpoint(*fs, list.back().path);
  int wide = 0, deep = 0;
  for (auto& v : data.variables)
    for (auto& p : v.partitions) {
      std::vector<std::string> slots;
      for (auto& [name, m] : p.slots) slots.push_back(name);
      if (v.name.rfind("wide_embedding/", 0) == 0) {
        ++wide;
        BOOST_TEST(slots == std::vector<std::string>{"accumulator"}, v.name);
      } else {
        ++deep;
        BOOST_TEST((slots == std::vector<std::string>{"m", "v"}), v.name);
      }
    }
  BOOST_TEST(wide == 2);  // the ctr job's fixed_shards(2)
  BOOST_TEST(deep > 0);
  BOOST_TEST(data.optimizer.find(" + wide: adagrad(learning_rate=0.1") != std::string::npos, data.optimizer);
}

BOOST_FIXTURE_TEST_CASE(a_groups_learning_rate_reaches_only_its_variables, groups_fixture) {
  j.spec.simulated = true;
  j.spec.num_ps = 2;
  j.spec.num_workers = 2;
  cluster c{sys, j};
  auto first = train(c);  // the wide table learns (it starts at zeros)
  BOOST_TEST(value(first, "wide_embedding/embeddings").cwiseAbs().maxCoeff() > 0.0f);
  auto f = c.set_hyperparams_async({{"wide/learning_rate", 0.0}});
  sched.run();
  f.get();
  BOOST_CHECK_THROW(c.set_hyperparams({{"deep/learning_rate", 0.0}}), std::invalid_argument);
  auto second = train(c);
  // With its rate at zero the wide table did not move; the deep one did.
  BOOST_TEST((value(second, "wide_embedding/embeddings") - value(first, "wide_embedding/embeddings")).cwiseAbs().maxCoeff() == 0.0f);
  BOOST_TEST((value(second, "embedding/embeddings") - value(first, "embedding/embeddings")).cwiseAbs().maxCoeff() > 0.0f);
  BOOST_TEST((value(second, "dense/kernel") - value(first, "dense/kernel")).cwiseAbs().maxCoeff() > 0.0f);
}

BOOST_AUTO_TEST_CASE(a_hundred_random_fault_plans_keep_every_invariant_with_groups_and_a_clipping_step) {
  auto j = wide_and_deep();
  j.spec.num_workers = 2;
  j.spec.num_ps = 2;
  j.spec.train_step = model::clipped_step(5.0);
  testing::hundred_fault_plans(j, 40);  // 1600 rows / 80 per batch, 2 epochs
}

BOOST_AUTO_TEST_SUITE_END()
