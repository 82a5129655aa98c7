// actortrain bench faults: goodput under faults. The main job (example fashion_mnist) as
// processes — a chief, 2 ps and 3 worker tasks with coordinated checkpoints, started by
// `actortrain launch` — runs once without faults and once under a seeded schedule of
// kill -9 (launch --kill: by default a worker every 10 s, a ps task every 30 s, the chief
// once), with launch restarting what is killed (--restart-failed, --restart-chief: the
// chief resumes from the newest checkpoint, or starts over before the first). Judged
// from outside the coordinator where it can be: the metrics file's step lines (the
// training's samples and wall times, the steps applied beyond the job's), launch's own
// lines for when each kill happened, and `actortrain ledger check` on the ledgers the ps
// tasks wrote for exactly-once. Prints the goodput (samples/s under faults over
// samples/s without, in the same invocation), the steps redone, the recovery times
// (median and worst, per role), Young's checkpoint interval, the final accuracies, and
// the verdict of the ledger checker for both runs.

#include "bench.hpp"
#include "fault_schedule.hpp"
#include "flags.hpp"
#include <actortrain/actors/jobs/jobs.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

namespace actortrain::tools {

namespace {

// One kill launch made: its task and wall time.
struct kill_event {
  std::string task;
  double wall = 0;
};

// What a run's metrics file and launch output say.
struct run_record {
  double first_wall = 0, last_wall = 0;  // the first and last applied step
  double examples = 0;                   // over every applied step line, redone ones too
  uint64_t step_lines = 0;
  double final_accuracy = NAN;  // the last epoch's val_accuracy
  std::vector<recovery_mark> marks;  // the lines recovery is judged by
  std::vector<kill_event> kills;
  std::vector<double> checkpoint_pauses;  // each checkpoint's pause_seconds
  int restarts = 0;
  bool exactly_once = false;
  std::string ledger_verdict;
  double seconds() const { return last_wall - first_wall; }
};

run_record read_run(const std::string& metrics, const std::string& launch_log) {
  run_record r;
  std::ifstream in{metrics};
  if (!in) throw std::runtime_error("bench faults: no metrics file " + metrics);
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);  // a line cut by a kill is skipped
    if (j.is_discarded() || !j.is_object() || !j.contains("event") || !j.contains("wall")) continue;
    auto kind = j["event"].get<std::string>();
    double wall = j["wall"].get<double>();
    if (kind == "step") {
      if (r.step_lines++ == 0) r.first_wall = wall;
      r.last_wall = std::max(r.last_wall, wall);
      r.examples += j.value("examples", 0.0);
      r.marks.push_back({wall, kind, j.value("worker", int64_t{-1})});
    } else if (kind == "epoch" && j.contains("values") && j["values"].contains("val_accuracy")) {
      r.final_accuracy = j["values"]["val_accuracy"].get<double>();
    } else if (kind == "checkpoint" && j.contains("values") && j["values"].contains("pause_seconds")) {
      r.checkpoint_pauses.push_back(j["values"]["pause_seconds"].get<double>());
    } else if (kind == "worker_joined" || kind == "ps_restored" || kind == "resumed" || kind == "run_begin") {
      r.marks.push_back({wall, kind, j.value("worker", int64_t{-1})});
    }
  }
  std::ifstream log{launch_log};
  for (std::string line; std::getline(log, line);) {
    // "launch: fault: kill -9 worker:1 (pid 123) at 12.3 s, wall 1733390000.123"
    if (line.rfind("launch: fault: kill -9 ", 0) == 0) {
      std::istringstream ss{line.substr(23)};
      kill_event k;
      ss >> k.task;
      auto w = line.rfind("wall ");
      if (w != std::string::npos) k.wall = std::atof(line.c_str() + w + 5);
      r.kills.push_back(k);
    }
    if (line.find("; restarting it") != std::string::npos) ++r.restarts;
  }
  std::sort(r.marks.begin(), r.marks.end(), [](auto& a, auto& b) { return a.wall < b.wall; });
  return r;
}

}  // namespace

int bench_faults(int argc, char** argv, int first) {
  int epochs = 200, ps = 2, workers = 3, baselines = 2;
  int64_t checkpoint_every = 1000, timeout = 3600;
  uint64_t seed = 1;
  bool keep = false;
  std::string kills = "worker=10,ps=30,chief@60";
  flags f{"actortrain bench faults",
          "Goodput under faults: the main job (example fashion_mnist, Fashion-MNIST's MLP, 3 workers) as\n"
          "processes on 127.0.0.1 — a chief, --ps ps tasks and --workers worker tasks started by\n"
          "actortrain launch, checkpointing every --checkpoint-every applied steps — runs without faults,\n"
          "then under --kill's seeded schedule of kill -9 (launch --kill; by default a worker every 10 s,\n"
          "a ps task every 30 s and the chief once at 60 s), launch restarting whatever is killed (the\n"
          "chief with --resume, from the newest checkpoint), then, with --baselines 2, without faults\n"
          "again, so that the machine's drift over the invocation cancels out. Prints for every run the\n"
          "training samples/s (from the first to the last applied step, recoveries included; a kill\n"
          "before the first step costs nothing here), the goodput (the faulty run's samples/s over the\n"
          "mean of the fault-free runs'), the step lines beyond the job's (steps redone after roll-backs and lost workers;\n"
          "lines a killed chief had not written yet are missing), the recovery time of every kill (median and worst per\n"
          "role: until a worker's replacement applied a step, until the first step after a ps\n"
          "task's roll-back (or after a restarted chief's run restored every shard), or of the\n"
          "restarted chief's run), Young's checkpoint interval from the\n"
          "measured checkpoint pause and the roll-backs seen, the final test accuracies, and exactly-once as\n"
          "`actortrain ledger check` judges the ps tasks' ledgers. Goals: goodput >= 0.85, accuracy\n"
          "within 0.01 of the fault-free runs' mean, exactly once in every run. A fault-free run should\n"
          "take at least 2 minutes (a note says when it did not): raise --epochs on a faster machine.\n"
          "Exit status 0 when every run completed (whether or not the goals were met), 1 when one failed\n"
          "(its directory is kept and named)."};
  f.add("epochs", epochs, "epochs of the job", range<int>{1, 100000})
    .add("ps", ps, "ps tasks", range<int>{1, 16})
    .add("workers", workers, "worker tasks", range<int>{1, 64})
    .add("kill", kills, "the faults, as launch --kill: ROLE=SECONDS (every), ROLE@SECONDS (once)")
    .add("seed", seed, "the seed of the job and of the kills' times and tasks")
    .add("baselines", baselines,
         "fault-free runs: 1 (before the faulty run) or 2 (before and after it: a drift of the machine's speed over "
         "the invocation cancels out of the goodput)",
         range<int>{1, 2})
    .add("checkpoint-every", checkpoint_every, "applied steps between checkpoints", range<int64_t>{1, int64_t{1} << 40})
    .add("timeout", timeout, "each run's limit in seconds (launch --timeout)", range<int64_t>{10, 86400})
    .add("keep", keep, "keep the runs' directory (logs, metrics, ledgers, checkpoints; kept anyway when a run fails or is not exactly once)");
  if (!f.parse(argc, argv, first)) return 0;
  if (!f.positional().empty()) throw usage_error(fmt::format("unexpected argument '{}'", f.positional().front()));
  try {  // before the fault-free run, not after it
    (void)fault_schedule::parse(kills, {{"chief", 1}, {"ps", ps}, {"worker", workers}}, seed, static_cast<double>(timeout));
  } catch (const std::invalid_argument& e) {
    throw usage_error(fmt::format("--kill: {}", e.what()));
  }
  std::vector<std::string> job_args{"--epochs", std::to_string(epochs), "--verbose", "0", "--seed", std::to_string(seed)};
  auto base = fmt::format("/tmp/actortrain-bench-faults-{}", ::getpid());
  ::mkdir(base.c_str(), 0700);
  auto run = [&](const std::string& name, bool faulty) {
    auto dir = base + "/" + name;
    auto metrics = dir + ".jsonl", log = dir + ".log";
    std::remove(metrics.c_str());
    std::vector<std::string> cmd{"actortrain", "launch", "--example", "fashion_mnist", "--ps", std::to_string(ps),
                                 "--workers", std::to_string(workers), "--dir", dir, "--checkpoint-dir", dir + "/ck",
                                 "--checkpoint-every", std::to_string(checkpoint_every), "--restart-failed",
                                 "--restart-chief", "--max-restarts", "1000", "--timeout", std::to_string(timeout),
                                 "--connect-ms", "60000"};
    if (faulty) cmd.insert(cmd.end(), {"--kill", kills, "--kill-seed", std::to_string(seed)});
    cmd.push_back("--");
    cmd.insert(cmd.end(), job_args.begin(), job_args.end());
    cmd.insert(cmd.end(), {"--metrics", metrics});
    fmt::print("{}: {}\n", name, fmt::join(cmd, " "));
    int rc = run_self(cmd, log, true);
    if (rc != 0)
      throw std::runtime_error(fmt::format("bench faults: the {} run failed (exit {}; everything is in {}); the end of "
                                           "{}:\n{}",
                                           name, rc, base, log, tail_of(log, 3000)));
    auto r = read_run(metrics, log);
    std::vector<std::string> check{"actortrain", "ledger", "check", "--example", "fashion_mnist", "--cluster",
                                   dir + "/cluster.json", dir + "/ledgers", "--"};
    check.insert(check.end(), job_args.begin(), job_args.end());
    auto check_log = dir + ".ledger";
    r.exactly_once = run_self(check, check_log, true) == 0;
    std::ifstream verdict{check_log};
    for (std::string line; std::getline(verdict, line);)
      if (!line.empty()) r.ledger_verdict = line;
    return r;
  };
  fmt::print("bench faults: fashion_mnist, {} epochs, chief + {} ps + {} workers, checkpoints every {} steps, "
             "kills {} (seed {})\n",
             epochs, ps, workers, checkpoint_every, kills, seed);
  auto print_clean = [](const std::string& name, const run_record& r) {
    fmt::print("{}: {:.1f} s, {:.0f} samples/s, {} steps, accuracy {:.4f}; {}\n", name, r.seconds(),
               r.examples / r.seconds(), r.step_lines, r.final_accuracy, r.ledger_verdict);
    if (r.seconds() < 120)
      fmt::print("note: this fault-free run trained {:.0f} s, under the 2 minutes the schedule is meant for (raise "
                 "--epochs)\n",
                 r.seconds());
    std::fflush(stdout);
  };
  auto clean = run("fault-free", false);
  print_clean("fault-free", clean);
  auto hit = run("faulty", true);
  // The job's own samples, over the faulty run's time: redone steps are not goodput.
  double good = clean.examples / hit.seconds();
  fmt::print("faulty: {:.1f} s, {} kills, {} restarts, {} step lines ({} beyond the job's {}), accuracy {:.4f}; {}\n",
             hit.seconds(), hit.kills.size(), hit.restarts, hit.step_lines,
             static_cast<int64_t>(hit.step_lines) - static_cast<int64_t>(clean.step_lines), clean.step_lines,
             hit.final_accuracy, hit.ledger_verdict);
  std::fflush(stdout);
  // The fault-free runs: before the faulty one, and after it with --baselines 2.
  std::vector<run_record> cleans{clean};
  if (baselines > 1) {
    cleans.push_back(run("fault-free-after", false));
    print_clean("fault-free, after", cleans.back());
  }
  double base_rate = 0, clean_accuracy = 0;
  bool clean_exact = true;
  std::vector<double> pauses;
  for (auto& c : cleans) {
    base_rate += c.examples / c.seconds() / static_cast<double>(cleans.size());
    clean_accuracy += c.final_accuracy / static_cast<double>(cleans.size());
    clean_exact = clean_exact && c.exactly_once;
    pauses.insert(pauses.end(), c.checkpoint_pauses.begin(), c.checkpoint_pauses.end());
  }
  std::map<std::string, std::vector<double>> rec;
  std::map<std::string, int> never;
  for (auto& k : hit.kills) {
    double t = recovery_seconds(hit.marks, k.task, k.wall);
    auto role = k.task.substr(0, k.task.find(':'));
    if (std::isnan(t))
      ++never[role];
    else
      rec[role].push_back(t);
  }
  for (auto& [role, times] : rec)
    fmt::print("recovery after a {} kill: median {:.2f} s, worst {:.2f} s ({} kills)\n", role, median(times),
               *std::max_element(times.begin(), times.end()), times.size());
  for (auto& [role, n] : never)
    fmt::print("{} {} kill(s) with no recovery seen (the run ended first)\n", n, role);
  // Young's checkpoint interval, sqrt(2 C M): C the measured pause of a checkpoint
  // (fault-free runs), M the mean time between the kills that rolled every shard back in
  // the faulty run (ps tasks and the chief; a lost worker rolls nothing back).
  if (!pauses.empty()) {
    double cost = median(pauses);
    int rollbacks = 0;
    for (auto& k : hit.kills) rollbacks += k.task.rfind("worker:", 0) != 0;
    fmt::print("checkpoints: {} pauses of {:.3f} s (median), {:.1f}% of the fault-free run", clean.checkpoint_pauses.size(),
               cost, 100 * cost * static_cast<double>(clean.checkpoint_pauses.size()) / clean.seconds());
    if (rollbacks > 0) {
      double between = hit.seconds() / rollbacks, interval = std::sqrt(2 * cost * between);
      fmt::print("; with a roll-back every {:.0f} s, Young's interval sqrt(2 x {:.3f} x {:.0f}) = {:.1f} s, about {:.0f} "
                 "steps (--checkpoint-every {})",
                 between, cost, between, interval, interval * static_cast<double>(clean.step_lines) / clean.seconds(),
                 checkpoint_every);
    }
    fmt::print("\n");
  }

  double goodput = good / base_rate;
  bool accurate = std::abs(hit.final_accuracy - clean_accuracy) <= 0.01;
  fmt::print("goodput {:.3f} ({:.0f} against {:.0f} samples/s{})\n", goodput, good, base_rate,
             cleans.size() > 1 ? fmt::format(", the mean of {} fault-free runs", cleans.size()) : std::string{});
  fmt::print("goals: goodput >= 0.85 ({}), accuracy within 0.01 ({}: {:.4f} against {:.4f}), exactly once ({})\n",
             goodput >= 0.85 ? "met" : "not met", accurate ? "met" : "not met", hit.final_accuracy, clean_accuracy,
             hit.exactly_once && clean_exact ? "met" : "NOT MET");
  if (keep || !hit.exactly_once || !clean_exact) {  // the evidence of a violation stays
    fmt::print("logs, metrics, ledgers and checkpoints: {}\n", base);
  } else {
    std::error_code ec;
    std::filesystem::remove_all(base, ec);
  }
  return 0;
}

}  // namespace actortrain::tools
