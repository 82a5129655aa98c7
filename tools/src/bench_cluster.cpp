// actortrain bench cluster: the main job's MLP on Fashion-MNIST (example fashion_mnist)
// trained by 2 workers and 2 ps shards as actors in one process (the embedded cluster)
// and as 5 processes on 127.0.0.1 (a chief, 2 ps and 2 worker tasks started by
// `actortrain launch`), interleaved round by round. Times count training only (from each
// epoch's first to its last applied step, read from the chief's metrics file: the
// evaluations after each epoch are left out), so samples/s compare the step path. The
// processes run twice per round: tensors on the data plane (data_plane.hpp), and over
// BASP (--no-data-plane). The baseline, in the same rounds, is PyTorch's RPC framework as
// a parameter server (tools/bench/pytorch_rpc_ps.py: 2 trainer processes, 1 server,
// TensorPipe), when Debian's python3-torch is installed.

#include "bench.hpp"
#include "flags.hpp"
#include <actortrain/actors/jobs/jobs.hpp>
#include <actortrain/actors/net/process.hpp>

#include <actortrain/actors/all.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

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

// The PyTorch baseline's script: in the source tree, else where `make install` put it.
std::string baseline_script() {
  for (const char* dir : {ACTORTRAIN_BENCH_SOURCE_DIR, ACTORTRAIN_BENCH_INSTALL_DIR}) {
    auto path = std::string{dir} + "/pytorch_rpc_ps.py";
    struct stat st{};
    if (::stat(path.c_str(), &st) == 0) return path;
  }
  return {};
}

// Why the baseline cannot run here ("" when it can).
std::string baseline_missing(const std::string& script) {
  if (script.empty())
    return fmt::format("pytorch_rpc_ps.py is neither in {} nor in {}", ACTORTRAIN_BENCH_SOURCE_DIR,
                       ACTORTRAIN_BENCH_INSTALL_DIR);
  if (std::system("/usr/bin/python3 -c 'import torch.distributed.rpc' >/dev/null 2>&1") != 0)
    return "/usr/bin/python3 cannot import torch.distributed.rpc (apt-get install python3-torch "
           "libopenblas0-pthread)";
  return {};
}

run_figures pytorch(const std::string& script, int epochs, uint64_t seed) {
  auto log = fmt::format("/tmp/actortrain-bench-cluster-{}-torch.log", ::getpid());
  auto cmd = fmt::format("/usr/bin/python3 '{}' --epochs {} --seed {} 2>'{}'", script, epochs, seed, log);
  std::fflush(stdout);
  FILE* out = ::popen(cmd.c_str(), "r");
  if (out == nullptr) throw std::runtime_error("bench cluster: cannot start " + cmd);
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, out)) > 0;) text.append(buf, n);
  int status = ::pclose(out);
  auto last = text.find_last_of('{');
  auto j = last == std::string::npos ? nlohmann::json{} : nlohmann::json::parse(text.substr(last), nullptr, false);
  if (status != 0 || !j.is_object() || !j.contains("samples_per_second") || !j.contains("accuracy") ||
      !j.contains("staleness")) {
    std::ifstream err{log};
    std::stringstream tail;
    tail << err.rdbuf();
    auto e = tail.str();
    if (e.size() > 2000) e = e.substr(e.size() - 2000);
    throw std::runtime_error(fmt::format("bench cluster: the PyTorch baseline failed ({}):\n{}", cmd, e));
  }
  std::remove(log.c_str());
  run_figures r;
  r.samples_per_second = j["samples_per_second"].get<double>();
  r.accuracy = j["accuracy"].get<double>();
  r.staleness = j.value("staleness", 0.0);
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
          "e.g. -- --pull-every 4 --push-every 4 --local-lr 0.3 for Downpour's n_fetch, n_push and local\n"
          "update. Unless they set --steps-per-execution or --push-every,\n"
          "the runs take --steps-per-execution 8 (a worker reports to the coordinator once per 8\n"
          "steps instead of after each; the same steps).\n\n"
          "The baseline, run in the same rounds, is PyTorch's RPC framework as a parameter server\n"
          "(tools/bench/pytorch_rpc_ps.py: 2 trainer processes of one thread each, 1 server, TensorPipe,\n"
          "the same model, batch, optimizer and epochs; needs apt-get install python3-torch\n"
          "libopenblas0-pthread). The goal is processes >= 3x the baseline at its accuracy\n"
          "(within 0.01). --baseline auto runs it when it can, pytorch insists, none skips it."};
  std::string baseline = "auto";
  f.add("epochs", epochs, "epochs per run")
      .add("rounds", rounds, "rounds (each runs every variant)")
      .add("baseline", baseline, "auto, pytorch or none");
  if (!f.parse(argc, argv, first)) return 0;
  if (epochs < 1 || rounds < 1) throw usage_error("--epochs and --rounds must be >= 1");
  if (baseline != "auto" && baseline != "pytorch" && baseline != "none")
    throw usage_error(fmt::format("--baseline: '{}' is not auto, pytorch or none", baseline));
  std::string script;
  if (baseline != "none") {
    script = baseline_script();
    auto missing = baseline_missing(script);
    if (!missing.empty()) {
      if (baseline == "pytorch") throw std::runtime_error("bench cluster: no PyTorch baseline: " + missing);
      fmt::print("no PyTorch baseline: {}\n", missing);
      script.clear();
    }
  }
  extra_args = f.positional();
  // Tasks of 8 steps: a worker reports to the coordinator once per 8 steps instead of
  // every step (Keras's steps_per_execution). PyTorch's trainers report to nobody.
  auto given = [&](const std::string& flag) {
    for (auto& a : extra_args)
      if (a == "--" + flag || a.rfind("--" + flag + "=", 0) == 0) return true;
    return false;
  };
  if (!given("steps-per-execution") && !given("push-every"))
    extra_args.insert(extra_args.begin(), {"--steps-per-execution", "8"});
  if (!extra_args.empty()) {
    job probe;  // refuse bad job flags before the first run
    jobs::make_job("fashion_mnist", extra_args, probe);
    fmt::print("job flags: {}\n", fmt::join(extra_args, " "));
  }
  std::vector<double> e_sps, p_sps, b_sps, e_acc, p_acc, b_acc, t_sps, t_acc;
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
    if (!script.empty()) {
      auto t = pytorch(script, epochs, seed);
      fmt::print("{:>5}  {:<10} {:>12.0f} {:>9.4f} {:>10.2f}\n", r, "PyTorch", t.samples_per_second, t.accuracy,
                 t.staleness);
      t_sps.push_back(t.samples_per_second);
      t_acc.push_back(t.accuracy);
    }
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
  fmt::print("processes/embedded = {:.2f}\n", e > 0 ? p / e : 0.0);
  if (t_sps.empty()) {
    fmt::print("goal: >= 3x the PyTorch baseline (not run); >= 100000 samples/s on the issue's reference machine ({})\n",
               p >= 100000 ? "met" : "not met");
  } else {
    double t = median(t_sps), ratio = t > 0 ? p / t : 0.0;
    bool accurate = median(p_acc) >= median(t_acc) - 0.01;
    fmt::print("PyTorch RPC parameter server {:.0f} samples/s (accuracy {:.4f}); processes/PyTorch = {:.2f}\n", t,
               median(t_acc), ratio);
    fmt::print("goal: processes >= 3x PyTorch at its accuracy ({}: {:.2f}x, accuracy {:.4f} against {:.4f})\n",
               ratio >= 3 && accurate ? "met" : "not met", ratio, median(p_acc), median(t_acc));
  }
  return 0;
}

}  // namespace actortrain::tools
