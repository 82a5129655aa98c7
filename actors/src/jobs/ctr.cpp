// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// The registered job ctr (jobs.hpp): click-through prediction with sparse embeddings on
// generated data whose best scores are known. Each example has four categorical fields
// (skewed, as real categories are) and four dense features; the click probability is
// sigmoid(bias + a weight per category value + a linear and a non-linear dense term).
// Category values are hashed into one shared table of `buckets` rows, as production CTR
// models do, or keyed by the raw id in dynamic tables.
//
// With ctr_options::scale > 1 or id_bits > 0 the data is too large to hold: example i
// is drawn from i when it is read (dataset::generate), and the truth's weight of a
// category value is a hash of it, so every shard, epoch and process draws the same
// examples and nothing grows with the number of values. With id_bits, a value's id is
// a hash of it in [0, 2^id_bits), given to the table as a 64-bit id.
#include <actortrain/actors/jobs/jobs.hpp>

#include <actortrain/dataset/all.hpp>
#include <actortrain/model/all.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

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

// The values of field f: cardinality[f] times the scale.
int64_t values_of(int f, int64_t scale) { return cardinality[f] * scale; }

// Value v of field f lands in a scattered bucket: its place x among all fields' values,
// mod buckets, times a large prime, mod buckets. That is one-to-one while there are at
// least as many buckets as values (3,600 times the scale), so the optimum stays
// achievable; fewer buckets make values collide, as hashing does.
int64_t bucket(int f, int64_t v, int64_t buckets, int64_t scale) {
  int64_t x = v;
  for (int k = 0; k < f; ++k) x += values_of(k, scale);
  auto b = static_cast<uint64_t>(buckets);
  return static_cast<int64_t>((static_cast<uint64_t>(x) % b) * (2654435761ull % b) % b);
}

// Category values that share their bucket with another.
int64_t collisions(int64_t buckets, int64_t scale) {
  std::vector<uint32_t> count(static_cast<size_t>(buckets));
  for (int f = 0; f < fields; ++f)
    for (int64_t v = 0; v < values_of(f, scale); ++v) ++count[static_cast<size_t>(bucket(f, v, buckets, scale))];
  int64_t n = 0;
  for (auto c : count) n += c > 1 ? c : 0;
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
      e.ids(r, f) = static_cast<float>(bucket(f, v, buckets, 1));
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

// -- drawn when read (scale > 1 or id_bits > 0) -----------------------------------------

bool drawn_data(const ctr_options& o) { return o.scale > 1 || o.id_bits > 0; }

// A uniform draw in [0, 1) named by `key`.
double unit(uint64_t key) { return static_cast<double>(md::mix64(key) >> 11) * 0x1.0p-53; }

// The truth's weight of value v of field f.
double drawn_weight(uint64_t seed, int f, int64_t v) {
  return 1.6 * unit(md::mix64(seed * 8 + static_cast<uint64_t>(f)) ^ static_cast<uint64_t>(v)) - 0.8;
}

// The id of value v of field f below 2^bits: a hash of both (fields apart in its top
// byte before hashing, as v < 2^56).
int64_t hashed_id(int f, int64_t v, int bits) {
  auto h = md::mix64((static_cast<uint64_t>(f) << 56) ^ static_cast<uint64_t>(v) ^ 0x6374725f69647321ull);
  return static_cast<int64_t>(h & ((uint64_t{1} << bits) - 1));
}

struct drawn_example {
  int64_t ids[fields];
  float dense[dense_features];
  float logit = 0, label = 0;
};

// Example i of split `split` (1 train, 2 test): the values drawn as generate() draws them.
drawn_example draw(const ctr_options& o, int split, uint64_t i) {
  md::rng g{md::mix64(o.seed * 4 + static_cast<uint64_t>(split)) + i, 13};
  drawn_example e;
  double z = -1.2;
  for (int f = 0; f < fields; ++f) {
    auto card = values_of(f, o.scale);
    auto v = std::min(card - 1, static_cast<int64_t>(static_cast<double>(card) * g.uniform() * g.uniform()));
    e.ids[f] = o.dynamic && o.id_bits > 0 ? hashed_id(f, v, o.id_bits) : bucket(f, v, id_space(o), o.scale);
    z += drawn_weight(o.seed, f, v);
  }
  const float u[dense_features] = {0.8f, -0.6f, 0.4f, 0.0f};
  for (int d = 0; d < dense_features; ++d) {
    e.dense[d] = static_cast<float>(2 * g.uniform() - 1);
    z += u[d] * e.dense[d];
  }
  z += 0.8 * std::tanh(2.0 * e.dense[0] * e.dense[1]);
  e.logit = static_cast<float>(z);
  e.label = g.uniform() < 1 / (1 + std::exp(-z)) ? 1.0f : 0.0f;
  return e;
}

// n examples of `split`, each drawn when read: input 0 the ids (64-bit with id_bits,
// else floats), input 1 the dense features.
ds::dataset drawn(const ctr_options& o, int split, int64_t n) {
  auto fn = [o, split](uint64_t i) {
    auto d = draw(o, split, i);
    ds::element e;
    if (o.dynamic && o.id_bits > 0) {
      e.features.emplace_back(1, 0);
      e.ids.resize(1);
      e.ids[0] = Eigen::Map<const md::id_matrix>(d.ids, 1, fields);
    } else {
      e.features.emplace_back(1, fields);
      for (int f = 0; f < fields; ++f) e.features[0](0, f) = static_cast<float>(d.ids[f]);
    }
    e.features.push_back(Eigen::Map<const matrix>(d.dense, 1, dense_features));
    e.labels = matrix::Constant(1, 1, d.label);
    return e;
  };
  return ds::generate(n, fn, split == 1 ? "ctr train" : "ctr test");
}

// A table of `dim` columns: of `buckets` rows, or keyed by the raw id.
md::layer_ptr table(const ctr_options& o, int64_t dim, md::layers::combiner c, md::initializer init) {
  if (o.dynamic) return md::layers::dynamic_embedding(dim, c, std::move(init), {o.admit_after, o.evict_after});
  return md::layers::embedding(o.buckets, dim, c, std::move(init));
}

}  // namespace

job ctr(const ctr_options& o) {
  if (o.scale < 1 || o.scale > (int64_t{1} << 40))
    throw std::invalid_argument(fmt::format("ctr: scale = {} is not in [1, 2^40]", o.scale));
  if (o.id_bits < 0 || o.id_bits > 62)
    throw std::invalid_argument(fmt::format("ctr: id_bits = {} is not in [0, 62]", o.id_bits));
  if (o.id_bits > 0 && !o.dynamic)
    throw std::invalid_argument("ctr: id_bits needs dynamic tables (a fixed table's rows are its buckets)");
  if (!drawn_data(o) && (o.rows > (int64_t{1} << 26) || o.test_rows > (int64_t{1} << 26)))
    throw std::invalid_argument(fmt::format("ctr: {} rows are past 2^26 held in memory: scale > 1 or id_bits draw "
                                            "examples when they are read", std::max(o.rows, o.test_rows)));
  if (o.dynamic && o.id_bits == 0 && 3600 * o.scale > md::layers::max_float_id)
    throw std::invalid_argument(fmt::format("ctr: {} category values do not fit float ids below 2^24: give them "
                                            "64-bit ids (id_bits)", 3600 * o.scale));
  using md::layers::activation;
  md::graph g;
  auto ids = g.input(fields, "ids");
  auto dense = g.input(dense_features, "dense");
  // concat: fields x dim
  auto e = g.apply(table(o, o.dim, md::layers::combiner::concat, md::uniform(-0.05f, 0.05f)), ids);
  auto h = g.apply(md::layers::concatenate(), {e, dense});
  auto out = g.apply(md::layers::dense(1), g.apply(md::layers::dense(32, activation::relu), h));
  job j;
  auto rows = o.dynamic ? fmt::format("dynamic(admit_after={}, evict_after={})", o.admit_after, o.evict_after)
                        : fmt::format("buckets={}", o.buckets);
  if (o.scale > 1) rows += fmt::format(", scale={}", o.scale);
  if (o.id_bits > 0) rows += fmt::format(", id_bits={}", o.id_bits);
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
  ds::dataset all, test;
  if (drawn_data(o)) {
    all = drawn(o, 1, o.rows);
    test = drawn(o, 2, o.test_rows);
  } else {
    truth t{o.seed};
    auto train_rows = generate(t, o.rows, id_space(o), o.seed + 1);
    auto test_rows = generate(t, o.test_rows, id_space(o), o.seed + 2);
    all = ds::from_tensor_slices({train_rows.ids, train_rows.dense}, train_rows.labels);
    test = ds::from_tensor_slices({test_rows.ids, test_rows.dense}, test_rows.labels);
  }
  j.train = [all, seed = o.seed, batch = o.batch](const ds::input_context& ctx) {
    return all.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
      .shuffle(1 << 16, seed + static_cast<uint64_t>(ctx.input_pipeline_id))
      .batch(batch);
  };
  j.fit.epochs = o.epochs;
  j.fit.validation = test.batch(4096);
  j.spec.seed = o.seed;
  j.spec.partitioner = std::make_shared<md::fixed_shards>(2);
  j.spec.pull_rows = !o.whole_tables;
  return j;
}

ctr_optimum ctr_best(const ctr_options& o) {
  matrix logits, labels;
  if (drawn_data(o)) {
    logits.resize(o.test_rows, 1);
    labels.resize(o.test_rows, 1);
    for (int64_t i = 0; i < o.test_rows; ++i) {
      auto d = draw(o, 2, static_cast<uint64_t>(i));
      logits(i, 0) = d.logit;
      labels(i, 0) = d.label;
    }
  } else {
    truth t{o.seed};
    auto test = generate(t, o.test_rows, id_space(o), o.seed + 2);
    logits = std::move(test.logits);
    labels = std::move(test.labels);
  }
  ctr_optimum best;
  auto auc = md::auc();
  auc->update(logits, labels);
  best.auc = auc->result();
  best.log_loss = md::binary_cross_entropy()->compute(logits, labels, nullptr);
  best.values = 3600 * o.scale;
  // A dynamic table without id_bits keeps its values apart (the map is one to one below
  // 2^24, and ctr() refuses more values); a hash into 2^id_bits is not counted (about
  // values^2 / 2^(bits+1) pairs collide), nor are more than 2^26 values (the count walks
  // them all).
  if (o.dynamic) best.shared_buckets = o.id_bits > 0 ? -1 : 0;
  else best.shared_buckets = best.values > (int64_t{1} << 26) ? -1 : collisions(o.buckets, o.scale);
  return best;
}

}  // namespace actortrain::jobs
