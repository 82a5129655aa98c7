// linear_regression — the tutorial TensorFlow users start from, in one process: the
// registered tutorial job (actortrain::jobs::tutorial: 1000 x 5 inputs of ones, targets
// of ones, Dense(10) -> Dense(1), Adam 0.001, mean squared error, batch 20,
// fit(epochs=5, steps_per_epoch=10)) fitted 20 times by model::trainer. Each call
// continues training: the loss keeps falling after the first.
//
//   build/examples/linear_regression [--calls 20] [--verbose 0]

#include <actortrain/actors/cli/flags.hpp>
#include <actortrain/actors/jobs/jobs.hpp>
#include <actortrain/dataset/all.hpp>
#include <actortrain/model/all.hpp>

#include <fmt/format.h>

namespace md = actortrain::model;
using actortrain::cli::range;

int main(int argc, char** argv) {
  return actortrain::cli::run_main("linear_regression", [&] {
    int calls = 20, verbose = 0;
    actortrain::jobs::tutorial_options o;
    actortrain::cli::flags f{"linear_regression",
                             "Fits Dense(10) -> Dense(1) to all-ones data with 20 calls of fit, as the TensorFlow "
                             "tutorial does, printing the loss after each call."};
    f.add("calls", calls, "how many times fit is called", range<int>{1, 100000})
      .add("seed", o.seed, "seed of initialization and shuffling")
      .add("verbose", verbose, "progress of each fit call: 0 silent, 1 bar, 2 a line per epoch", range<int>{0, 2});
    if (!f.parse(argc, argv)) return 0;
    if (!f.positional().empty()) throw actortrain::cli::usage_error("unexpected argument '" + f.positional()[0] + "'");

    auto j = actortrain::jobs::tutorial(o);
    md::trainer t{j.structure, j.optimizer->clone(), j.loss, o.seed};
    j.fit.verbose = verbose;
    auto data = j.train(actortrain::dataset::input_context{});
    for (int call = 1; call <= calls; ++call)
      fmt::print("fit call {:>2}: loss {:.6f}\n", call, t.fit(data, j.fit).last("loss"));
    return 0;
  });
}
