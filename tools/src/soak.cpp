// actortrain soak: the fault simulator over many seeds. Each seed draws the shape of
// the run (cluster size, pipelines, tasks in flight, steps per execution, speculation,
// pull-ahead, push_every and pull_every with local updates, row-pulled embeddings,
// shared checkpoints, epoch-gate callbacks, several fits with a failing one, a corrupt
// checkpoint, a coordinator take-over) and a fault plan (worker crashes at every phase,
// lost, duplicated and delayed messages — control messages included —, slow and
// partitioned workers, dataset and ps shards that die), trains the planted model on a
// simulated cluster and judges it from the ps partitions' ledgers against the data's
// own definition (simulator.hpp). Prints every failing seed with the command that
// reproduces it, how many seeds exercised each feature and each fault kind, and a
// summary line; exits 1 on a violation, or when a feature or fault kind was exercised
// in fewer than 1% of the seeds (a soak that does not reach something cannot vouch for
// it). --plant runs it with a defect planted and reports how often the checks caught
// it; --example runs a registered job instead of the planted model.

#include "soak.hpp"

#include "flags.hpp"
#include <actortrain/actors/jobs/jobs.hpp>
#include <actortrain/actors/net/process.hpp>

#include <actortrain/actors/sim/simulator.hpp>

#include <cstdio>
#include <optional>
#include <map>
#include <set>

#include <fmt/format.h>

namespace actortrain::tools {

namespace {

// Feature and fault-kind counts over the seeds, each "seeds exercising it".
struct coverage {
  std::map<std::string, uint64_t> features, faults;
  std::set<std::string> not_applicable;

  void feature(const std::string& name, bool exercised) {
    features[name] += exercised ? 1 : 0;
  }
  void fault_kinds(const sim_result& r) {
    std::set<std::string> seen;
    for (auto& line : r.injected) {
      // "<kind> <from> -> <to> #n: <action>" or "poison record ...".
      auto colon = line.rfind(": ");
      if (colon == std::string::npos) continue;
      seen.insert("action: " + line.substr(colon + 2));
      auto kind = line.substr(0, line.find(' '));
      static const std::set<std::string> control{"fence", "round", "snapshot", "init", "stats", "keep", "restore", "hyper",
                                                 "gate"};
      if (control.count(kind)) seen.insert("control: " + kind);
    }
    for (auto& s : seen) ++faults[s];
  }
  // Lines of the table, and the names below `minimum`.
  std::vector<std::string> below(uint64_t minimum) const {
    std::vector<std::string> out;
    for (auto& [k, n] : features)
      if (!not_applicable.count(k) && n < minimum) out.push_back(k);
    for (auto& [k, n] : faults)
      if (!not_applicable.count(k) && n < minimum) out.push_back(k);
    return out;
  }
  void print(uint64_t seeds, uint64_t minimum) const {
    fmt::print("coverage (seeds exercising each; minimum {} = 1% of {}):\n", minimum, seeds);
    for (auto& [k, n] : features)
      fmt::print("  feature {:<36} {:>7}{}\n", k, n, not_applicable.count(k) ? "  (n/a in this mode)" : "");
    for (auto& [k, n] : faults)
      fmt::print("  fault   {:<36} {:>7}{}\n", k, n, not_applicable.count(k) ? "  (n/a in this mode)" : "");
  }
};

}  // namespace

int soak(int argc, char** argv, int first) {
  uint64_t seeds = 200, first_seed = 1;
  int faults = 4, workers = 0, ps = 0, pipelines = 0, epochs = 0, spe = 0, tasks = -1, pull_every = 0, push_every = 0;
  int fits = 0, failing_fit = -2, corrupt = -1;
  int64_t checkpoint_every = -1, take_over_after = -1;
  bool fixed = false, pull_ahead = false, sparse = false, shared = false, callbacks = false, no_control = false;
  bool validation = false, dynamic = false;
  bool hashes = false, verbose = false, trace = false;
  double speculate = -1;
  std::string plant_name = "none", example;
  consistency_mode consistency;
  flags f{"actortrain soak",
          "Runs the fault simulator for --seeds seeds from --first-seed. Each seed draws the run's shape and a\n"
          "fault plan, trains a planted model on a simulated cluster, and checks exactly-once from the ps\n"
          "partitions' ledgers against the data's own definition, the consistency mode's bounds, and (sync,\n"
          "bounded_staleness(0)) values bit-identical to a fault-free run. Shape flags fix one feature for every\n"
          "seed (unset: drawn); --fixed draws nothing. Failing seeds are printed with the command that\n"
          "reproduces them; then how many seeds exercised each feature and fault kind. Exit status 1 on a\n"
          "violation, or when a feature or fault kind reached fewer than 1% of the seeds.\n"
          "  actortrain soak --example NAME [flags] [-- job flags]   a registered job under random plans"};
  f.add("seeds", seeds, "how many seeds to run")
    .add("first-seed", first_seed, "the first seed")
    .add("faults", faults, "fault rules per plan")
    .add_parsed("consistency", "async",
                "async, bounded_staleness(s) (also checks staleness <= 2s) or sync (also checks staleness 0, the "
                "rounds, and values equal to a fault-free run's)",
                [&consistency](const std::string& v) { consistency = consistency_mode::parse(v); })
    .add("fixed", fixed, "draw no shape: take every shape flag as given (unset ones take the built-in defaults)")
    .add("workers", workers, "workers (0: drawn)")
    .add("ps", ps, "ps shards, 1 to 4 (0: drawn)")
    .add("pipelines", pipelines, "input pipelines (0: drawn)")
    .add("epochs", epochs, "epochs per fit (0: drawn)")
    .add("steps-per-execution", spe, "steps per task (0: drawn)")
    .add("tasks-in-flight", tasks, "tasks a worker holds at once (0: the cluster's default; -1: drawn)")
    .add("pull-ahead", pull_ahead, "workers pull the next step's parameters ahead (else drawn)")
    .add("speculate", speculate, "re-run a step elsewhere after this many times the median (0: off; -1: drawn)")
    .add("pull-every", pull_every, "Downpour's n_fetch with local updates, async (0: drawn)")
    .add("push-every", push_every, "Downpour's n_push, async (0: drawn)")
    .add("sparse", sparse, "an embedding table pulled by row (else drawn)")
    .add("dynamic", dynamic, "the embedding table keyed by the raw id, on every shard (implies --sparse; else drawn)")
    .add("checkpoint-shared", shared, "ps shards write their own partitions into the checkpoint (else drawn)")
    .add("validation", validation, "validation data evaluated after every epoch (else drawn)")
    .add("callbacks", callbacks, "early stopping with restore and a learning-rate schedule: the epoch gate (else drawn)")
    .add("checkpoint-every", checkpoint_every, "checkpoint every this many steps (0: none, and no ps crashes; -1: drawn)")
    .add("take-over-after", take_over_after,
         "after this many steps of the last fit a new coordinator takes the run over while the old one goes on as a "
         "zombie (0: never; -1: drawn)")
    .add("fits", fits, "fit calls per cluster (0: drawn)")
    .add("failing-fit", failing_fit, "the fit (from 0) whose data has a NaN batch (-1: none; -2: drawn)")
    .add("corrupt-checkpoint", corrupt, "the n-th committed checkpoint gets a flipped bit (0: none; -1: drawn)")
    .add("no-control-faults", no_control, "plans fault no control message")
    .add("plant", plant_name,
         "plant a defect to show the checks catch it: apply_twice_after_rollback, skip_step, foreign_step, "
         "wrong_batch or visit_twice")
    .add("example", example, "simulate this registered job (" + jobs::registered_names() + ") instead of the planted model")
    .add("hashes", hashes, "print each seed's trace hash (determinism across processes) and the digests of its final values and ledgers (unchanged outcomes across a refactoring)")
    .add("verbose", verbose, "print every seed's plan and injected faults")
    .add("trace", trace, "with --verbose: print each seed's events, and where they part from the fault-free run's");
  if (!f.parse(argc, argv, first)) return 0;
  if (seeds < 1) throw usage_error("--seeds must be >= 1");
  if (faults < 0) throw usage_error("--faults must be >= 0");
  if (ps < 0 || ps > 4) throw usage_error("--ps must be 1 to 4 (the simulated model has 4 variables)");
  if (workers < 0 || pipelines < 0 || epochs < 0 || spe < 0 || fits < 0 || pull_every < 0 || push_every < 0)
    throw usage_error("--workers, --pipelines, --epochs, --steps-per-execution, --fits, --pull-every, --push-every "
                      "must be >= 1 (0: drawn)");
  if (tasks < -1 || corrupt < -1 || checkpoint_every < -1 || take_over_after < -1 || failing_fit < -2)
    throw usage_error("--tasks-in-flight, --corrupt-checkpoint, --checkpoint-every, --take-over-after must be >= 0 "
                      "(-1: drawn); --failing-fit >= -1 (-2: drawn)");
  if (!(speculate == -1 || speculate == 0 || speculate >= 1)) throw usage_error("--speculate must be 0 (off) or >= 1");
  planted_defect plant;
  try {
    plant = planted_defect_from_string(plant_name);
  } catch (const std::invalid_argument& e) {
    throw usage_error(std::string("--plant: ") + e.what());
  }
  bool sync = consistency.mode() == consistency_mode::kind::sync;

  // The shape of a seed: drawn, then the flags given.
  auto shape_of = [&](uint64_t seed) {
    sim_shape s = fixed ? sim_shape{} : random_shape(seed, consistency);
    s.consistency = consistency;
    s.faults = faults;
    if (workers > 0) s.num_workers = workers;
    if (ps > 0) s.num_ps = ps;
    if (pipelines > 0) s.num_pipelines = pipelines;
    if (epochs > 0) s.epochs = epochs;
    if (spe > 0) s.steps_per_execution = spe;
    if (tasks >= 0) s.tasks_in_flight = tasks;
    if (pull_ahead) s.pull_ahead = true;
    if (speculate >= 0) s.speculate_after = speculate;
    if (pull_every > 0) s.pull_every = pull_every;
    if (push_every > 0) s.push_every = push_every;
    if (sparse || dynamic) s.sparse = true;
    if (dynamic) s.dynamic = true;
    if (shared) s.checkpoint_shared = true;
    if (callbacks) s.callbacks = true;
    if (validation) s.validation = true;
    if (checkpoint_every >= 0) s.checkpoint_every = checkpoint_every;
    if (take_over_after >= 0) s.take_over_after = take_over_after;
    if (fits > 0) s.fits = fits;
    if (failing_fit >= -1) s.failing_fit = failing_fit;
    if (corrupt >= 0) s.corrupt_checkpoint = corrupt;
    if (no_control) s.control_faults = false;
    s.plant = plant;
    if (s.take_over_after > 0 && s.checkpoint_every == 0)
      throw usage_error("--take-over-after needs checkpoints (--checkpoint-every > 0)");
    if (sync && s.steps_per_execution != 1)
      throw usage_error("--consistency sync: its rounds take tasks of one step, give --steps-per-execution 1");
    // push_every sums dense gradients only: a shape drawn with it and made sparse by a
    // flag drops it; asked for with a table, it is refused.
    if (s.sparse && s.push_every > 1) {
      if (push_every > 1) throw usage_error("--push-every takes dense variables only: not with --sparse or --dynamic");
      s.push_every = 1;
    }
    if (s.failing_fit >= s.fits) s.failing_fit = -1;
    return s;
  };

  // A registered job instead of the planted model.
  std::optional<job> user_job;
  if (!example.empty()) {
    job j;
    if (!jobs::make_job(example, f.positional(), j)) return 0;
    if (!consistency.is_async()) j.spec.consistency = consistency;
    user_job = std::move(j);
  } else if (!f.positional().empty()) {
    throw usage_error("actortrain soak: unexpected argument '" + f.positional()[0] + "' (job flags go after --example NAME --)");
  }

  coverage cov;
  bool async = consistency.is_async();
  for (auto* k : {"push_every", "pull_every with local updates"})
    if (!async) cov.not_applicable.insert(k);
  if (sparse || dynamic) cov.not_applicable.insert("push_every");  // it takes dense variables only
  for (auto* k : {"steps per execution > 1", "pull-ahead"})
    if (sync) cov.not_applicable.insert(k);
  if (!sync) cov.not_applicable.insert("control: round");
  uint64_t failed = 0, violations = 0, injected = 0, restarts = 0, poisoned = 0, torn = 0, steps = 0, rebuilt = 0,
           restores = 0, take_overs = 0, most_stale = 0, rounds = 0, compared = 0;
  uint64_t fired = 0, fired_failed_run = 0, caught = 0;
  std::vector<uint64_t> missed;
  for (uint64_t s = first_seed; s < first_seed + seeds; ++s) {
    sim_result r;
    sim_shape shape;
    if (user_job) {
      sim_options o;
      o.seed = s;
      o.faults = faults;
      o.control_faults = !no_control;
      if (fits > 0) o.fits = fits;
      if (failing_fit >= 0 && failing_fit < o.fits) o.failing_fit = failing_fit;
      if (corrupt > 0) o.corrupt_checkpoint = corrupt;
      if (take_over_after > 0) o.take_over_after = take_over_after;
      if (checkpoint_every >= 0) o.checkpoint_every = checkpoint_every;
      o.plant = plant;
      r = simulate(*user_job, o);
      r.replay = fmt::format("actortrain soak --example {} --seeds 1 --first-seed {} --faults {}{} --verbose{}", example, s,
                             faults, no_control ? " --no-control-faults" : "",
                             f.positional().empty() ? "" : " -- " + fmt::format("{}", fmt::join(f.positional(), " ")));
    } else {
      shape = shape_of(s);
      if (trace) {
        auto o = sim_options_for(shape, s);
        o.keep_trace = true;
        r = simulate(sim_job(shape, s), o);
        r.replay = soak_replay(shape, s);
      } else {
        r = simulate(s, shape);
      }
      cov.feature("several fits", shape.fits > 1);
      cov.feature("a failed run, then a fit", shape.failing_fit >= 0);
      cov.feature("push_every", shape.push_every > 1);
      cov.feature("pull_every with local updates", shape.pull_every > 1);
      cov.feature("row-pulled embeddings", shape.sparse);
      cov.feature("tables keyed by id", shape.dynamic);
      cov.feature("shared checkpoints", shape.checkpoint_shared);
      cov.feature("epoch-gate callbacks", shape.callbacks);
      cov.feature("validation after every epoch", shape.validation);
      for (int n = 1; n <= 4; ++n) cov.feature(fmt::format("{} ps shard(s)", n), shape.num_ps == n);
      cov.feature("tasks in flight set (1 to 4)", shape.tasks_in_flight > 0);
      cov.feature("steps per execution > 1", shape.steps_per_execution > 1);
      cov.feature("pull-ahead", shape.pull_ahead);
      cov.feature("speculation that re-ran a step", r.speculated > 0);
      cov.feature("coordinator take-over", r.taken_over);
      cov.feature("corrupt checkpoint skipped", r.skipped_checkpoints > 0);
      cov.feature("ps roll-back", r.ps_restores > 0);
      cov.feature("roll-back to an incremental checkpoint", r.incremental_restores > 0);
      cov.fault_kinds(r);
    }
    injected += r.injected.size();
    restarts += static_cast<uint64_t>(r.restarts);
    torn += static_cast<uint64_t>(r.torn);
    rebuilt += static_cast<uint64_t>(r.rebuilt);
    restores += static_cast<uint64_t>(r.ps_restores);
    take_overs += r.taken_over ? 1 : 0;
    most_stale = std::max(most_stale, r.max_staleness);
    rounds += r.rounds;
    steps += static_cast<uint64_t>(r.steps);
    compared += r.values_compared ? 1 : 0;
    if (r.poisoned()) ++poisoned;
    // A planted defect: the checks must catch it whenever it took effect in a run the
    // ledgers are held to whole (in one that failed it may lie past the valid prefix).
    bool defect_visible = r.planted_visible();
    if (plant != planted_defect::none) {
      if (defect_visible) {
        ++fired;
        if (!r.ok())
          ++caught;
        else
          missed.push_back(s);
      } else if (!r.planted_fired.empty()) {
        ++fired_failed_run;
      }
    }
    if (hashes)
      fmt::print("seed {} trace {:016x} values {:016x} ledgers {:016x}\n", s, r.trace_hash, r.values_digest,
                 r.ledgers_digest);
    bool bad = plant == planted_defect::none ? !r.ok() : (defect_visible && r.ok());
    if (verbose || bad) {
      fmt::print("seed {}: {} ({} steps in the ledgers)\n", s,
                 plant != planted_defect::none ? (bad ? "MISSED" : r.ok() ? "ok" : "caught") : (r.ok() ? "ok" : "VIOLATION"),
                 r.steps);
      fmt::print("{}", r.report());
      if (trace) {
        // Which worker computed a step is the plan's business (lost workers, re-runs):
        // where the runs part is judged without it.
        auto what = [](const std::string& line) {
          auto at = line.find(" worker ");
          if (at == std::string::npos || line.rfind("step ", 0) != 0) return line;
          auto end = line.find(' ', at + 8);
          return line.substr(0, at) + (end == std::string::npos ? "" : line.substr(end));
        };
        std::vector<std::string> mine, theirs;
        for (auto& l : r.trace)
          if (l.rfind("step ", 0) == 0) mine.push_back(what(l));
        for (auto& l : r.reference_trace)
          if (l.rfind("step ", 0) == 0) theirs.push_back(what(l));
        size_t agree = 0;
        while (agree < mine.size() && agree < theirs.size() && mine[agree] == theirs[agree]) ++agree;
        if (!r.reference_trace.empty())
          fmt::print("  the applied steps agree with the fault-free run's for the first {} (of {} and {})\n", agree,
                     mine.size(), theirs.size());
        size_t same = 0;
        while (same < r.trace.size() && same < r.reference_trace.size() && what(r.trace[same]) == what(r.reference_trace[same]))
          ++same;
        for (size_t i = 0; i < r.trace.size(); ++i)
          fmt::print("  {} {}\n", !r.reference_trace.empty() && i >= same ? "*" : " ", r.trace[i]);
        (void)same;
        if (!r.reference_trace.empty()) {
          fmt::print("  the fault-free run from its event {} on:\n", same + 1);
          for (size_t i = same; i < r.reference_trace.size(); ++i) fmt::print("    {}\n", r.reference_trace[i]);
        }
      }
      fmt::print("  reproduce: {}\n", r.replay);
    }
    if (plant == planted_defect::none && !r.ok()) {
      ++failed;
      violations += r.violations.size();
    }
    std::fflush(stdout);
  }
  fmt::print("torn re-runs: {} of {} applied steps combined slices of two computations{}\n", torn, steps,
             sync ? " (of the same batch on the same parameters in a sync round: equal slices)" : "");
  fmt::print("consistency {}: max staleness {}{}; values compared with a fault-free run in {} seeds\n",
             consistency.to_string(),
             most_stale, sync ? fmt::format(", {} rounds", rounds) : "", compared);
  uint64_t minimum = std::max<uint64_t>(1, seeds / 100);
  bool thin = false;
  if (!user_job) {
    cov.print(seeds, minimum);
    auto below = cov.below(minimum);
    // A soak fixed to one shape or planting a defect reaches only what it was told to.
    if (!fixed && plant == planted_defect::none && !below.empty()) {
      fmt::print("coverage below the minimum: {}\n", fmt::join(below, ", "));
      thin = true;
    }
  }
  if (plant != planted_defect::none) {
    fmt::print("planted {}: took effect in {} of {} seeds (and in {} more only in runs held to a prefix), caught in {}{}\n",
               to_string(plant), fired, seeds, fired_failed_run, caught,
               missed.empty() ? "" : fmt::format("; MISSED in seeds {}", fmt::join(missed, ", ")));
    return missed.empty() && fired > 0 ? 0 : 1;
  }
  fmt::print("soak: {} seeds, {} faults injected, {} workers restarted, {} dataset shards rebuilt, "
             "{} ps roll-backs, {} coordinator take-overs, {} poison-step endings, {} violations in {} seeds\n",
             seeds, injected, restarts, rebuilt, restores, take_overs, poisoned, violations, failed);
  return failed == 0 && !thin ? 0 : 1;
}

}  // namespace actortrain::tools
