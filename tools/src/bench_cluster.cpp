// actortrain bench cluster: the main job's MLP on Fashion-MNIST (example fashion_mnist)
// trained by 2 workers and 2 ps shards as actors in one process (the embedded cluster)
// and as 5 processes on 127.0.0.1 (a chief, 2 ps and 2 worker tasks started by
// `actortrain launch`), interleaved round by round. Times count training only (from each
// epoch's first to its last applied step, read from the chief's metrics file: the
// evaluations after each epoch are left out), so samples/s compare the step path. The
// processes run twice per round: tensors on the data plane (data_plane.hpp), and over
// BASP (--no-data-plane). The baselines, in the same rounds, are PyTorch's RPC framework
// as a parameter server (tools/bench/pytorch_rpc_ps.py: 2 trainer processes, 1 server,
// TensorPipe) and PyTorch Hogwild with 2 processes (tools/bench/pytorch_hogwild.py),
// when Debian's python3-torch is installed. Every run is evaluated after each epoch,
// with evaluation left out of its time: each variant's time to 0.85 and 0.88 test
// accuracy, its accuracy after 3 epochs and at the end.

#include "bench.hpp"
#include "flags.hpp"
#include <actortrain/actors/jobs/jobs.hpp>
#include <actortrain/actors/net/process.hpp>

#include <actortrain/actors/all.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <map>

#include <fmt/format.h>

namespace actortrain::tools {

namespace {

// Flags after `--` on the command line, given to every run's job (e.g. --push-every 2).
std::vector<std::string> extra_args;

std::vector<std::string> example_args(int epochs, const std::string& metrics, uint64_t seed) {
  std::vector<std::string> a{"--epochs", std::to_string(epochs), "--metrics", metrics, "--verbose", "0", "--seed",
                             std::to_string(seed)};
  a.insert(a.end(), extra_args.begin(), extra_args.end());
  return a;
}

run_figures embedded(int epochs, uint64_t seed) {
  auto metrics = fmt::format("/tmp/actortrain-bench-cluster-{}-e.jsonl", ::getpid());
  std::remove(metrics.c_str());
  job j;
  jobs::make_job("fashion_mnist", example_args(epochs, metrics, seed), j);
  caf::actor_system_config cfg;
  configure(cfg);
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system sys{cfg};
  auto spec = j.spec;
  spec.num_ps = 2;
  spec.num_workers = 2;
  cluster c{sys, spec, j.structure, *j.optimizer, j.loss, j.metrics()};
  c.fit(j.train, j.fit);
  auto r = read_figures(metrics);
  std::remove(metrics.c_str());
  return r;
}

run_figures processes(int epochs, uint64_t seed, bool data_plane) {
  auto metrics = fmt::format("/tmp/actortrain-bench-cluster-{}-p.jsonl", ::getpid());
  auto dir = fmt::format("/tmp/actortrain-bench-cluster-{}", ::getpid());
  std::remove(metrics.c_str());
  std::vector<std::string> cmd{"actortrain", "launch", "--example", "fashion_mnist", "--ps", "2", "--workers", "2",
                               "--dir", dir, "--timeout", "1800",
                               // Tasks may start slowly on a loaded machine (or a sanitizer
                               // build): the bench measures training, not start-up.
                               "--connect-ms", "60000"};
  if (!data_plane) cmd.push_back("--no-data-plane");
  cmd.push_back("--");
  for (auto& a : example_args(epochs, metrics, seed)) cmd.push_back(a);
  if (run_self(cmd, "/dev/null", false) != 0)
    throw std::runtime_error("bench cluster: the cluster of processes failed (run the launch command by hand: "
                             "actortrain launch --example fashion_mnist --ps 2 --workers 2)");
  auto r = read_figures(metrics);
  std::remove(metrics.c_str());
  return r;
}

}  // namespace

int bench_cluster(int argc, char** argv, int first) {
  int epochs = 10, rounds = 5;
  flags f{"actortrain bench cluster",
          "Trains the main job's MLP (784-256-128-10, Adam, batch 128) on Fashion-MNIST with 2 workers\n"
          "and 2 ps shards, as actors in one process (embedded) and as 5 processes on 127.0.0.1\n"
          "(chief, 2 ps, 2 workers, via actortrain launch; tensors on the data plane, then again over\n"
          "BASP with --no-data-plane), interleaved for --rounds rounds (seed = round). Prints per\n"
          "round training samples/s (evaluations excluded), the test accuracy after 3 epochs and\n"
          "at the end, the training time to 0.85 and to 0.88 test accuracy (evaluated after each\n"
          "epoch; 'never' when not reached, ranked last in the median) and the mean staleness;\n"
          "then the medians, processes/embedded, data plane/BASP and the goals. Flags after\n"
          "`--` go to every run's job (actortrain node --example fashion_mnist -- --help lists them),\n"
          "e.g. -- --pull-every 4 --push-every 4 --local-lr 0.3 for Downpour's n_fetch, n_push and local\n"
          "update. The job's defaults include tasks of 8 steps (--steps-per-execution 8: a worker\n"
          "reports to the coordinator once per 8 steps instead of after each; the same steps).\n\n"
          "The baselines, run in the same rounds, are PyTorch's RPC framework as a parameter server\n"
          "(tools/bench/pytorch_rpc_ps.py: 2 trainer processes of one thread each, 1 server, TensorPipe)\n"
          "and PyTorch Hogwild (tools/bench/pytorch_hogwild.py: 2 processes of one thread on a shared\n"
          "model), with the same model, batch, optimizer and epochs; they need apt-get install\n"
          "python3-torch libopenblas0-pthread. The goal is processes >= 6x the RPC parameter server's\n"
          "samples/s and at least its accuracy after 3 epochs. --baseline auto runs them when it can,\n"
          "pytorch insists, none skips them."};
  std::string baseline = "auto";
  f.add("epochs", epochs, "epochs per run")
      .add("rounds", rounds, "rounds (each runs every variant)")
      .add("baseline", baseline, "auto, pytorch or none");
  if (!f.parse(argc, argv, first)) return 0;
  if (epochs < 1 || rounds < 1) throw usage_error("--epochs and --rounds must be >= 1");
  if (baseline != "auto" && baseline != "pytorch" && baseline != "none")
    throw usage_error(fmt::format("--baseline: '{}' is not auto, pytorch or none", baseline));
  std::string rpc_script, hogwild_script;
  if (baseline != "none") {
    try {
      rpc_script = torch_script("pytorch_rpc_ps.py");
      hogwild_script = torch_script("pytorch_hogwild.py");
    } catch (const std::runtime_error& e) {
      if (baseline == "pytorch") throw std::runtime_error(std::string("bench cluster: no PyTorch baseline: ") + e.what());
      fmt::print("no PyTorch baseline: {}\n", e.what());
      rpc_script.clear();
      hogwild_script.clear();
    }
  }
  extra_args = f.positional();
  if (!extra_args.empty()) {
    job probe;  // refuse bad job flags before the first run
    jobs::make_job("fashion_mnist", extra_args, probe);
    fmt::print("job flags: {}\n", fmt::join(extra_args, " "));
  }
  const std::vector<std::string> names{"embedded", "processes", "over BASP", "PyTorch RPC", "Hogwild"};
  std::map<std::string, std::vector<run_figures>> all;
  fmt::print("{:>5}  {:<11} {:>10} {:>11} {:>9} {:>8} {:>8} {:>10}\n", "round", "variant", "samples/s",
             "acc epoch 3", "final", "to 0.85", "to 0.88", "staleness");
  for (int r = 1; r <= rounds; ++r) {
    auto seed = static_cast<uint64_t>(r);
    for (auto& v : names) {
      run_figures x;
      if (v == "embedded")
        x = embedded(epochs, seed);
      else if (v == "processes" || v == "over BASP")
        x = processes(epochs, seed, v == "processes");
      else if (v == "PyTorch RPC" && !rpc_script.empty())
        x = run_torch(rpc_script, epochs, seed);
      else if (v == "Hogwild" && !hogwild_script.empty())
        x = run_torch(hogwild_script, epochs, seed);
      else
        continue;
      fmt::print("{:>5}  {:<11} {:>10.0f} {:>11.4f} {:>9.4f} {:>8} {:>8} {:>10}\n", r, v, x.samples_per_second,
                 x.accuracy_after(3), x.accuracy, seconds_text(time_to(x.accuracy_at, 0.85)),
                 seconds_text(time_to(x.accuracy_at, 0.88)),
                 std::isnan(x.staleness) ? std::string("-") : fmt::format("{:.2f}", x.staleness));
      std::fflush(stdout);
      all[v].push_back(std::move(x));
    }
  }
  struct medians {
    double sps, acc3, acc, to85, to88;
  };
  std::map<std::string, medians> med;
  fmt::print("\nmedian over {} rounds (times: training seconds; 'never' ranks last):\n", rounds);
  for (auto& v : names) {
    if (!all.count(v)) continue;
    std::vector<double> sps, acc3, acc, t85, t88;
    for (auto& x : all[v]) {
      sps.push_back(x.samples_per_second);
      acc3.push_back(x.accuracy_after(3));
      acc.push_back(x.accuracy);
      t85.push_back(time_to(x.accuracy_at, 0.85));
      t88.push_back(time_to(x.accuracy_at, 0.88));
    }
    med[v] = {median(sps), median(acc3), median(acc), median_time(t85), median_time(t88)};
    fmt::print("  {:<11} {:>10.0f} samples/s  accuracy after 3 epochs {:.4f}, final {:.4f}  to 0.85 {:>6}  to 0.88 {:>6}\n",
               v, med[v].sps, med[v].acc3, med[v].acc, seconds_text(med[v].to85), seconds_text(med[v].to88));
  }
  double e = med["embedded"].sps, p = med["processes"].sps, b = med["over BASP"].sps;
  fmt::print("processes/embedded = {:.2f}; data plane/BASP = {:.2f}\n", e > 0 ? p / e : 0.0, b > 0 ? p / b : 0.0);
  if (!all.count("PyTorch RPC")) {
    fmt::print("goal: processes >= 6x the PyTorch RPC parameter server (not run)\n");
  } else {
    auto& t = med["PyTorch RPC"];
    double ratio = t.sps > 0 ? p / t.sps : 0.0;
    bool accurate = med["processes"].acc3 >= t.acc3;
    fmt::print("processes/PyTorch RPC = {:.2f}; processes/Hogwild = {:.2f}\n", ratio,
               med["Hogwild"].sps > 0 ? p / med["Hogwild"].sps : 0.0);
    fmt::print("goal: processes >= 6x PyTorch RPC at least at its accuracy after 3 epochs ({}: {:.2f}x, accuracy {:.4f} "
               "against {:.4f})\n",
               ratio >= 6 && accurate ? "met" : "not met", ratio, med["processes"].acc3, t.acc3);
  }
  return 0;
}

}  // namespace actortrain::tools
