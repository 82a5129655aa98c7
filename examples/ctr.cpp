// ctr — click-through prediction with sparse embeddings on an embedded cluster.
//
// The data is generated with a planted ground truth, so the best achievable scores are
// known: each example has four categorical fields (skewed, as real categories are) and
// four dense features; the click probability is sigmoid(bias + a weight per category
// value + a linear and a non-linear dense term). Category values are hashed into one
// shared table of --buckets rows, as production CTR models do. The model is a logistic
// model with embeddings (one table, rows split over the ps shards by --partitioner) and
// a small dense tower; workers pull only the rows a batch touches and push only their
// gradients, and the shards apply lazy Adam (or Adagrad) to those rows.
//
// Per epoch it prints the test AUC and log loss beside the optimum: the AUC and log loss
// of the true probabilities on the same test set.
//
//   build/examples/ctr                                  # 2 ps, 2 workers, async
//   build/examples/ctr --consistency sync --epochs 3
//   build/examples/ctr --optimizer "adagrad(0.05)" --buckets 16384

#include <actortrain/actors/all.hpp>
#include <actortrain/dataset/all.hpp>
#include <actortrain/model/all.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <fmt/format.h>

#include <map>

#include <actortrain/actors/cli/flags.hpp>

namespace ds = actortrain::dataset;
namespace md = actortrain::model;
using md::matrix;

namespace {

constexpr int fields = 4;
constexpr int dense_features = 4;
constexpr int64_t cardinality[fields] = {1000, 500, 2000, 100};

// The planted model: a weight per (field, value), and the dense terms.
struct truth {
  std::vector<std::vector<float>> weight;
  explicit truth(uint64_t seed) {
    md::rng g{seed, /*stream=*/11};
    for (int f = 0; f < fields; ++f) {
      weight.emplace_back(static_cast<size_t>(cardinality[f]));
      for (auto& w : weight.back()) w = static_cast<float>(1.6 * g.uniform() - 0.8);
    }
  }
};

struct examples {
  matrix ids, dense, labels, logits;  // logits: the truth's, for the optimum
};

// Value v of field f lands in a scattered bucket: its place x among all fields' values,
// mod buckets, times a large prime, mod buckets. That is one-to-one while there are at
// least as many buckets as values (3,600), so the optimum stays achievable; fewer
// buckets make values collide, as hashing does.
int64_t bucket(int f, int64_t v, int64_t buckets) {
  int64_t x = v;
  for (int k = 0; k < f; ++k) x += cardinality[k];
  auto b = static_cast<uint64_t>(buckets);
  return static_cast<int64_t>((static_cast<uint64_t>(x) % b) * (2654435761ull % b) % b);
}

// Category values that share their bucket with another.
int64_t collisions(int64_t buckets) {
  std::map<int64_t, int> count;
  for (int f = 0; f < fields; ++f)
    for (int64_t v = 0; v < cardinality[f]; ++v) ++count[bucket(f, v, buckets)];
  int64_t n = 0;
  for (auto& [b, c] : count) n += c > 1 ? c : 0;
  return n;
}

examples generate(const truth& t, int64_t n, int64_t buckets, uint64_t seed) {
  md::rng g{seed, /*stream=*/13};
  examples e;
  e.ids.resize(n, fields);
  e.dense.resize(n, dense_features);
  e.labels.resize(n, 1);
  e.logits.resize(n, 1);
  const float u[dense_features] = {0.8f, -0.6f, 0.4f, 0.0f};
  for (Eigen::Index r = 0; r < n; ++r) {
    double z = -1.2;
    for (int f = 0; f < fields; ++f) {
      auto v = static_cast<int64_t>(static_cast<double>(cardinality[f]) * g.uniform() * g.uniform());
      e.ids(r, f) = static_cast<float>(bucket(f, v, buckets));
      z += t.weight[static_cast<size_t>(f)][static_cast<size_t>(v)];
    }
    for (int d = 0; d < dense_features; ++d) {
      e.dense(r, d) = static_cast<float>(2 * g.uniform() - 1);
      z += u[d] * e.dense(r, d);
    }
    z += 0.8 * std::tanh(2.0 * e.dense(r, 0) * e.dense(r, 1));
    e.logits(r, 0) = static_cast<float>(z);
    e.labels(r, 0) = g.uniform() < 1 / (1 + std::exp(-z)) ? 1.0f : 0.0f;
  }
  return e;
}

}  // namespace

int main(int argc, char** argv) {
  return actortrain::cli::run_main("ctr", [&] {
    int ps = 2, workers = 2, epochs = 4, verbose = 2, threads = 2;
    int64_t rows = 500000, test_rows = 50000, buckets = 4096, dim = 8, batch = 256;
    uint64_t seed = 1;
    std::string consistency = "async", optimizer = "adam(0.002)", partitioner = "fixed_shards(2)";
    bool whole_tables = false;
    actortrain::cli::flags f{"ctr",
                               "Trains a click-through model with embeddings on generated data whose best AUC and log\n"
                               "loss are known, on an embedded parameter-server cluster, and prints both per epoch."};
    f.add("ps", ps, "parameter-server shards")
      .add("workers", workers, "workers (each with its own input pipeline)")
      .add("epochs", epochs, "passes over the training set")
      .add("rows", rows, "training examples")
      .add("test-rows", test_rows, "test examples")
      .add("buckets", buckets, "rows of the hashed embedding table")
      .add("dim", dim, "embedding width")
      .add("batch", batch, "examples per step (per worker)")
      .add("optimizer", optimizer, "the shards' optimizer: adam(lr) (lazy on rows), adagrad(lr), sgd(lr), rmsprop(lr)")
      .add("partitioner", partitioner, "how variables are split over the shards (\"none\": whole)")
      .add("consistency", consistency, "async, bounded_staleness(s) or sync")
      .add("whole-tables", whole_tables, "pull the whole table every step instead of the batch's rows")
      .add("seed", seed, "seed of the data and the initialization")
      .add("threads", threads, "CAF scheduler threads")
      .add("verbose", verbose, "0 silent, 1 progress bar, 2 one line per epoch");
    if (!f.parse(argc, argv)) return 0;
    using actortrain::cli::usage_error;
    if (ps < 1 || workers < 1 || epochs < 1 || threads < 1) throw usage_error("--ps, --workers, --epochs, --threads must be >= 1");
    if (rows < 1 || test_rows < 1 || batch < 1 || dim < 1) throw usage_error("--rows, --test-rows, --batch, --dim must be >= 1");
    if (buckets < 1 || buckets > (int64_t{1} << 24)) throw usage_error("--buckets must be in [1, 2^24]");

    truth t{seed};
    auto train = generate(t, rows, buckets, seed + 1);
    auto test = generate(t, test_rows, buckets, seed + 2);
    // The optimum: the true probabilities scored like the model.
    auto best_auc = md::auc();
    best_auc->update(test.logits, test.labels);
    double best_loss = md::binary_cross_entropy()->compute(test.logits, test.labels, nullptr);

    caf::actor_system_config cfg;
    actortrain::configure(cfg);
    cfg.set("scheduler.max-threads", threads);
    caf::actor_system sys{cfg};
    actortrain::cluster_spec spec;
    spec.num_ps = ps;
    spec.num_workers = workers;
    spec.seed = seed;
    spec.partitioner = partitioner;
    spec.consistency = consistency;
    spec.pull_rows = !whole_tables;

    using md::layers::activation;
    md::graph g;
    auto ids = g.input(fields, "ids");
    auto dense = g.input(dense_features, "dense");
    auto e = g.apply(md::layers::embedding(buckets, dim), ids);  // concat: fields x dim
    auto h = g.apply(md::layers::concatenate(), {e, dense});
    auto out = g.apply(md::layers::dense(1), g.apply(md::layers::dense(32, activation::relu), h));
    auto net = md::model::functional(g, {ids, dense}, out);
    std::vector<md::metric_ptr> ms;
    ms.push_back(md::auc());
    actortrain::cluster c{sys, spec, net, *md::make_optimizer(optimizer), md::binary_cross_entropy(), std::move(ms)};

    auto all = ds::from_tensor_slices({train.ids, train.dense}, train.labels);
    auto fn = [all, seed, batch](const ds::input_context& ctx) {
      return all.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        .shuffle(1 << 16, seed + static_cast<uint64_t>(ctx.input_pipeline_id))
        .batch(batch);
    };
    md::fit_options opts;
    opts.epochs = epochs;
    opts.verbose = verbose;
    opts.validation = ds::from_tensor_slices({test.ids, test.dense}, test.labels).batch(4096);
    auto r = c.join(c.schedule(fn, opts));
    const auto& hist = r.history;
    fmt::print("\n{} ps, {} workers, {}, {} buckets x {}, {}: {} steps, staleness mean {:.2f} max {}\n", ps, workers,
               consistency, buckets, dim, optimizer, r.steps, r.mean_staleness, r.max_staleness);
    fmt::print("{} of 3600 category values share a bucket; the optimum is the true probabilities' score\n",
               collisions(buckets));
    fmt::print("epoch  test AUC  (optimum)  test log loss  (optimum)\n");
    for (size_t k = 0; k < hist.epochs(); ++k)
      fmt::print("{:>5}  {:.4f}    ({:.4f})   {:.4f}         ({:.4f})\n", k + 1, hist["val_auc"][k], best_auc->result(),
                 hist["val_loss"][k], best_loss);
    return 0;
  });
}
