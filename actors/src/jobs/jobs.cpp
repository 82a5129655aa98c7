// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// The registered jobs linear, fashion_mnist and tutorial (jobs.hpp), each the one
// definition of its model, optimizer, loss, metrics and input pipelines.
#include <actortrain/actors/jobs/jobs.hpp>

#include <actortrain/dataset/all.hpp>
#include <actortrain/model/all.hpp>

#include <fmt/format.h>

#include <memory>
#include <mutex>
#include <optional>
#include <random>

namespace actortrain::jobs {

namespace ds = dataset;
namespace md = model;
using md::layers::activation;

namespace {

std::function<std::vector<md::metric_ptr>()> accuracy_only() {
  return [] {
    std::vector<md::metric_ptr> m;
    m.push_back(md::accuracy());
    return m;
  };
}

}  // namespace

job linear(const linear_options& o) {
  std::mt19937_64 gen{o.seed};
  std::normal_distribution<float> normal{0.0f, 1.0f};
  md::matrix w(o.features, 1);
  for (int64_t i = 0; i < o.features; ++i) w(i, 0) = normal(gen);
  float b = normal(gen);
  auto draw = [&](int64_t n) {
    md::matrix x(n, o.features), y(n, 1);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < o.features; ++c) x(r, c) = normal(gen);
      y(r, 0) = (x.row(r) * w)(0, 0) + b + static_cast<float>(o.noise) * normal(gen);
    }
    return ds::from_tensor_slices({x}, y);
  };
  auto data = draw(o.examples);
  job j;
  j.name = fmt::format("linear(features={}, examples={}, seed={})", o.features, o.examples, o.seed);
  j.structure = md::model::sequential(o.features, {md::layers::dense(1)});
  j.optimizer = md::make_sgd({o.learning_rate});
  j.loss = md::mean_squared_error();
  j.train = [data, batch = o.batch, seed = o.seed](const ds::input_context& ctx) {
    return data.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
      .shuffle(1000, seed + static_cast<uint64_t>(ctx.input_pipeline_id))
      .batch(batch);
  };
  j.fit.epochs = o.epochs;
  j.fit.validation = draw(500).batch(100);  // held out: val_loss ends near noise^2
  j.spec.seed = o.seed;
  return j;
}

job fashion_mnist(const fashion_mnist_options& o) {
  job j;
  j.name = o.limit > 0 ? fmt::format("fashion_mnist(limit={})", o.limit) : "fashion_mnist";
  j.structure = md::model::sequential(784, {md::layers::dense(256, activation::relu),
                                            md::layers::dense(128, activation::relu), md::layers::dense(10)});
  md::adam_options adam;
  adam.learning_rate = o.learning_rate;
  adam.use_ema = o.use_ema;
  adam.ema_momentum = o.ema_momentum;
  adam.ema_every = o.ema_every;
  j.optimizer = md::make_adam(adam);
  j.loss = md::softmax_cross_entropy();
  j.metrics = accuracy_only();
  // The training images: given in memory, or read from data_dir once, by the first
  // pipeline built (only the tasks that build pipelines read them).
  struct lazy {
    std::once_flag once;
    std::optional<ds::dataset> train;
  };
  auto images = std::make_shared<lazy>();
  auto cut = [limit = o.limit](const ds::dataset& all) { return limit > 0 ? all.take(limit) : all; };
  if (o.train_arrays) {
    std::call_once(images->once, [&] {
      images->train = cut(ds::from_tensor_slices({o.train_arrays->images}, o.train_arrays->labels));
    });
  }
  j.train = [images, cut, data_dir = o.data_dir, limit = o.limit, seed = o.seed,
             batch = o.batch](const ds::input_context& ctx) {
    std::call_once(images->once, [&] { images->train = cut(ds::fashion_mnist(ds::split::train, data_dir)); });
    return images->train->shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
      .shuffle(limit > 0 ? limit : 60000, seed + static_cast<uint64_t>(ctx.input_pipeline_id))
      .batch(batch);
  };
  j.fit.epochs = o.epochs;
  auto test = o.test_arrays ? ds::from_tensor_slices({o.test_arrays->images}, o.test_arrays->labels)
                            : ds::fashion_mnist(ds::split::test, o.data_dir);
  j.fit.validation = (o.limit > 0 ? test.take(std::max<int64_t>(1, o.limit / 4)) : test).batch(1000);
  j.spec.seed = o.seed;
  j.spec.compensation = o.compensation;
  j.spec.steps_per_execution = o.steps_per_execution;
  return j;
}

job tutorial(const tutorial_options& o) {
  md::matrix x = md::matrix::Ones(1000, 5), y = md::matrix::Ones(1000, 1);
  auto data = ds::from_tensor_slices({x}, y);
  job j;
  j.name = "tutorial";
  j.structure = md::model::sequential(5, {md::layers::dense(10), md::layers::dense(1)});
  j.optimizer = md::make_adam({o.learning_rate});
  j.loss = md::mean_squared_error();
  j.train = [data, seed = o.seed](const ds::input_context& ctx) {
    return data.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).shuffle(10, seed).repeat().batch(20);
  };
  j.fit.epochs = o.epochs;
  j.fit.steps_per_epoch = o.steps_per_epoch;
  j.spec.seed = o.seed;
  return j;
}

}  // namespace actortrain::jobs
