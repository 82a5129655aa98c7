// linear_regression — the tutorial TensorFlow users start from, in one process.
//
// Shows: fit called repeatedly on the same trainer (each call continues training: the
// loss keeps falling after the first), an infinite dataset with steps_per_epoch.
// As in TF's ParameterServerStrategy tutorial: 1000 x 5 inputs of ones, targets of
// ones, Dense(10) -> Dense(1), Adam 0.001, mean squared error, global batch 20,
// fit(epochs=5, steps_per_epoch=10) called 20 times.
//
//   build/examples/linear_regression [--calls=20] [--verbose=0]

#include <actortrain/dataset/all.hpp>
#include <actortrain/model/all.hpp>

#include <fmt/format.h>

#include <actortrain/actors/cli/flags.hpp>

namespace ds = actortrain::dataset;
namespace md = actortrain::model;

int main(int argc, char** argv) {
  return actortrain::cli::run_main("linear_regression", [&] {
    int calls = 20, verbose = 0;
    uint64_t seed = 1;
    actortrain::cli::flags f{"linear_regression",
                               "Fits Dense(10) -> Dense(1) to all-ones data with 20 calls of fit, as "
                               "the TensorFlow tutorial does, printing the loss after each call."};
    f.add("calls", calls, "how many times fit is called")
      .add("seed", seed, "seed of initialization and shuffling")
      .add("verbose", verbose, "progress of each fit call: 0 silent, 1 bar, 2 a line per epoch");
    if (!f.parse(argc, argv)) return 0;
    if (calls < 1) throw actortrain::cli::usage_error("--calls must be >= 1");

    md::matrix x = md::matrix::Ones(1000, 5), y = md::matrix::Ones(1000, 1);
    auto data = ds::from_tensor_slices({x}, y).shuffle(10, seed).repeat().batch(20);
    auto net = md::model::sequential(5, {md::layers::dense(10), md::layers::dense(1)});
    md::trainer t{net, md::make_adam({1e-3}), md::mean_squared_error(), seed};
    md::fit_options opts;
    opts.epochs = 5;
    opts.steps_per_epoch = 10;
    opts.verbose = verbose;
    for (int call = 1; call <= calls; ++call) {
      auto h = t.fit(data, opts);
      fmt::print("fit call {:>2}: loss {:.6f}\n", call, h.last("loss"));
    }
    return 0;
  });
}
