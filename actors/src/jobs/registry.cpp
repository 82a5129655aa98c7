// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// The registered jobs by name, built from command-line flags (jobs.hpp: make_job): each
// job's own flags, and those every job takes.
#include <actortrain/actors/jobs/jobs.hpp>

#include <actortrain/actors/cli/flags.hpp>
#include <actortrain/actors/cluster/callbacks.hpp>
#include <actortrain/model/optim/make_optimizer.hpp>
#include <actortrain/model/partitioner.hpp>

#include <fmt/format.h>

#include <functional>
#include <optional>

namespace actortrain::jobs {

namespace {

using cli::range;
using cli::usage_error;

// The flags every job takes: progress, metrics, how workers pull and push (Downpour's
// options, async only; the coordinator refuses them otherwise), and the callbacks run on
// the coordinator's task.
struct common_flags {
  int verbose = 0, pull_every = 1, push_every = 1;
  bool pull_ahead = false, pull_separately = false, loop = false;
  double local_lr = 0, clip_norm = 0;
  std::string metrics;
  int64_t early_stopping = 0;
  std::string monitor = "val_loss", mode = "auto", csv_log;
  std::shared_ptr<const model::partitioner> partitioner;
  std::optional<staleness_compensation> compensation;

  int spe;  // the job's unless --steps-per-execution is given
  const cli::flags* parsed = nullptr;  // add_to's: apply asks it what was given

  // `job_spe`: the job's steps_per_execution, the flag's default.
  common_flags(int default_verbose, int job_spe) : verbose(default_verbose), spe(job_spe) {}

  void add_to(cli::flags& f) {
    parsed = &f;
    f.add("verbose", verbose, "progress on the coordinator's task: 0 none, 1 bar, 2 a line per epoch",
          range<int>{0, 2})
      .add("metrics", metrics, "JSON-lines metrics file, written by the coordinator's task")
      .add("steps-per-execution", spe,
           "steps per task sent to a worker (unless given, with --push-every N: N when the default is not a "
           "multiple of N)",
           range<int>{1, 1 << 20})
      .add("pull-every", pull_every,
           "workers pull the parameters every N training steps and reuse them in between (Downpour's n_fetch; "
           "async only; staleness reported)",
           range<int>{1, 1 << 20})
      .add("local-lr", local_lr,
           "with --pull-every: move the reused copy by -X x each step's gradient between pulls (Downpour's local "
           "update, plain SGD; 0: off)",
           range<double>{0, 1e6})
      .add("push-every", push_every,
           "workers push the mean gradient of N steps once (Downpour's n_push; async only)", range<int>{1, 1 << 20})
      .add("pull-ahead", pull_ahead, "workers fetch the next step's parameters while a step computes (staleness +1)")
      .add("pull-separately", pull_separately,
           "workers pull with requests of their own instead of on their pushes' acknowledgements (the same reads, "
           "twice the messages)")
      .add("clip-norm", clip_norm,
           "a custom training step: the built-in one, then the gradients clipped to this global L2 norm, as "
           "tf.clip_by_global_norm (0: off)",
           range<double>{0, 1e12})
      .add("loop", loop,
           "train with a custom loop instead of fit (TensorFlow's distributed-input loop): each epoch runs the "
           "training step on the next batch of every replica until the data ends, and prints 'Epoch N, Loss: X'")
      .add_parsed("partitioner", "none",
                  "how variables are split into row partitions over the ps shards, as TensorFlow's "
                  "variable_partitioner: none, fixed_shards(N), min_size(BYTES,MAX_SHARDS), max_size(BYTES)",
                  [this](const std::string& v) { partitioner = model::make_partitioner(v); })
      .add_parsed("compensation", "the job's",
                  "what the ps shards do about stale gradients (async): none, lookahead, lookahead(K), staleness_lr, "
                  "dc_asgd(LAMBDA)",
                  [this](const std::string& v) { compensation = staleness_compensation::parse(v); })
      .add("early-stopping", early_stopping,
           "stop when --monitor has not improved for N epochs, and end with the best epoch's variables (0: off)",
           range<int64_t>{0, 1 << 20})
      .add("monitor", monitor, "what --early-stopping watches: a key of the epoch's logs (loss, val_loss, ...)")
      .add_choice("monitor-mode", mode, "which way is better (auto: max for names with 'acc')", {"min", "max", "auto"})
      .add("csv-log", csv_log, "append one CSV row per epoch to this file (on the coordinator's task)");
  }

  void apply(const std::string& name, job& j) const {
    if (local_lr > 0 && pull_every == 1) throw usage_error(fmt::format("{}: --local-lr needs --pull-every > 1", name));
    j.fit.verbose = verbose;
    j.spec.metrics_file = metrics;
    j.spec.pull_every = pull_every;
    j.spec.local_learning_rate = local_lr;
    j.spec.push_every = push_every;
    j.spec.pull_ahead = pull_ahead;
    j.spec.pull_with_push = !pull_separately;
    if (partitioner) j.spec.partitioner = partitioner;
    if (compensation) j.spec.compensation = *compensation;
    if (clip_norm > 0) j.spec.train_step = model::clipped_step(clip_norm);
    if (loop && (early_stopping > 0 || !csv_log.empty()))
      throw usage_error(fmt::format("{}: --loop: callbacks (--early-stopping, --csv-log) run with fit only", name));
    j.loop = loop;
    j.spec.steps_per_execution =
      push_every > 1 && spe % push_every != 0 && !parsed->given("steps-per-execution") ? push_every : spe;
    if (early_stopping > 0)
      j.callbacks.push_back(
        std::make_shared<actortrain::early_stopping>(early_stopping_options{monitor, early_stopping, 0, mode, true}));
    if (!csv_log.empty()) j.callbacks.push_back(csv_logger(csv_log));
  }
};

// Parses `args` into `f` (a job takes no positional arguments); false: --help printed.
bool parse(cli::flags& f, const std::string& name, const std::vector<std::string>& args) {
  if (!f.parse(args)) return false;
  if (!f.positional().empty()) throw usage_error(fmt::format("{}: unexpected argument '{}'", name, f.positional()[0]));
  return true;
}

bool make_linear(const std::vector<std::string>& args, job& j) {
  linear_options o;
  cli::flags f{"linear", "A planted linear regression y = x.w + b + noise (w, b drawn from --seed), Dense(1), SGD."};
  f.add("epochs", o.epochs, "passes over the data", range<int>{1, 1 << 20})
    .add("examples", o.examples, "training examples", range<int64_t>{1, int64_t{1} << 26})
    .add("features", o.features, "input width", range<int64_t>{1, 4096})
    .add("batch", o.batch, "batch size per step", range<int64_t>{1, int64_t{1} << 20})
    .add("lr", o.learning_rate, "SGD learning rate", range<double>{1e-12, 1e3})
    .add("noise", o.noise, "standard deviation of the label noise", range<double>{0, 1e6})
    .add("seed", o.seed, "seed of the data and of initialization");
  common_flags common{0, 1};
  common.add_to(f);
  if (!parse(f, "linear", args)) return false;
  j = linear(o);
  common.apply("linear", j);
  return true;
}

bool make_fashion_mnist(const std::vector<std::string>& args, job& j) {
  fashion_mnist_options o;
  cli::flags f{"fashion_mnist", "The main job's MLP 784-256-128-10 on Fashion-MNIST (Adam), validated on the test set."};
  f.add("epochs", o.epochs, "passes over the 60,000 training images", range<int>{1, 1 << 20})
    .add("batch", o.batch, "batch size per step", range<int64_t>{1, 60000})
    .add("lr", o.learning_rate, "Adam learning rate", range<double>{1e-12, 1e3})
    .add("seed", o.seed, "seed of initialization and shuffling")
    .add("data-dir", o.data_dir, "directory with the four Fashion-MNIST .gz files")
    .add("limit", o.limit, "train on the first N images and validate on the first N/4 test images (0: all)",
         range<int64_t>{0, 60000})
    .add("use-ema", o.use_ema, "keep a moving average of the weights and evaluate it (--use-ema=off: the weights)")
    .add("ema-momentum", o.ema_momentum, "the average's momentum", range<double>{0, 0.999999})
    .add("ema-every", o.ema_every, "update the average on every k-th update only, with the momentum to the k-th power",
         range<int>{1, 1000});
  common_flags common{2, o.steps_per_execution};
  common.add_to(f);
  if (!parse(f, "fashion_mnist", args)) return false;
  j = fashion_mnist(o);
  common.apply("fashion_mnist", j);
  return true;
}

}  // namespace

void add_flags(cli::flags& f, ctr_options& o) {
  using cli::range;
  f.add("epochs", o.epochs, "passes over the training set", range<int>{1, 1 << 20})
    .add("rows", o.rows, "training examples", range<int64_t>{1, int64_t{1} << 40})
    .add("test-rows", o.test_rows, "test examples", range<int64_t>{1, int64_t{1} << 26})
    .add("buckets", o.buckets, "rows of the hashed embedding table", range<int64_t>{1, int64_t{1} << 24})
    .add("dim", o.dim, "embedding width", range<int64_t>{1, 4096})
    .add("batch", o.batch, "examples per step (per worker)", range<int64_t>{1, int64_t{1} << 20})
    .add_parsed("optimizer", o.optimizer, "the shards' optimizer: adam(lr) (lazy on rows), adagrad(lr), sgd(lr), rmsprop(lr)",
                [&o](const std::string& v) {
                  model::make_optimizer(v);  // refused here, naming the flag
                  o.optimizer = v;
                })
    .add("whole-tables", o.whole_tables, "pull the whole table every step instead of the batch's rows")
    .add("dynamic", o.dynamic,
         "tables keyed by the raw id: a row per category value, created on the shards at its first gradient "
         "(--buckets unused)")
    .add("admit-after", o.admit_after,
         "--dynamic: an id gets a row at its N-th applied gradient, its gradients dropped before (0: at once)",
         range<uint64_t>{0, uint64_t{1} << 40})
    .add("evict-after", o.evict_after, "--dynamic: rows not updated for N steps of their shard are dropped (0: never)",
         range<uint64_t>{0, uint64_t{1} << 40})
    .add("scale", o.scale,
         "N times the category values of each field (3600 N in all), drawn example by example when read, never held",
         range<int64_t>{1, int64_t{1} << 40})
    .add("id-bits", o.id_bits,
         "--dynamic: each category value's id is a hash of it in [0, 2^N), given to the table as a 64-bit id "
         "(0: ids below 2^24 as floats)",
         range<int>{0, 62})
    .add_parsed("wide", o.wide_optimizer,
                "add a wide part (a weight per bucket) trained on the shards by this optimizer of its own, e.g. "
                "adagrad(0.05) (wide-and-deep; its hyperparameters are wide/NAME)",
                [&o](const std::string& v) {
                  model::make_optimizer(v);  // refused here, naming the flag
                  o.wide_optimizer = v;
                })
    .add("seed", o.seed, "seed of the data and the initialization");
}

namespace {

bool make_ctr(const std::vector<std::string>& args, job& j) {
  ctr_options o;
  cli::flags f{"ctr", "Click-through prediction with sparse embeddings on generated data whose best scores are known."};
  add_flags(f, o);
  common_flags common{2, 1};
  common.add_to(f);
  if (!parse(f, "ctr", args)) return false;
  try {
    j = ctr(o);
  } catch (const std::invalid_argument& e) {  // --id-bits without --dynamic, and the like
    throw usage_error(e.what());
  }
  common.apply("ctr", j);
  return true;
}

bool make_tutorial(const std::vector<std::string>& args, job& j) {
  tutorial_options o;
  cli::flags f{"tutorial",
               "TensorFlow's distributed-training tutorial: 1000 x 5 ones, Dense(10) -> Dense(1), Adam, MSE, batch 20."};
  f.add("epochs", o.epochs, "epochs of --steps-per-epoch steps", range<int>{1, 1 << 20})
    .add("steps-per-epoch", o.steps_per_epoch, "steps per epoch (the data repeats)", range<int64_t>{1, 1 << 30})
    .add("lr", o.learning_rate, "Adam learning rate", range<double>{1e-12, 1e3})
    .add("seed", o.seed, "seed of initialization and shuffling");
  common_flags common{0, 1};
  common.add_to(f);
  if (!parse(f, "tutorial", args)) return false;
  j = tutorial(o);
  common.apply("tutorial", j);
  return true;
}

struct entry {
  registered_job what;
  std::function<bool(const std::vector<std::string>&, job&)> make;
};

const std::vector<entry>& entries() {
  static const std::vector<entry> all{
    {{"linear", "a planted linear regression (tiny: for trying clusters out)"}, make_linear},
    {{"fashion_mnist", "the main job's MLP on Fashion-MNIST"}, make_fashion_mnist},
    {{"ctr", "click-through prediction with sparse embeddings, planted truth"}, make_ctr},
    {{"tutorial", "TensorFlow's tutorial: Dense(10) -> Dense(1) on ones, Adam, MSE"}, make_tutorial},
  };
  return all;
}

}  // namespace

const std::vector<registered_job>& registered() {
  static const std::vector<registered_job> all = [] {
    std::vector<registered_job> out;
    for (auto& e : entries()) out.push_back(e.what);
    return out;
  }();
  return all;
}

std::string registered_names() {
  std::string known;
  for (auto& e : entries()) known += (known.empty() ? "" : ", ") + e.what.name;
  return known;
}

bool make_job(const std::string& name, const std::vector<std::string>& args, job& out) {
  for (auto& e : entries())
    if (e.what.name == name || (name == "fashion-mnist" && e.what.name == "fashion_mnist")) return e.make(args, out);
  throw usage_error(name.empty() ? fmt::format("which job? --example NAME ({})", registered_names())
                                 : fmt::format("unknown job '{}' ({})", name, registered_names()));
}

}  // namespace actortrain::jobs
