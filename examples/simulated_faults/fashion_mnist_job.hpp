#pragma once
// The Fashion-MNIST MLP as an application defines its training — model, optimizer, loss,
// metrics, input pipelines, cluster — in one actortrain::job value: the same value runs
// as a cluster of processes (run_node) and is tested under simulated faults (simulate).
// `images` takes the first images of the training set (a slice for tests), and a quarter
// as many test images for validation.

#include <actortrain/actors/cluster/job.hpp>
#include <actortrain/dataset/all.hpp>
#include <actortrain/model/all.hpp>

#include <string>

namespace example {

inline actortrain::job fashion_mnist_job(const std::string& data_dir, int64_t images) {
  namespace ds = actortrain::dataset;
  namespace md = actortrain::model;
  using md::layers::activation;
  actortrain::job j;
  j.name = "fashion_mnist";
  j.structure = md::model::sequential(784, {md::layers::dense(256, activation::relu),
                                            md::layers::dense(128, activation::relu), md::layers::dense(10)});
  j.optimizer = md::make_adam({1e-3});
  j.loss = md::softmax_cross_entropy();
  j.metrics = [] {
    std::vector<md::metric_ptr> m;
    m.push_back(md::accuracy());
    return m;
  };
  auto train = ds::fashion_mnist(ds::split::train, data_dir).take(images);
  j.train = [train, images](const ds::input_context& ctx) {
    return train.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
      .shuffle(images, 1 + static_cast<uint64_t>(ctx.input_pipeline_id))
      .batch(64);
  };
  j.fit.epochs = 2;
  j.fit.validation = ds::fashion_mnist(ds::split::test, data_dir).take(images / 4).batch(128);
  j.spec.num_ps = 2;
  j.spec.num_workers = 2;
  return j;
}

}  // namespace example
