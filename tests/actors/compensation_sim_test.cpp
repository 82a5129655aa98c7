// Staleness compensation under faults: with lookahead (workers compute on extrapolated
// values, each shard keeps the last update) and with dc_asgd (each shard keeps its last
// versions), 100 random fault plans keep every invariant, judged from the ps shards'
// ledgers; roll-backs and respawned shards start the compensation again from the
// restored values. The maths is tested alone in compensation_test.cpp.
#include <actortrain/actors/cluster/cluster.hpp>
#include <actortrain/actors/jobs/jobs.hpp>
#include <actortrain/actors/sim/simulator.hpp>

#include <boost/test/unit_test.hpp>

#include "fault_plans.hpp"

using namespace actortrain;

namespace {

job linear_with(staleness_compensation how) {
  jobs::linear_options lo;
  lo.epochs = 2;
  lo.examples = 400;  // 3 pipelines of 134, 133 and 133 examples: 7 batches of 20 each
  auto j = jobs::linear(lo);
  j.spec.num_workers = 3;  // stale gradients to compensate
  j.spec.num_ps = 2;
  j.spec.compensation = how;
  return j;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(compensation_under_faults)

BOOST_AUTO_TEST_CASE(a_hundred_random_fault_plans_keep_every_invariant_with_lookahead) {
  testing::hundred_fault_plans(linear_with(staleness_compensation::lookahead()), 42);
}

BOOST_AUTO_TEST_CASE(a_hundred_random_fault_plans_keep_every_invariant_with_dc_asgd) {
  testing::hundred_fault_plans(linear_with(staleness_compensation::dc_asgd(0.5)), 42);
}

BOOST_AUTO_TEST_SUITE_END()
