// linear_regression_cluster — TensorFlow's ParameterServerStrategy tutorial on the
// embedded cluster: 1000 x 5 inputs of ones, targets of ones, Dense(10) -> Dense(1),
// Adam 0.001, mean squared error, batch 20, fit(epochs=5, steps_per_epoch=10) called 20
// times. Each call is a new run on the same variables: the loss keeps falling after the
// first call (TF's tutorial loop trains 20 times, and so does this).
//
//   build/examples/linear_regression_cluster [--calls=20] [--ps=2] [--workers=2]

#include <actortrain/actors/all.hpp>
#include <actortrain/dataset/all.hpp>
#include <actortrain/model/all.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <fmt/format.h>

#include <actortrain/actors/cli/flags.hpp>

namespace ds = actortrain::dataset;
namespace md = actortrain::model;

int main(int argc, char** argv) {
  return actortrain::cli::run_main("linear_regression_cluster", [&] {
    int calls = 20, ps = 2, workers = 2;
    actortrain::cli::flags f{"linear_regression_cluster",
                               "The TensorFlow PS-strategy tutorial's loop of 20 fit calls on an embedded cluster."};
    f.add("calls", calls, "how many times fit is called").add("ps", ps, "ps shards").add("workers", workers, "workers");
    if (!f.parse(argc, argv)) return 0;
    if (calls < 1 || ps < 1 || workers < 1) throw actortrain::cli::usage_error("--calls, --ps, --workers must be >= 1");

    caf::actor_system_config cfg;
    actortrain::configure(cfg);
    caf::actor_system sys{cfg};
    actortrain::cluster_spec spec;
    spec.num_ps = ps;
    spec.num_workers = workers;
    actortrain::cluster c{sys, spec, md::model::sequential(5, {md::layers::dense(10), md::layers::dense(1)}),
                          *md::make_adam({1e-3}), md::mean_squared_error()};
    md::matrix x = md::matrix::Ones(1000, 5), y = md::matrix::Ones(1000, 1);
    auto data = ds::from_tensor_slices({x}, y);
    auto dataset_fn = [data](const ds::input_context& ctx) {
      return data.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).shuffle(10, 1).repeat().batch(20);
    };
    md::fit_options opts;
    opts.epochs = 5;
    opts.steps_per_epoch = 10;
    opts.verbose = 0;
    for (int call = 1; call <= calls; ++call)
      fmt::print("fit call {:>2}: loss {:.6f}\n", call, c.fit(dataset_fn, opts).last("loss"));
    return 0;
  });
}
