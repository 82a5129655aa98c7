// actortrain soak: the fault simulator over many seeds. Each seed draws a fault plan
// (worker crashes at every phase, lost, duplicated and delayed messages, slow and
// partitioned workers, dataset and ps shards that die), trains a small cluster on CAF's test coordinator, and checks
// exactly-once application and visitation and the exact step count. Prints every failing
// seed with the command that reproduces it, and a summary line; exits 1 on a violation.

#include "soak.hpp"

#include "flags.hpp"

#include <actortrain/actors/simulator.hpp>

#include <cstdio>

#include <fmt/format.h>

namespace actortrain::tools {

int soak(int argc, char** argv, int first) {
  uint64_t seeds = 200, first_seed = 1;
  int faults = 4, workers = 3, ps = 2, pipelines = 3, epochs = 2, spe = 1;
  int64_t checkpoint_every = 10, take_over_after = 0;
  bool pull_ahead = false, hashes = false, verbose = false;
  double speculate = 0;
  std::string consistency = "async";
  flags f{"actortrain soak",
          "Runs the fault simulator for --seeds seeds from --first-seed: each seed draws a\n"
          "fault plan, trains a planted linear model on a simulated cluster and checks\n"
          "exactly-once application per shard, exactly-once visitation and the step count.\n"
          "Failing seeds are printed with the command that reproduces them; the last line\n"
          "sums up. Exit status 1 when any seed violated an invariant."};
  f.add("seeds", seeds, "how many seeds to run")
    .add("first-seed", first_seed, "the first seed")
    .add("faults", faults, "faults per plan")
    .add("workers", workers, "workers")
    .add("ps", ps, "ps shards (1 to 4)")
    .add("pipelines", pipelines, "input pipelines (dataset shards)")
    .add("epochs", epochs, "epochs per run")
    .add("steps-per-execution", spe, "steps per task")
    .add("pull-ahead", pull_ahead, "workers pull the next step's parameters ahead")
    .add("speculate", speculate, "re-run a step elsewhere after this many times the median (0: off)")
    .add("checkpoint-every", checkpoint_every,
         "checkpoint every this many steps (a lost ps shard rolls back to the newest); 0: none, and no ps crashes")
    .add("take-over-after", take_over_after,
         "after this many steps a new coordinator resumes the run while the old one goes on as a zombie (0: never)")
    .add("consistency", consistency,
         "async, bounded_staleness(s) (also checks staleness <= 2s) or sync (also checks staleness 0 and the rounds)")
    .add("hashes", hashes, "print each seed's trace hash (determinism across processes)")
    .add("verbose", verbose, "print every seed's plan and injected faults");
  if (!f.parse(argc, argv, first)) return 0;
  if (seeds < 1) throw usage_error("--seeds must be >= 1");
  if (faults < 0 || workers < 1 || pipelines < 1 || epochs < 1 || spe < 1)
    throw usage_error("--faults must be >= 0; --workers, --pipelines, --epochs, --steps-per-execution >= 1");
  if (checkpoint_every < 0 || take_over_after < 0)
    throw usage_error("--checkpoint-every and --take-over-after must be >= 0");
  if (take_over_after > 0 && checkpoint_every == 0)
    throw usage_error("--take-over-after needs checkpoints (--checkpoint-every > 0)");
  if (ps < 1 || ps > 4) throw usage_error("--ps must be 1 to 4 (the simulated model has 4 variables)");
  sim_shape shape;
  shape.faults = faults;
  shape.num_workers = workers;
  shape.num_ps = ps;
  shape.num_pipelines = pipelines;
  shape.epochs = epochs;
  shape.steps_per_execution = spe;
  shape.pull_ahead = pull_ahead;
  shape.speculate_after = speculate;
  shape.checkpoint_every = checkpoint_every;
  shape.take_over_after = take_over_after;
  shape.consistency = consistency;
  if (consistency == "sync" && spe != 1) throw usage_error("--consistency sync needs --steps-per-execution 1");
  if (!(speculate == 0 || speculate >= 1)) throw usage_error("--speculate must be 0 (off) or >= 1");
  auto shape_flags = fmt::format("--faults {} --workers {} --ps {} --pipelines {} --epochs {} --steps-per-execution {}{}"
                                 " --speculate {} --checkpoint-every {} --take-over-after {} --consistency '{}'",
                                 faults, workers, ps, pipelines, epochs, spe, pull_ahead ? " --pull-ahead" : "", speculate,
                                 checkpoint_every, take_over_after, consistency);
  uint64_t failed = 0, violations = 0, injected = 0, restarts = 0, poisoned = 0, torn = 0, steps = 0, rebuilt = 0,
           restores = 0, take_overs = 0, most_stale = 0, rounds = 0;
  for (uint64_t s = first_seed; s < first_seed + seeds; ++s) {
    auto r = simulate(s, shape);
    injected += r.injected.size();
    restarts += static_cast<uint64_t>(r.restarts);
    torn += static_cast<uint64_t>(r.torn);
    rebuilt += static_cast<uint64_t>(r.rebuilt);
    restores += static_cast<uint64_t>(r.ps_restores);
    take_overs += r.taken_over ? 1 : 0;
    most_stale = std::max(most_stale, r.max_staleness);
    rounds += r.rounds;
    steps += static_cast<uint64_t>(r.steps);
    if (!r.completed && r.ok()) ++poisoned;
    if (hashes) fmt::print("seed {} trace {:016x}\n", s, r.trace_hash);
    if (verbose || !r.ok()) {
      fmt::print("seed {}: {} ({} of {} steps{})\n", s, r.ok() ? "ok" : "VIOLATION", r.steps, r.expected_steps,
                 r.error.empty() ? "" : ", " + r.error);
      for (auto& v : r.violations) fmt::print("  violation: {}\n", v);
      for (auto& p : r.plan) fmt::print("  rule: {}\n", p);
      for (auto& i : r.injected) fmt::print("  injected: {}\n", i);
      if (!r.ok()) fmt::print("  reproduce: actortrain soak --seeds 1 --first-seed {} {} --verbose\n", s, shape_flags);
    }
    if (!r.ok()) {
      ++failed;
      violations += r.violations.size();
    }
    std::fflush(stdout);
  }
  fmt::print("torn re-runs: {} of {} applied steps combined slices of two computations{}\n", torn, steps,
             consistency == "sync" ? " (of the same batch on the same parameters in a sync round: equal slices)" : "");
  fmt::print("consistency {}: max staleness {}{}\n", consistency, most_stale,
             consistency == "sync" ? fmt::format(", {} rounds", rounds) : "");
  fmt::print("soak: {} seeds, {} faults injected, {} workers restarted, {} dataset shards rebuilt, "
             "{} ps roll-backs, {} coordinator take-overs, {} poison-step endings, {} violations in {} seeds\n",
             seeds, injected, restarts, rebuilt, restores, take_overs, poisoned, violations, failed);
  return failed == 0 ? 0 : 1;
}

}  // namespace actortrain::tools
