// actortrain bench cluster: the main job's MLP on Fashion-MNIST (example fashion_mnist)
// trained by 2 workers and 2 ps shards as actors in one process (the embedded cluster)
// and as 5 processes on 127.0.0.1 (a chief, 2 ps and 2 worker tasks started by
// `actortrain launch`), interleaved round by round. Times count training only (from each
// epoch's first to its last applied step, read from the chief's metrics file: the
// evaluations after each epoch are left out), so samples/s compare the step path. The
// processes run twice per round: tensors on the data plane (data_plane.hpp), and over
// BASP (--no-data-plane).

#include "bench.hpp"
#include "flags.hpp"
#include "jobs.hpp"

#include <actortrain/actors/all.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>

namespace actortrain::tools {

namespace {

struct run_figures {
  double samples_per_second = 0;
  double accuracy = 0;  // the last epoch's val_accuracy
  double staleness = 0; // mean over applied steps
};

run_figures read_figures(const std::string& path) {
  auto t = read_training(path);
  run_figures out;
  if (t.trained_seconds > 0) out.samples_per_second = t.examples / t.trained_seconds;
  if (!t.accuracy_at.empty()) out.accuracy = t.accuracy_at.back().second;
  out.staleness = t.mean_staleness;
  return out;
}

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
  make_example("fashion_mnist", example_args(epochs, metrics, seed), j);
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
                               "--dir", dir, "--timeout", "1800"};
  if (!data_plane) cmd.push_back("--no-data-plane");
  cmd.push_back("--");
  for (auto& a : example_args(epochs, metrics, seed)) cmd.push_back(a);
  std::fflush(stdout);  // or the child's freopen prints our buffered lines again
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("bench cluster: fork failed");
  if (pid == 0) {
    std::vector<char*> argv;
    for (auto& s : cmd) argv.push_back(s.data());
    argv.push_back(nullptr);
    if (std::freopen("/dev/null", "w", stdout) == nullptr) ::_exit(127);
    ::execv("/proc/self/exe", argv.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw std::runtime_error("bench cluster: the cluster of processes failed (run the launch command by hand: "
                             "actortrain launch --example fashion_mnist --ps 2 --workers 2)");
  auto r = read_figures(metrics);
  std::remove(metrics.c_str());
  return r;
}

}  // namespace

int bench_cluster(int argc, char** argv, int first) {
  int epochs = 3, rounds = 2;
  flags f{"actortrain bench cluster",
          "Trains the main job's MLP (784-256-128-10, Adam, batch 128) on Fashion-MNIST with 2 workers\n"
          "and 2 ps shards, as actors in one process (embedded) and as 5 processes on 127.0.0.1\n"
          "(chief, 2 ps, 2 workers, via actortrain launch; tensors on the data plane, then again over\n"
          "BASP with --no-data-plane), interleaved for --rounds rounds (seed = round). Prints\n"
          "training samples/s (evaluations excluded), the final test accuracy and the mean\n"
          "staleness per round, the medians, processes/embedded and data plane/BASP. Flags after\n"
          "`--` go to every run's job (actortrain node --example fashion_mnist -- --help lists them),\n"
          "e.g. -- --pull-every 2 --push-every 2 for Downpour's n_fetch and n_push."};
  f.add("epochs", epochs, "epochs per run").add("rounds", rounds, "rounds (each runs both)");
  if (!f.parse(argc, argv, first)) return 0;
  if (epochs < 1 || rounds < 1) throw usage_error("--epochs and --rounds must be >= 1");
  extra_args = f.positional();
  if (!extra_args.empty()) {
    job probe;  // refuse bad job flags before the first run
    make_example("fashion_mnist", extra_args, probe);
    fmt::print("job flags: {}\n", fmt::join(extra_args, " "));
  }
  std::vector<double> e_sps, p_sps, b_sps, e_acc, p_acc, b_acc;
  fmt::print("{:>5}  {:<10} {:>12} {:>9} {:>10}\n", "round", "variant", "samples/s", "accuracy", "staleness");
  for (int r = 1; r <= rounds; ++r) {
    auto seed = static_cast<uint64_t>(r);
    auto e = embedded(epochs, seed);
    fmt::print("{:>5}  {:<10} {:>12.0f} {:>9.4f} {:>10.2f}\n", r, "embedded", e.samples_per_second, e.accuracy,
               e.staleness);
    auto p = processes(epochs, seed, true);
    fmt::print("{:>5}  {:<10} {:>12.0f} {:>9.4f} {:>10.2f}\n", r, "processes", p.samples_per_second, p.accuracy,
               p.staleness);
    auto b = processes(epochs, seed, false);
    fmt::print("{:>5}  {:<10} {:>12.0f} {:>9.4f} {:>10.2f}\n", r, "over BASP", b.samples_per_second, b.accuracy,
               b.staleness);
    b_sps.push_back(b.samples_per_second);
    b_acc.push_back(b.accuracy);
    std::fflush(stdout);
    e_sps.push_back(e.samples_per_second);
    p_sps.push_back(p.samples_per_second);
    e_acc.push_back(e.accuracy);
    p_acc.push_back(p.accuracy);
  }
  double e = median(e_sps), p = median(p_sps);
  fmt::print("median  embedded {:.0f} samples/s (accuracy {:.4f}), processes {:.0f} samples/s (accuracy {:.4f})\n", e,
             median(e_acc), p, median(p_acc));
  fmt::print("processes over BASP (--no-data-plane) {:.0f} samples/s (accuracy {:.4f}); data plane/BASP = {:.2f}\n",
             median(b_sps), median(b_acc), median(b_sps) > 0 ? p / median(b_sps) : 0.0);
  fmt::print("processes/embedded = {:.2f}; goal: >= 100000 samples/s across processes ({})\n", e > 0 ? p / e : 0.0,
             p >= 100000 ? "met" : "not met");
  return 0;
}

}  // namespace actortrain::tools
