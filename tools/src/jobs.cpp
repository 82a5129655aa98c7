#include "jobs.hpp"

#include "flags.hpp"

#include <actortrain/dataset/all.hpp>
#include <actortrain/model/all.hpp>

#include <random>

#include <fmt/format.h>

namespace actortrain::tools {

namespace ds = actortrain::dataset;
namespace md = actortrain::model;

namespace {

// Parses an example's flags from `args` (argv without the program name).
bool parse_args(flags& f, const std::string& program, const std::vector<std::string>& args) {
  if (!f.parse(args)) return false;
  if (!f.positional().empty()) throw usage_error(fmt::format("{}: unexpected argument '{}'", program, f.positional()[0]));
  return true;
}

// The flags every job takes: progress, metrics, Downpour's options (async only; the
// cluster refuses them otherwise) and the callbacks (callbacks.hpp), which run on the
// coordinator's task.
struct common_flags {
  int verbose = 0, spe = 1, pull_every = 1, push_every = 1;
  double local_lr = 0;
  std::string metrics;
  int64_t early_stopping = 0;
  std::string monitor = "val_loss", mode = "auto", csv_log;

  explicit common_flags(int default_verbose) : verbose(default_verbose) {}

  void add_to(flags& f) {
    f.add("verbose", verbose, "progress on the coordinator's task: 0 none, 1 bar, 2 a line per epoch")
      .add("metrics", metrics, "JSON-lines metrics file, written by the coordinator's task")
      .add("steps-per-execution", spe, "steps per task sent to a worker")
      .add("pull-every", pull_every, "workers pull the parameters every N training steps and reuse them in between "
           "(Downpour's n_fetch; async only; staleness reported)")
      .add("local-lr", local_lr, "with --pull-every: move the reused copy by -X x each step's gradient between pulls "
           "(Downpour's local update, plain SGD; 0: off)")
      .add("push-every", push_every, "workers push the mean gradient of N steps once (Downpour's n_push; async only; "
           "--steps-per-execution defaults to N)")
      .add("early-stopping", early_stopping,
           "stop when --monitor has not improved for N epochs, and end with the best epoch's variables (0: off)")
      .add("monitor", monitor, "what --early-stopping watches: a key of the epoch's logs (loss, val_loss, ...)")
      .add("monitor-mode", mode, "min, max, or auto (max for names with 'acc')")
      .add("csv-log", csv_log, "append one CSV row per epoch to this file (on the coordinator's task)");
  }

  void apply(const char* job_name, job& j) const {
    if (pull_every < 1) throw usage_error(fmt::format("{}: --pull-every must be >= 1", job_name));
    if (push_every < 1) throw usage_error(fmt::format("{}: --push-every must be >= 1", job_name));
    if (spe < 1) throw usage_error(fmt::format("{}: --steps-per-execution must be >= 1", job_name));
    if (!(local_lr >= 0) || (local_lr > 0 && pull_every == 1))
      throw usage_error(fmt::format("{}: --local-lr must be >= 0, and needs --pull-every > 1", job_name));
    if (early_stopping < 0) throw usage_error(fmt::format("{}: --early-stopping must be >= 0", job_name));
    if (mode != "min" && mode != "max" && mode != "auto")
      throw usage_error(fmt::format("{}: --monitor-mode must be min, max or auto, not '{}'", job_name, mode));
    j.fit.verbose = verbose;
    j.spec.metrics_file = metrics;
    j.spec.pull_every = pull_every;
    j.spec.local_learning_rate = local_lr;
    j.spec.push_every = push_every;
    j.spec.steps_per_execution = push_every > 1 && spe == 1 ? push_every : spe;
    if (early_stopping > 0)
      j.callbacks.push_back(std::make_shared<actortrain::early_stopping>(
        actortrain::early_stopping_options{monitor, early_stopping, 0, mode, true}));
    if (!csv_log.empty()) j.callbacks.push_back(csv_logger(csv_log));
  }
};

// y = x . w + b + noise for a planted w and b: small enough for tests with real
// processes, and the loss it reaches is known (the noise variance).
bool linear(const std::vector<std::string>& args, job& j) {
  int epochs = 3;
  int64_t examples = 2000, batch = 20, features = 5;
  double lr = 0.05, noise = 0.1;
  uint64_t seed = 1;
  flags f{"linear", "A planted linear regression y = x.w + b + noise (w, b drawn from --seed), Dense(1), SGD."};
  f.add("epochs", epochs, "passes over the data")
    .add("examples", examples, "training examples")
    .add("features", features, "input width")
    .add("batch", batch, "batch size per step")
    .add("lr", lr, "SGD learning rate")
    .add("noise", noise, "standard deviation of the label noise")
    .add("seed", seed, "seed of the data and of initialization");
  common_flags common{0};
  common.add_to(f);
  if (!parse_args(f, "linear", args)) return false;
  common.apply("linear", j);
  if (epochs < 1 || examples < 1 || batch < 1 || features < 1 || features > 4096)
    throw usage_error("linear: --epochs, --examples, --batch must be >= 1, --features in 1..4096");
  if (!(lr > 0) || !(noise >= 0)) throw usage_error("linear: --lr must be > 0 and --noise >= 0");
  std::mt19937_64 gen{seed};
  std::normal_distribution<float> normal{0.0f, 1.0f};
  md::matrix w(features, 1);
  for (int64_t i = 0; i < features; ++i) w(i, 0) = normal(gen);
  float b = normal(gen);
  md::matrix x(examples, features), y(examples, 1);
  for (int64_t r = 0; r < examples; ++r) {
    for (int64_t c = 0; c < features; ++c) x(r, c) = normal(gen);
    y(r, 0) = (x.row(r) * w)(0, 0) + b + static_cast<float>(noise) * normal(gen);
  }
  auto data = ds::from_tensor_slices({x}, y);
  // A held-out set from the same planted model (val_loss ends near noise^2).
  const int64_t held = 500;
  md::matrix vx(held, features), vy(held, 1);
  for (int64_t r = 0; r < held; ++r) {
    for (int64_t c = 0; c < features; ++c) vx(r, c) = normal(gen);
    vy(r, 0) = (vx.row(r) * w)(0, 0) + b + static_cast<float>(noise) * normal(gen);
  }
  j.fit.validation = ds::from_tensor_slices({vx}, vy).batch(100);
  j.name = fmt::format("linear(features={}, examples={}, seed={})", features, examples, seed);
  j.structure = md::model::sequential(features, {md::layers::dense(1)});
  j.optimizer = md::make_sgd({lr});
  j.loss = md::mean_squared_error();
  j.train = [data, batch, seed](const ds::input_context& ctx) {
    return data.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
      .shuffle(1000, seed + static_cast<uint64_t>(ctx.input_pipeline_id))
      .batch(batch);
  };
  j.fit.epochs = epochs;
  j.spec.seed = seed;
  return true;
}

// The main job's MLP 784-256-128-10 on Fashion-MNIST, Adam, validated on the test set.
bool fashion_mnist(const std::vector<std::string>& args, job& j) {
  int epochs = 10;
  bool pull_ahead = false;
  int64_t batch = 128, limit = 0;
  double lr = 1e-3;
  uint64_t seed = 1;
  std::string data_dir = ds::fashion_mnist_default_dir;
  flags f{"fashion_mnist", "The main job's MLP 784-256-128-10 on Fashion-MNIST (Adam), validated on the test set."};
  f.add("epochs", epochs, "passes over the 60,000 training images")
    .add("batch", batch, "batch size per step")
    .add("lr", lr, "Adam learning rate")
    .add("seed", seed, "seed of initialization and shuffling")
    .add("data-dir", data_dir, "directory with the four Fashion-MNIST .gz files")
    .add("pull-ahead", pull_ahead, "workers fetch the next step's parameters while a step computes (staleness +1)")
    .add("limit", limit, "train on the first N images and validate on the first N/4 test images (0: all)");
  common_flags common{2};
  common.add_to(f);
  if (!parse_args(f, "fashion_mnist", args)) return false;
  common.apply("fashion_mnist", j);
  if (epochs < 1 || batch < 1) throw usage_error("fashion_mnist: --epochs and --batch must be >= 1");
  if (limit < 0) throw usage_error("fashion_mnist: --limit must be >= 0 (0: all the images)");
  if (!(lr > 0)) throw usage_error("fashion_mnist: --lr must be > 0");
  using md::layers::activation;
  j.name = "fashion_mnist";
  j.structure = md::model::sequential(784, {md::layers::dense(256, activation::relu),
                                            md::layers::dense(128, activation::relu), md::layers::dense(10)});
  j.optimizer = md::make_adam({lr});
  j.loss = md::softmax_cross_entropy();
  j.metrics = [] {
    std::vector<md::metric_ptr> m;
    m.push_back(md::accuracy());
    return m;
  };
  // Loaded lazily: only the coordinator's task reads the data.
  j.train = [data_dir, seed, batch, limit](const ds::input_context& ctx) {
    static const auto train = ds::fashion_mnist(ds::split::train, data_dir);
    auto data = limit > 0 ? train.take(limit) : train;
    return data.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
      .shuffle(limit > 0 ? limit : 60000, seed + static_cast<uint64_t>(ctx.input_pipeline_id))
      .batch(batch);
  };
  j.fit.epochs = epochs;
  auto test = ds::fashion_mnist(ds::split::test, data_dir);
  j.fit.validation = (limit > 0 ? test.take(std::max<int64_t>(1, limit / 4)) : test).batch(1000);
  if (limit > 0) j.name = fmt::format("fashion_mnist(limit={})", limit);
  j.spec.seed = seed;
  j.spec.pull_ahead = pull_ahead;
  return true;
}

}  // namespace

const std::vector<example_entry>& examples() {
  static const std::vector<example_entry> all{
    {"linear", "a planted linear regression (tiny: for trying clusters out)"},
    {"fashion_mnist", "the main job's MLP on Fashion-MNIST"},
  };
  return all;
}

std::string example_names() {
  std::string known;
  for (auto& e : examples()) known += (known.empty() ? "" : ", ") + e.name;
  return known;
}

bool make_example(const std::string& name, const std::vector<std::string>& args, job& out) {
  if (name == "linear") return linear(args, out);
  if (name == "fashion_mnist" || name == "fashion-mnist") return fashion_mnist(args, out);
  throw usage_error(name.empty() ? fmt::format("which example? --example NAME ({})", example_names())
                                 : fmt::format("unknown example '{}' ({})", name, example_names()));
}

}  // namespace actortrain::tools
