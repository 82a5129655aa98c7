// actortrain bench fashion-mnist: the MLP 784-256-128-10 on Fashion-MNIST, batch 128,
// Adam 1e-3, as
//   bare  — a hand-written single-threaded Eigen loop (the framework's own baseline),
//   local — the framework's single-process trainer ("a": model graph, dataset pipeline),
//   b     — the embedded cluster with 1 worker and 1 ps shard,
//   c     — the embedded cluster with 2 workers and 2 ps shards (asynchronous),
// interleaved round by round (seed = round), so slow phases of a shared machine hit
// every variant alike. Prints per-round figures, per-variant medians and the ratios.

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
#include <map>
#include <optional>
#include <sstream>

#include <fmt/format.h>

namespace actortrain::tools {

namespace ds = actortrain::dataset;
namespace md = actortrain::model;

namespace {

struct figures {
  double samples_per_second = 0;
  double test_accuracy = 0;
};

// The registered fashion_mnist job on the images loaded once.
job the_job(const ds::fashion_mnist_arrays& train, const ds::fashion_mnist_arrays& test, int epochs, int64_t batch,
            double lr, uint64_t seed) {
  jobs::fashion_mnist_options o;
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

figures run_local(const ds::fashion_mnist_arrays& train, const ds::fashion_mnist_arrays& test, int epochs,
                  int64_t batch, double lr, uint64_t seed) {
  auto j = the_job(train, test, epochs, batch, lr, seed);
  md::trainer t{j.structure, j.optimizer->clone(), j.loss, seed};
  for (auto& m : j.metrics()) t.add_metric(std::move(m));
  auto data = j.train(ds::input_context{}).prefetch(4);
  auto start = std::chrono::steady_clock::now();
  t.fit(data, j.fit);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  auto r = t.evaluate(*j.fit.validation);
  return {static_cast<double>(train.images.rows()) * epochs / secs, r.at("accuracy")};
}

figures run_cluster(const ds::fashion_mnist_arrays& train, const ds::fashion_mnist_arrays& test, int epochs,
                    int64_t batch, double lr, uint64_t seed, int ps, int workers, bool overlap, bool ahead) {
  auto j = the_job(train, test, epochs, batch, lr, seed);
  j.spec.num_ps = ps;
  j.spec.num_workers = workers;
  j.spec.overlap_push = overlap;
  j.spec.pull_ahead = ahead;
  caf::actor_system_config cfg;
  configure(cfg);
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system sys{cfg};
  cluster c{sys, j};
  auto validation = *ds::as_dataset(*j.fit.validation);
  j.fit.validation.reset();  // evaluated once, after the timed part
  auto start = std::chrono::steady_clock::now();
  c.fit(j.train, j.fit);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  auto r = c.evaluate(validation);
  return {static_cast<double>(train.images.rows()) * epochs / secs, r.at("accuracy")};
}

// b or c, optionally with one suffix: w (wait for push acks) or p (pull ahead).
struct cluster_kind {
  int size = 1;  // ps shards = workers
  bool wait = false;
  bool ahead = false;
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
    else
      return std::nullopt;
  }
  return k;
}

}  // namespace

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n == 0 ? 0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

int bench_fashion_mnist(int argc, char** argv, int first) {
  int epochs = 10, rounds = 3;
  int64_t batch = 128;
  double lr = 1e-3;
  std::string variants = "bare,local,b,c,bp";
  std::string data_dir = ds::fashion_mnist_default_dir;
  flags f{"actortrain bench fashion-mnist",
          "Trains the MLP 784-256-128-10 (Adam, batch 128) on Fashion-MNIST as each variant,\n"
          "interleaved for --rounds rounds (round r uses seed r), and prints samples/s and test\n"
          "accuracy per round, the median per variant, and each variant's ratio to 'bare'.\n"
          "Variants: bare (hand-written Eigen loop), local (the framework's single-process\n"
          "trainer, 'a' in the ratios), b (embedded cluster: 1 worker, 1 ps shard), c (2 workers,\n"
          "2 ps shards, asynchronous). Suffixes change b and c: 'w' workers wait for the push\n"
          "acknowledgements before the next step (cluster_spec::overlap_push = false), 'p' workers\n"
          "pull the next step's parameters while a step computes (cluster_spec::pull_ahead).\n"
          "Every variant runs with Eigen's GEMM blocking tuned for this CPU\n"
          "(model::tune_gemm_blocking, process-wide), the bare loop included."};
  f.add("epochs", epochs, "epochs per training run")
    .add("rounds", rounds, "rounds (each runs every variant once)")
    .add("batch", batch, "batch size")
    .add("lr", lr, "Adam learning rate")
    .add("variants", variants, "comma-separated variants to run")
    .add("data-dir", data_dir, "directory with the Fashion-MNIST .gz files");
  if (!f.parse(argc, argv, first)) return 0;
  if (epochs < 1 || rounds < 1 || batch < 1) throw usage_error("--epochs, --rounds and --batch must be >= 1");
  std::vector<std::string> names;
  {
    std::stringstream ss{variants};
    std::string v;
    while (std::getline(ss, v, ',')) {
      if (v != "bare" && v != "local" && !cluster_variant(v))
        throw usage_error(fmt::format("--variants: unknown variant '{}' (bare, local, b, c, bw, cw, bp, cp)", v));
      names.push_back(v);
    }
    if (names.empty()) throw usage_error("--variants: none given");
  }
  md::tune_gemm_blocking();  // process-wide: the same for every variant
  auto train = ds::load_fashion_mnist(ds::split::train, data_dir);
  auto test = ds::load_fashion_mnist(ds::split::test, data_dir);
  fmt::print("bench fashion-mnist: MLP 784-256-128-10, Adam({}), batch {}, {} epochs, {} rounds\n", lr, batch,
             epochs, rounds);
  std::map<std::string, std::vector<double>> sps, acc;
  for (int r = 1; r <= rounds; ++r) {
    for (auto& v : names) {
      figures fig;
      if (v == "bare") {
        auto b = train_bare_mlp(train.images, train.labels, test.images, test.labels, epochs, batch,
                                static_cast<float>(lr), static_cast<uint64_t>(r));
        fig = {b.samples_per_second, b.test_accuracy};
      } else if (v == "local") {
        fig = run_local(train, test, epochs, batch, lr, static_cast<uint64_t>(r));
      } else {
        auto cv = *cluster_variant(v);
        fig = run_cluster(train, test, epochs, batch, lr, static_cast<uint64_t>(r), cv.size, cv.size, !cv.wait,
                          cv.ahead);
      }
      sps[v].push_back(fig.samples_per_second);
      acc[v].push_back(fig.test_accuracy);
      fmt::print("round {} {:<6} {:>9.0f} samples/s  test accuracy {:.4f}\n", r, v, fig.samples_per_second,
                 fig.test_accuracy);
      std::fflush(stdout);
    }
  }
  fmt::print("\nmedian over {} rounds:\n", rounds);
  for (auto& v : names)
    fmt::print("  {:<6} {:>9.0f} samples/s  test accuracy {:.4f} (min {:.4f})\n", v, median(sps[v]),
               median(acc[v]), *std::min_element(acc[v].begin(), acc[v].end()));
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
  ratio("b", "bare", "b/bare");
  ratio("c", "bare", "c/bare");
  return 0;
}

}  // namespace actortrain::tools
