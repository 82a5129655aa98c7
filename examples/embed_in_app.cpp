// embed_in_app — the smallest complete application: the app owns its actor_system,
// configures it for ActorTrain, trains a small classifier on an embedded cluster of
// 2 ps shards and 2 workers, evaluates it and reads a trained variable.
//
//   build/examples/embed_in_app

#include <actortrain/actors/all.hpp>
#include <actortrain/dataset/all.hpp>
#include <actortrain/model/all.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <cstdio>

namespace ds = actortrain::dataset;
namespace md = actortrain::model;

int main(int argc, char** argv) {
  // No flags of its own: --help says what it does, anything else is refused (exit 2).
  actortrain::cli::flags f{"embed_in_app",
                           "Trains a small classifier on an embedded cluster of 2 ps shards and 2 workers inside "
                           "the application's own actor_system; exit 0 when its accuracy is above 0.9."};
  try {
    if (!f.parse(argc, argv)) return 0;
    if (!f.positional().empty()) throw actortrain::cli::usage_error("unexpected argument '" + f.positional()[0] + "'");
  } catch (const actortrain::cli::usage_error& e) {
    std::fprintf(stderr, "embed_in_app: error: %s\n", e.what());
    return 2;
  }

  caf::actor_system_config cfg;
  actortrain::configure(cfg);  // types, error category, flush-to-zero threads
  caf::actor_system sys{cfg};

  // Data: 2,000 points, label = whether x0 + x1 > 0.
  md::rng g{42};
  md::matrix x(2000, 2), y(2000, 1);
  for (int i = 0; i < 2000; ++i) {
    x(i, 0) = 2 * g.uniform() - 1;
    x(i, 1) = 2 * g.uniform() - 1;
    y(i, 0) = x(i, 0) + x(i, 1) > 0 ? 1.f : 0.f;
  }
  auto data = ds::from_tensor_slices({x}, y);

  actortrain::cluster_spec spec;
  spec.num_ps = 2;
  spec.num_workers = 2;
  auto net = md::model::sequential(2, {md::layers::dense(8, md::layers::activation::relu), md::layers::dense(2)});
  std::vector<md::metric_ptr> metrics;
  metrics.push_back(md::accuracy());
  actortrain::cluster c{sys, spec, net, *md::make_adam({0.01}), md::softmax_cross_entropy(), std::move(metrics)};

  // Each worker's input pipeline reads its own shard (input_pipeline_id is real).
  md::fit_options opts;
  opts.epochs = 5;
  opts.verbose = 2;
  c.fit([data](const ds::input_context& ctx) {
    return data.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).shuffle(1000, 1).batch(32);
  }, opts);

  auto result = c.evaluate(data.batch(500));
  std::printf("accuracy %.3f, loss %.3f\n", result["accuracy"], result["loss"]);
  auto vars = c.variables();
  std::printf("dense/kernel is %ld x %ld\n", static_cast<long>(vars[0].rows()), static_cast<long>(vars[0].cols()));
  return result["accuracy"] > 0.9 ? 0 : 1;
}
