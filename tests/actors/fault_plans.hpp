#pragma once
// The check several suites run on their own job: 100 random fault plans (seeds 1..100)
// under the simulator, each judged by every invariant it checks (exactly-once from the
// ps shards' ledgers first); every run that completed holds `steps` steps in the
// ledgers, at least 80 completed (a plan that failed one step three times ends as a
// poison step, a valid prefix), and the plans injected something.

#include <actortrain/actors/cluster/job.hpp>
#include <actortrain/actors/sim/simulator.hpp>

#include <boost/test/unit_test.hpp>
#include <fmt/format.h>

namespace actortrain::testing {

inline void hundred_fault_plans(const job& j, int64_t steps) {
  size_t injected = 0;
  int completed = 0;
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    sim_options so;
    so.seed = seed;
    auto r = simulate(j, so);
    injected += r.injected.size();
    if (!r.ok()) BOOST_ERROR(fmt::format("seed {}: {}\nreproduce: {}", seed, r.report(), r.replay));
    if (r.completed()) {
      ++completed;
      BOOST_TEST(r.steps == steps, fmt::format("seed {}: {} steps in the ledgers, not {}", seed, r.steps, steps));
    }
  }
  BOOST_TEST(injected > 100u);  // the plans did something
  BOOST_TEST(completed >= 80, completed << " of 100 runs completed");
}

}  // namespace actortrain::testing
