// actortrain bench fashion-mnist: the MLP 784-256-128-10 on Fashion-MNIST, batch 128,
// Adam 1e-3, as
//   bare  — a hand-written single-threaded Eigen loop (the framework's own baseline),
//   local — the framework's single-process trainer ("a": model graph, dataset pipeline),
//   b     — the embedded cluster with 1 worker and 1 ps shard,
//   c     — the embedded cluster with 2 workers and 2 ps shards (asynchronous),
//   hogwild, rpc — PyTorch with 2 processes: Hogwild on shared memory, and its RPC
//           framework as a parameter server (tools/bench/*.py),
// interleaved round by round (seed = round), so slow phases of a shared machine hit
// every variant alike. Every variant is evaluated on the test set after each epoch with
// the clock stopped, giving time to 0.85 and 0.88 test accuracy. Prints per-round
// figures, per-variant medians, the ratios and the goals.

#include "bare_mlp.hpp"
#include "bench.hpp"
#include "flags.hpp"
#include <actortrain/actors/jobs/jobs.hpp>

#include <actortrain/actors/all.hpp>
#include <actortrain/dataset/all.hpp>
#include <actortrain/model/all.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <unistd.h>
#include <map>
#include <optional>
#include <sstream>

#include <fmt/format.h>

namespace actortrain::tools {

namespace ds = actortrain::dataset;
namespace md = actortrain::model;

namespace {

// The local trainer's clock: training seconds from each epoch's begin to its
// validation's begin, and the validation accuracy then.
class epoch_clock : public md::callback {
 public:
  explicit epoch_clock(std::vector<std::pair<double, double>>& out) : out_(out) {}
  void on_epoch_begin(md::training&, int64_t) override { begin_ = std::chrono::steady_clock::now(); }
  void on_test_begin(md::training&) override {
    trained_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - begin_).count();
  }
  void on_epoch_end(md::training&, int64_t, const md::logs& l) override {
    out_.emplace_back(trained_, l.at("val_accuracy"));
  }

 private:
  std::vector<std::pair<double, double>>& out_;
  std::chrono::steady_clock::time_point begin_;
  double trained_ = 0;
};

// The registered fashion_mnist job on the images loaded once.
job the_job(const ds::fashion_mnist_arrays& train, const ds::fashion_mnist_arrays& test, int epochs, int64_t batch,
            double lr, uint64_t seed, const std::optional<staleness_compensation>& compensation = {},
            bool use_ema = true) {
  jobs::fashion_mnist_options o;
  if (compensation) o.compensation = *compensation;
  o.use_ema = use_ema;
  o.epochs = epochs;
  o.batch = batch;
  o.learning_rate = lr;
  o.seed = seed;
  // Not owned: the arrays, loaded once, outlive every run's job.
  o.train_arrays = std::shared_ptr<const ds::fashion_mnist_arrays>(&train, [](const ds::fashion_mnist_arrays*) {});
  o.test_arrays = std::shared_ptr<const ds::fashion_mnist_arrays>(&test, [](const ds::fashion_mnist_arrays*) {});
  auto j = jobs::fashion_mnist(o);
  j.fit.verbose = 0;
  return j;
}

run_figures run_local(const ds::fashion_mnist_arrays& train, const ds::fashion_mnist_arrays& test, int epochs,
                  int64_t batch, double lr, uint64_t seed) {
  // The baseline as issue 21 froze it: the weights, not their average.
  auto j = the_job(train, test, epochs, batch, lr, seed, {}, /*use_ema=*/false);
  md::trainer t{j.structure, j.optimizer->clone(), j.loss, seed};
  for (auto& m : j.metrics()) t.add_metric(std::move(m));
  auto data = j.train(ds::input_context{}).prefetch(4);
  run_figures out;
  j.fit.callbacks.push_back(std::make_shared<epoch_clock>(out.accuracy_at));
  t.fit(data, j.fit);
  out.samples_per_second = static_cast<double>(train.images.rows()) * epochs / out.accuracy_at.back().first;
  out.accuracy = out.accuracy_at.back().second;
  return out;
}

run_figures run_cluster(const ds::fashion_mnist_arrays& train, const ds::fashion_mnist_arrays& test, int epochs,
                    int64_t batch, double lr, uint64_t seed, int ps, int workers, bool overlap, bool ahead,
                    bool separate, const std::optional<staleness_compensation>& compensation) {
  auto j = the_job(train, test, epochs, batch, lr, seed, compensation);
  j.spec.num_ps = ps;
  j.spec.num_workers = workers;
  j.spec.overlap_push = overlap;
  j.spec.pull_ahead = ahead;
  j.spec.pull_with_push = !separate;
  // Training seconds per epoch (each from its first to its last applied step) and the
  // validation accuracy after it, from the coordinator's own event times.
  auto metrics = fmt::format("/tmp/actortrain-bench-fashion-mnist-{}.jsonl", ::getpid());
  std::remove(metrics.c_str());
  j.spec.metrics_file = metrics;
  caf::actor_system_config cfg;
  configure(cfg);
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system sys{cfg};
  cluster c{sys, j};
  c.fit(j.train, j.fit);
  auto out = read_figures(metrics);
  std::remove(metrics.c_str());
  if (out.accuracy_at.size() != static_cast<size_t>(epochs) || out.samples_per_second <= 0)
    throw std::runtime_error(fmt::format("bench fashion-mnist: the metrics file recorded {} of {} epochs",
                                         out.accuracy_at.size(), epochs));
  return out;
}

// b or c, optionally with one suffix: w (wait for push acks), p (pull ahead) or s (pulls
// of their own, not riding on the pushes).
struct cluster_kind {
  int size = 1;  // ps shards = workers
  bool wait = false;
  bool ahead = false;
  bool separate = false;
};

std::optional<cluster_kind> cluster_variant(const std::string& v) {
  if (v.empty() || v.size() > 2 || (v[0] != 'b' && v[0] != 'c')) return std::nullopt;
  cluster_kind k;
  k.size = v[0] == 'b' ? 1 : 2;
  if (v.size() == 2) {
    if (v[1] == 'w')
      k.wait = true;
    else if (v[1] == 'p')
      k.ahead = true;
    else if (v[1] == 's')
      k.separate = true;
    else
      return std::nullopt;
  }
  return k;
}

const std::map<std::string, std::string> torch_variants{{"hogwild", "pytorch_hogwild.py"},
                                                          {"rpc", "pytorch_rpc_ps.py"}};

}  // namespace

int bench_fashion_mnist(int argc, char** argv, int first) {
  int epochs = 10, rounds = 5;
  int64_t batch = 128;
  double lr = 1e-3;
  std::string variants = "bare,local,b,c,bp,hogwild,rpc";
  std::string data_dir = ds::fashion_mnist_default_dir;
  std::string compensation_text;
  flags f{"actortrain bench fashion-mnist",
          "Trains the MLP 784-256-128-10 (Adam, batch 128) on Fashion-MNIST as each variant,\n"
          "interleaved for --rounds rounds (round r uses seed r), and prints per round the\n"
          "training samples/s, the test accuracy, and the training time to 0.85 and to 0.88 test\n"
          "accuracy (every variant is evaluated after each epoch with its clock stopped; a run\n"
          "that never gets there is 'never' and ranks last in the median); then the medians,\n"
          "each variant's ratio to 'bare', and the goals of the 2-worker variant c.\n"
          "Variants: bare (hand-written Eigen loop), local (the framework's single-process\n"
          "trainer, 'a' in the ratios), b (embedded cluster: 1 worker, 1 ps shard), c (2 workers,\n"
          "2 ps shards, asynchronous), hogwild and rpc (PyTorch with 2 processes of one thread:\n"
          "Hogwild on shared memory, tools/bench/pytorch_hogwild.py, and its RPC framework as a\n"
          "parameter server, tools/bench/pytorch_rpc_ps.py; they need apt-get install python3-torch\n"
          "libopenblas0-pthread, and are left out of the default variants, with a note, without it).\n"
          "Suffixes change b and c: 'w' workers wait for the push acknowledgements before the\n"
          "next step (cluster_spec::overlap_push = false), 'p' workers pull the next step's\n"
          "parameters while a step computes (cluster_spec::pull_ahead), 's' workers pull with\n"
          "requests of their own instead of on the pushes (cluster_spec::pull_with_push = false,\n"
          "the protocol before it). The cluster variants run\n"
          "the main job (jobs::fashion_mnist) with its defaults, staleness compensation included\n"
          "(--compensation changes it for all of them).\n"
          "Every ActorTrain variant runs with Eigen's GEMM blocking tuned for this CPU\n"
          "(model::tune_gemm_blocking, process-wide), the bare loop included."};
  f.add("epochs", epochs, "epochs per training run")
    .add("rounds", rounds, "rounds (each runs every variant once)")
    .add("batch", batch, "batch size")
    .add("lr", lr, "Adam learning rate")
    .add("variants", variants, "comma-separated variants to run")
    .add("data-dir", data_dir, "directory with the Fashion-MNIST .gz files")
    .add("compensation", compensation_text,
         "the cluster variants' staleness compensation: none, lookahead, lookahead(k), staleness_lr or "
         "dc_asgd(lambda) (default: the main job's, lookahead(6))");
  if (!f.parse(argc, argv, first)) return 0;
  std::optional<staleness_compensation> compensation;
  if (f.given("compensation")) {
    try {
      compensation = staleness_compensation::parse(compensation_text);
    } catch (const std::invalid_argument& e) {
      throw usage_error(fmt::format("--compensation: {}", e.what()));
    }
  }
  if (epochs < 1 || rounds < 1 || batch < 1) throw usage_error("--epochs, --rounds and --batch must be >= 1");
  if (!(lr > 0)) throw usage_error(fmt::format("--lr must be > 0, not {}", lr));
  bool chosen = f.given("variants");
  std::vector<std::string> names;
  std::map<std::string, std::string> scripts;  // a PyTorch variant's script
  {
    std::stringstream ss{variants};
    std::string v;
    while (std::getline(ss, v, ',')) {
      if (v != "bare" && v != "local" && !cluster_variant(v) && !torch_variants.count(v))
        throw usage_error(
          fmt::format("--variants: unknown variant '{}' (bare, local, b, c, bw, cw, bp, cp, hogwild, rpc)", v));
      if (torch_variants.count(v)) {
        try {
          scripts[v] = torch_script(torch_variants.at(v));
        } catch (const std::runtime_error& e) {
          if (chosen) throw std::runtime_error(fmt::format("bench fashion-mnist: variant {}: {}", v, e.what()));
          fmt::print("no PyTorch variant {}: {}\n", v, e.what());
          continue;
        }
      }
      names.push_back(v);
    }
    if (names.empty()) throw usage_error("--variants: none given");
  }
  md::tune_gemm_blocking();  // process-wide: the same for every variant
  auto train = ds::load_fashion_mnist(ds::split::train, data_dir);
  auto test = ds::load_fashion_mnist(ds::split::test, data_dir);
  fmt::print("bench fashion-mnist: MLP 784-256-128-10, Adam({}), batch {}, {} epochs, {} rounds\n", lr, batch,
             epochs, rounds);
  std::map<std::string, std::vector<double>> sps, acc, to85, to88;
  for (int r = 1; r <= rounds; ++r) {
    for (auto& v : names) {
      run_figures fig;
      auto seed = static_cast<uint64_t>(r);
      if (v == "bare") {
        auto b = train_bare_mlp(train.images, train.labels, test.images, test.labels, epochs, batch,
                                static_cast<float>(lr), seed);
        fig = {b.samples_per_second, b.test_accuracy, b.accuracy_at, 0};
      } else if (v == "local") {
        fig = run_local(train, test, epochs, batch, lr, seed);
      } else if (scripts.count(v)) {
        fig = run_torch(scripts[v], epochs, seed,
                        {"--batch", std::to_string(batch), "--lr", fmt::format("{}", lr), "--data-dir", data_dir});
      } else {
        auto cv = *cluster_variant(v);
        fig = run_cluster(train, test, epochs, batch, lr, seed, cv.size, cv.size, !cv.wait, cv.ahead, cv.separate,
                          compensation);
      }
      sps[v].push_back(fig.samples_per_second);
      acc[v].push_back(fig.accuracy);
      to85[v].push_back(time_to(fig.accuracy_at, 0.85));
      to88[v].push_back(time_to(fig.accuracy_at, 0.88));
      fmt::print("round {} {:<8} {:>9.0f} samples/s  test accuracy {:.4f}  to 0.85 {:>6}  to 0.88 {:>6}\n", r, v,
                 fig.samples_per_second, fig.accuracy, seconds_text(to85[v].back()),
                 seconds_text(to88[v].back()));
      std::fflush(stdout);
    }
  }
  fmt::print("\nmedian over {} rounds (times: training seconds; 'never' ranks last):\n", rounds);
  fmt::print("  {:<8} {:>9} {:>9} {:>8} {:>8} {:>8}\n", "variant", "samples/s", "accuracy", "(min)", "to 0.85",
             "to 0.88");
  for (auto& v : names)
    fmt::print("  {:<8} {:>9.0f} {:>9.4f} {:>8.4f} {:>8} {:>8}\n", v, median(sps[v]), median(acc[v]),
               *std::min_element(acc[v].begin(), acc[v].end()), seconds_text(median_time(to85[v])),
               seconds_text(median_time(to88[v])));
  // a = the framework's single-process loop (local); the bare loop is the baseline of
  // the framework itself.
  auto ratio = [&](const std::string& num, const std::string& den, const std::string& label) {
    if (sps.count(num) && sps.count(den)) fmt::print("  {} = {:.3f}\n", label, median(sps[num]) / median(sps[den]));
  };
  ratio("local", "bare", "local/bare");
  ratio("b", "local", "b/a");
  ratio("c", "local", "c/a");
  ratio("bp", "local", "bp/a");
  ratio("cp", "local", "cp/a");
  ratio("c", "cs", "c/cs");
  ratio("b", "bare", "b/bare");
  ratio("c", "bare", "c/bare");
  ratio("c", "hogwild", "c/hogwild");
  ratio("c", "rpc", "c/rpc");
  // The goals for the 2-worker variant: no accuracy tax against the one-process
  // trainer, >= 1.8x the bare loop, and the shortest time to 0.88 of c, local and Hogwild.
  if (sps.count("c") && sps.count("local") && sps.count("bare")) {
    double c88 = median_time(to88["c"]);
    auto faster = [&](const std::string& other) {
      if (!sps.count(other)) return fmt::format("{} not run", other);
      double o = median_time(to88[other]);
      bool met = !std::isnan(c88) && (std::isnan(o) || c88 < o);
      return fmt::format("{} than {} ({})", met ? "shorter" : "not shorter", other, seconds_text(o));
    };
    fmt::print("goals of c: accuracy {:.4f} against local's {:.4f} ({}); {:.2f}x bare ({}); time to 0.88 {}: {}, {}\n",
               median(acc["c"]), median(acc["local"]), median(acc["c"]) >= median(acc["local"]) ? "met" : "not met",
               median(sps["c"]) / median(sps["bare"]), median(sps["c"]) >= 1.8 * median(sps["bare"]) ? "met" : "not met",
               seconds_text(c88), faster("local"), faster("hogwild"));
  }
  return 0;
}

}  // namespace actortrain::tools
