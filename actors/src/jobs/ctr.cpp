// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// The registered job ctr (jobs.hpp): click-through prediction with sparse embeddings on
// generated data whose best scores are known. Each example has four categorical fields
// (skewed, as real categories are) and four dense features; the click probability is
// sigmoid(bias + a weight per category value + a linear and a non-linear dense term).
// Category values are hashed into one shared table of `buckets` rows, as production CTR
// models do.
#include <actortrain/actors/jobs/jobs.hpp>

#include <actortrain/dataset/all.hpp>
#include <actortrain/model/all.hpp>

#include <fmt/format.h>

#include <cmath>
#include <map>

namespace actortrain::jobs {

namespace ds = dataset;
namespace md = model;
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

// With dynamic tables every value keeps an id of its own: scattered over [0, 2^24) by
// the same map, which is one-to-one there (the prime is odd).
int64_t id_space(const ctr_options& o) { return o.dynamic ? md::layers::max_float_id : o.buckets; }

// A table of `dim` columns: of `buckets` rows, or keyed by the raw id.
md::layer_ptr table(const ctr_options& o, int64_t dim, md::layers::combiner c, md::initializer init) {
  if (o.dynamic) return md::layers::dynamic_embedding(dim, c, std::move(init), {o.admit_after, o.evict_after});
  return md::layers::embedding(o.buckets, dim, c, std::move(init));
}

}  // namespace

job ctr(const ctr_options& o) {
  truth t{o.seed};
  auto train = generate(t, o.rows, id_space(o), o.seed + 1);
  auto test = generate(t, o.test_rows, id_space(o), o.seed + 2);
  using md::layers::activation;
  md::graph g;
  auto ids = g.input(fields, "ids");
  auto dense = g.input(dense_features, "dense");
  // concat: fields x dim
  auto e = g.apply(table(o, o.dim, md::layers::combiner::concat, md::uniform(-0.05f, 0.05f)), ids);
  auto h = g.apply(md::layers::concatenate(), {e, dense});
  auto out = g.apply(md::layers::dense(1), g.apply(md::layers::dense(32, activation::relu), h));
  job j;
  const auto rows = o.dynamic ? fmt::format("dynamic(admit_after={}, evict_after={})", o.admit_after, o.evict_after)
                              : fmt::format("buckets={}", o.buckets);
  j.name = fmt::format("ctr(rows={}, {}, dim={}, seed={})", o.rows, rows, o.dim, o.seed);
  if (!o.wide_optimizer.empty()) {
    // Wide and deep: a weight per bucket, summed over the fields, plus the deep logit.
    auto wide = table(o, 1, md::layers::combiner::sum, md::zeros());
    wide->set_name("wide_embedding");
    out = g.apply(md::layers::add(), {g.apply(wide, ids), out});
    j.spec.variable_groups.push_back({"wide", {"wide_embedding/"}, md::make_optimizer(o.wide_optimizer)});
    j.name = fmt::format("ctr(rows={}, {}, dim={}, wide={}, seed={})", o.rows, rows, o.dim, o.wide_optimizer, o.seed);
  }
  j.structure = md::model::functional(g, {ids, dense}, out);
  j.optimizer = md::make_optimizer(o.optimizer);
  j.loss = md::binary_cross_entropy();
  j.metrics = [] {
    std::vector<md::metric_ptr> m;
    m.push_back(md::auc());
    return m;
  };
  auto all = ds::from_tensor_slices({train.ids, train.dense}, train.labels);
  j.train = [all, seed = o.seed, batch = o.batch](const ds::input_context& ctx) {
    return all.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
      .shuffle(1 << 16, seed + static_cast<uint64_t>(ctx.input_pipeline_id))
      .batch(batch);
  };
  j.fit.epochs = o.epochs;
  j.fit.validation = ds::from_tensor_slices({test.ids, test.dense}, test.labels).batch(4096);
  j.spec.seed = o.seed;
  j.spec.partitioner = std::make_shared<md::fixed_shards>(2);
  j.spec.pull_rows = !o.whole_tables;
  return j;
}

ctr_optimum ctr_best(const ctr_options& o) {
  truth t{o.seed};
  auto test = generate(t, o.test_rows, id_space(o), o.seed + 2);
  ctr_optimum best;
  auto auc = md::auc();
  auc->update(test.logits, test.labels);
  best.auc = auc->result();
  best.log_loss = md::binary_cross_entropy()->compute(test.logits, test.labels, nullptr);
  best.shared_buckets = collisions(id_space(o));
  return best;
}

}  // namespace actortrain::jobs
