// actortrain bench consistency: the Fashion-MNIST MLP (784-256-128-10, Adam 1e-3) on an
// embedded cluster of 2 workers and 2 ps shards in each consistency mode, interleaved
// round by round (seed = round). Every step is a batch of --batch examples in every mode
// (a sync round of R workers is a global batch of R x --batch). The test accuracy is
// measured --evals-per-epoch times per pass over the data; times count training only
// (the evaluations, the same work in every mode, are subtracted). Prints per mode:
// samples/s, the training time to 0.85 and to 0.88 test accuracy, the final accuracy and
// the version staleness (mean, max), then the medians and ratios against async.

#include "bench.hpp"
#include "flags.hpp"
#include <actortrain/actors/jobs/jobs.hpp>

#include <actortrain/actors/all.hpp>
#include <actortrain/dataset/all.hpp>
#include <actortrain/model/all.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <array>
#include <cmath>
#include <unistd.h>
#include <cstdio>
#include <map>
#include <sstream>

#include <fmt/format.h>

namespace actortrain::tools {

namespace ds = actortrain::dataset;
namespace md = actortrain::model;

namespace {

struct mode_figures {
  double samples_per_second = 0;
  double to_85 = NAN, to_88 = NAN;  // training seconds; NaN: not reached
  double final_accuracy = 0;
  double mean_staleness = 0;
  uint64_t max_staleness = 0;
};

mode_figures run_mode(const ds::fashion_mnist_arrays& train, const ds::fashion_mnist_arrays& test,
                      const consistency_mode& mode, int workers, int epochs, int evals, int64_t batch,
                      uint64_t seed) {
  caf::actor_system_config cfg;
  configure(cfg);
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system sys{cfg};
  auto metrics = fmt::format("/tmp/actortrain-bench-consistency-{}.jsonl", ::getpid());
  std::remove(metrics.c_str());
  // The registered fashion_mnist job on the images loaded once, its pipelines repeated
  // and evaluated `evals` times per pass.
  jobs::fashion_mnist_options o;
  o.batch = batch;
  o.seed = seed;
  o.steps_per_execution = 1;  // every mode alike, as 'sync' rounds are: tasks of one step
  // Not owned: the arrays, loaded once, outlive every run's job.
  o.train_arrays = std::shared_ptr<const ds::fashion_mnist_arrays>(&train, [](const ds::fashion_mnist_arrays*) {});
  o.test_arrays = std::shared_ptr<const ds::fashion_mnist_arrays>(&test, [](const ds::fashion_mnist_arrays*) {});
  auto j = jobs::fashion_mnist(o);
  j.spec.num_ps = 2;
  j.spec.num_workers = workers;
  j.spec.consistency = mode;
  j.spec.metrics_file = metrics;
  cluster c{sys, j};
  auto fn = [once = j.train](const ds::input_context& ctx) { return once(ctx).repeat(); };
  md::fit_options opts;
  auto pass = (train.images.rows() + batch - 1) / batch;  // steps per pass over the data
  opts.steps_per_epoch = std::max<int64_t>(1, pass / evals);
  opts.epochs = epochs * evals;
  opts.verbose = 0;
  opts.validation = ds::from_tensor_slices({test.images}, test.labels).batch(2000);
  auto r = c.join(c.schedule(fn, opts));
  auto points = read_training(metrics).accuracy_at;
  std::remove(metrics.c_str());
  mode_figures out;
  out.mean_staleness = r.mean_staleness;
  out.max_staleness = r.max_staleness;
  if (points.empty()) return out;
  out.samples_per_second = static_cast<double>(r.steps * batch) / points.back().first;
  out.final_accuracy = points.back().second;
  out.to_85 = time_to(points, 0.85);
  out.to_88 = time_to(points, 0.88);
  return out;
}

}  // namespace

int bench_consistency(int argc, char** argv, int first) {
  int epochs = 6, rounds = 2, evals = 4, workers = 2;
  int64_t batch = 128;
  std::string modes = "async,bounded_staleness(2),sync";
  std::string data_dir = ds::fashion_mnist_default_dir;
  flags f{"actortrain bench consistency",
          "Trains the Fashion-MNIST MLP (784-256-128-10, Adam 1e-3) on an embedded cluster of\n"
          "--workers workers and 2 ps shards in each consistency mode, interleaved for --rounds\n"
          "rounds (round r uses seed r). Each step is a batch of --batch examples in every mode\n"
          "(a sync round is R x --batch). Prints per round and mode samples/s, the training\n"
          "time to 0.85 and to 0.88 test accuracy (measured --evals-per-epoch times per pass;\n"
          "evaluation time is not counted), the final accuracy and the version staleness, then\n"
          "medians and each mode's ratios to the first mode."};
  f.add("modes", modes, "comma-separated consistency modes (the first is the ratios' baseline)")
    .add("epochs", epochs, "passes over the 60,000 training images")
    .add("rounds", rounds, "rounds (each runs every mode once)")
    .add("evals-per-epoch", evals, "test evaluations per pass")
    .add("workers", workers, "workers (= sync replicas)")
    .add("batch", batch, "examples per step")
    .add("data-dir", data_dir, "directory with the Fashion-MNIST .gz files");
  if (!f.parse(argc, argv, first)) return 0;
  if (epochs < 1 || rounds < 1 || evals < 1 || workers < 1 || batch < 1)
    throw usage_error("--epochs, --rounds, --evals-per-epoch, --workers and --batch must be >= 1");
  std::vector<std::string> names;
  {
    std::stringstream ss{modes};
    for (std::string m; std::getline(ss, m, ',');) {
      try {
        consistency_mode::parse(m);
      } catch (const std::invalid_argument& e) {
        throw usage_error(std::string("--modes: ") + e.what());
      }
      names.push_back(m);
    }
    if (names.empty()) throw usage_error("--modes: none given");
  }
  md::tune_gemm_blocking();
  auto train = ds::load_fashion_mnist(ds::split::train, data_dir);
  auto test = ds::load_fashion_mnist(ds::split::test, data_dir);
  fmt::print("bench consistency: MLP 784-256-128-10, Adam(0.001), {} workers, 2 ps shards, batch {} per step, {} epochs, "
             "{} rounds\n",
             workers, batch, epochs, rounds);
  std::map<std::string, std::vector<mode_figures>> all;
  for (int r = 1; r <= rounds; ++r)
    for (auto& m : names) {
      auto fig =
        run_mode(train, test, consistency_mode::parse(m), workers, epochs, evals, batch, static_cast<uint64_t>(r));
      all[m].push_back(fig);
      fmt::print("round {} {:<22} {:>7.0f} samples/s  to 0.85: {:>6}  to 0.88: {:>6}  final {:.4f}  staleness mean "
                 "{:.2f} max {}\n",
                 r, m, fig.samples_per_second, seconds_text(fig.to_85), seconds_text(fig.to_88), fig.final_accuracy,
                 fig.mean_staleness, fig.max_staleness);
      std::fflush(stdout);
    }
  fmt::print("\nmedian over {} rounds (a run that never gets there ranks last):\n", rounds);
  fmt::print("  {:<22} {:>9} {:>8} {:>8} {:>7} {:>14}\n", "mode", "samples/s", "to 0.85", "to 0.88", "final",
             "staleness");
  std::map<std::string, std::array<double, 3>> med;
  for (auto& m : names) {
    std::vector<double> sps, t85, t88, fin, mean;
    uint64_t most = 0;
    for (auto& x : all[m]) {
      sps.push_back(x.samples_per_second);
      t85.push_back(x.to_85);
      t88.push_back(x.to_88);
      fin.push_back(x.final_accuracy);
      mean.push_back(x.mean_staleness);
      most = std::max(most, x.max_staleness);
    }
    med[m] = {median(sps), median_time(t85), median_time(t88)};
    fmt::print("  {:<22} {:>9.0f} {:>8} {:>8} {:>7.4f} {:>8.2f} max {}\n", m, med[m][0], seconds_text(med[m][1]),
               seconds_text(med[m][2]), median(fin), median(mean), most);
  }
  auto& base = names.front();
  fmt::print("\nratios to {}:\n", base);
  for (size_t k = 1; k < names.size(); ++k) {
    auto& m = names[k];
    auto ratio = [](double a, double b) { return std::isnan(a) || std::isnan(b) ? std::string("-") : fmt::format("{:.2f}", a / b); };
    fmt::print("  {:<22} samples/s {:>5}  time to 0.85 {:>5}  time to 0.88 {:>5}\n", m, ratio(med[m][0], med[base][0]),
               ratio(med[m][1], med[base][1]), ratio(med[m][2], med[base][2]));
  }
  return 0;
}

}  // namespace actortrain::tools
