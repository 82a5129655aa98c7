#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// The registered jobs, each defined once as an actortrain::job (cluster/job.hpp): the
// value a cluster of processes runs on every task (`actortrain node`/`launch`, run_node),
// the fault simulator trains under fault plans (`actortrain soak --example`), the
// benchmarks measure and `actortrain ledger check` judges; the examples build them too.
//
// example[with_sys]:
//   actortrain::jobs::fashion_mnist_options o;
//   o.epochs = 3;
//   auto j = actortrain::jobs::fashion_mnist(o);
//   actortrain::cluster c{sys, j};             // an embedded cluster of j.spec's shape
//   auto history = c.fit(j.train, j.fit);
//
// By name, from command-line flags (what `actortrain node --example NAME -- FLAGS` does):
// example[main]:
//   actortrain::job j;
//   if (!actortrain::jobs::make_job("linear", {"--epochs", "2"}, j)) return 0;  // --help printed

#include <actortrain/actors/cluster/job.hpp>
#include <actortrain/dataset/fashion_mnist.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace actortrain::cli {
class flags;
}

namespace actortrain::jobs {

/// y = x . w + b + noise for a w and b drawn from `seed`, Dense(1), SGD: small enough for
/// tests with real processes, and the loss it reaches is known (noise squared). A
/// held-out set of 500 from the same model is its validation data.
struct linear_options {
  int epochs = 3;
  int64_t examples = 2000;
  int64_t features = 5;
  int64_t batch = 20;
  double learning_rate = 0.05;
  double noise = 0.1;
  uint64_t seed = 1;
};
job linear(const linear_options& o = {});

/// The main job: an MLP 784-256-128-10 on Fashion-MNIST with Adam, each input pipeline
/// reading its own shard of the 60,000 training images, validated on the test set.
/// `limit` > 0 trains on the first `limit` images and validates on the first limit/4.
/// The training images are read when the job's pipelines are first built (on the tasks
/// that build them); the 10,000 test images (the validation data) when the job is built,
/// on every task that builds it.
struct fashion_mnist_options {
  int epochs = 10;
  int64_t batch = 128;
  double learning_rate = 1e-3;
  uint64_t seed = 1;
  int64_t limit = 0;
  std::string data_dir = dataset::fashion_mnist_default_dir;
  /// What the ps shards do about stale gradients (cluster_spec::compensation); the
  /// default is the one measured best for this job: lookahead 6 updates ahead, past the
  /// staleness (about 1 with 2 workers). The sweep, and why looking past the staleness
  /// helps one worker too: docs/benchmarks.md, "How far ahead".
  staleness_compensation compensation = staleness_compensation::lookahead(6);
  /// Adam keeps a moving average of the values (Keras's use_ema and ema_momentum;
  /// model/optim/optimizer.hpp, "Averaging"): the cluster evaluates it and reads it as
  /// the model, while training moves the values. On by default, measured best for this
  /// job (docs/benchmarks.md, "Averaging the model"); fashion_mnist_local, the baseline,
  /// turns it off.
  bool use_ema = true;
  double ema_momentum = 0.99;
  /// The average is updated on every 8th update of a partition, with the momentum raised
  /// to the 8th power (adam_options::ema_every): the same accuracy as every update, at a
  /// fraction of its cost in speed (docs/benchmarks.md, "Averaging the model").
  int ema_every = 8;
  /// Steps per task the coordinator sends a worker (cluster_spec::steps_per_execution,
  /// Keras's steps_per_execution): a worker reports once per 8 steps instead of after
  /// each, the same steps on the same batches. With 2 workers embedded, the report and the
  /// next task after every step cost about 5% of the samples/s (docs/benchmarks.md,
  /// "Steps per task"). Sync rounds are one step per replica whatever it says.
  int steps_per_execution = 8;
  /// Both splits already in memory (dataset::load_fashion_mnist), instead of reading
  /// data_dir: the benchmarks load them once for many runs.
  std::shared_ptr<const dataset::fashion_mnist_arrays> train_arrays, test_arrays;
};
job fashion_mnist(const fashion_mnist_options& o = {});

/// Click-through prediction with sparse embeddings on generated data with a planted
/// truth: four skewed categorical fields hashed into one table of `buckets` rows of
/// width `dim`, four dense features, a logistic model with the embeddings and a small
/// dense tower (32 relu); AUC as its metric. Workers pull only a batch's rows unless
/// `whole_tables`.
struct ctr_options {
  int epochs = 4;
  int64_t rows = 500000;
  int64_t test_rows = 50000;
  int64_t buckets = 4096;
  int64_t dim = 8;
  int64_t batch = 256;
  std::string optimizer = "adam(0.002)";
  bool whole_tables = false;
  /// Not empty: a wide part beside the deep one (wide-and-deep), a weight per bucket
  /// (an embedding of width 1 summed over the fields, layer "wide_embedding") added to
  /// the deep tower's logit, updated on the shards by this optimizer of its own
  /// (cluster_spec::variable_groups, group "wide"), e.g. "adagrad(0.05)".
  std::string wide_optimizer;
  /// Tables keyed by the raw id (layers::dynamic_embedding) instead of `buckets` rows:
  /// every category value gets an id of its own and a row of its own, created on the
  /// shards when its first gradient is applied (`buckets` is not used).
  bool dynamic = false;
  uint64_t admit_after = 0;  ///< dynamic: layers::dynamic_rows::admit_after
  uint64_t evict_after = 0;  ///< dynamic: layers::dynamic_rows::evict_after
  /// Each field has this many times its values (3,600 in all at 1). Above 1 the data is
  /// drawn example by example when it is read (dataset::generate), never held, and a
  /// value's weight in the truth is a hash of it: 20M distinct values cost no memory.
  int64_t scale = 1;
  /// With `dynamic`, above 0: a value's id is a hash of it in [0, 2^id_bits), given to
  /// the table as a 64-bit id (model::batch::ids; the data is drawn as with scale > 1).
  /// 0: ids below 2^24, as floats.
  int id_bits = 0;
  uint64_t seed = 1;
};
/// Throws std::invalid_argument for an optimizer it cannot read, a scale or id_bits out
/// of range, id_bits without dynamic, or more values than float ids hold without id_bits.
job ctr(const ctr_options& o = {});

/// Adds ctr's own flags (--epochs, --rows, --buckets, --dynamic, --id-bits, ...) to `f`,
/// writing into `o`: `actortrain ... --example ctr` and examples/ctr take the same ones.
void add_flags(cli::flags& f, ctr_options& o);

/// What the best model could score on ctr's test set (the truth's own probabilities),
/// and how many of the category values share a bucket of the table.
struct ctr_optimum {
  double auc = 0;
  double log_loss = 0;
  /// The category values (3,600 x scale), and how many share a bucket (-1: not counted,
  /// for ids hashed into 2^id_bits or more than 2^26 values).
  int64_t values = 0;
  int64_t shared_buckets = 0;
};
ctr_optimum ctr_best(const ctr_options& o = {});

/// TensorFlow's distributed-training tutorial (MultiWorkerMirroredStrategy,
/// ParameterServerStrategy): 1000 x 5 inputs of ones with targets of ones,
/// Dense(10) -> Dense(1), Adam 0.001, mean squared error, batches of 20, an infinite
/// dataset with `steps_per_epoch` steps per epoch.
struct tutorial_options {
  int epochs = 5;
  int64_t steps_per_epoch = 10;
  double learning_rate = 1e-3;
  uint64_t seed = 1;
};
job tutorial(const tutorial_options& o = {});

/// A registered job's name and what it is, in the order --help lists them.
struct registered_job {
  std::string name;
  std::string summary;
};
const std::vector<registered_job>& registered();
/// "linear, fashion_mnist, ctr, tutorial" (for messages).
std::string registered_names();

/// Builds registered job `name` from its flags (`args`, without a program name): each
/// job's own (--epochs, --lr, ...), and those every job takes (--verbose, --metrics,
/// --steps-per-execution, --pull-every, --local-lr, --push-every, --pull-ahead,
/// --early-stopping, --monitor, --monitor-mode, --csv-log). Throws cli::usage_error for
/// an unknown name or a bad flag, naming it. With --help among `args`, prints the job's
/// flags and returns false.
bool make_job(const std::string& name, const std::vector<std::string>& args, job& out);

}  // namespace actortrain::jobs
