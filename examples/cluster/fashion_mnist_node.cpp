// fashion_mnist_node — the same program on every task of a cluster of processes, as in
// TensorFlow: each process builds the same job and actortrain::run_node plays the task
// the command line (or TF_CONFIG) names. Start five terminals from the source tree:
//
//   build/examples/fashion_mnist_node --cluster examples/cluster/cluster.json --task ps:0
//   build/examples/fashion_mnist_node --cluster examples/cluster/cluster.json --task ps:1
//   build/examples/fashion_mnist_node --cluster examples/cluster/cluster.json --task worker:0
//   build/examples/fashion_mnist_node --cluster examples/cluster/cluster.json --task worker:1
//   build/examples/fashion_mnist_node --cluster examples/cluster/cluster.json --task chief:0
//
// (any order: each task waits up to timeouts.connect_ms for its peers). The chief prints
// the progress; every task prints the same history at the end.

#include <actortrain/actors/net/process.hpp>
#include <actortrain/dataset/all.hpp>
#include <actortrain/model/all.hpp>

namespace ds = actortrain::dataset;
namespace md = actortrain::model;

int main(int argc, char** argv) {
  using md::layers::activation;
  actortrain::job j;
  j.name = "fashion_mnist_node";
  j.structure = md::model::sequential(784, {md::layers::dense(256, activation::relu),
                                            md::layers::dense(128, activation::relu), md::layers::dense(10)});
  j.optimizer = md::make_adam({1e-3});
  j.loss = md::softmax_cross_entropy();
  j.metrics = [] {
    std::vector<md::metric_ptr> m;
    m.push_back(md::accuracy());
    return m;
  };
  // Called on the chief only (it hosts the input pipelines), once per pipeline.
  j.train = [](const ds::input_context& ctx) {
    static const auto train = ds::fashion_mnist(ds::split::train);
    return train.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
      .shuffle(60000, 1 + static_cast<uint64_t>(ctx.input_pipeline_id))
      .batch(128);
  };
  j.fit.epochs = 5;
  j.fit.verbose = 2;
  return actortrain::run_node(argc, argv, j);
}
