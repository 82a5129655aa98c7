// linear_regression_cluster — TensorFlow's ParameterServerStrategy tutorial on the
// embedded cluster: the registered tutorial job (1000 x 5 inputs of ones, targets of
// ones, Dense(10) -> Dense(1), Adam 0.001, mean squared error, batch 20,
// fit(epochs=5, steps_per_epoch=10)) called 20 times. Each call is a new run on the
// same variables: the loss keeps falling after the first call.
//
//   build/examples/linear_regression_cluster [--calls 20] [--ps 2] [--workers 2]

#include <actortrain/actors/all.hpp>
#include <actortrain/actors/jobs/jobs.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <fmt/format.h>

using actortrain::cli::range;

int main(int argc, char** argv) {
  return actortrain::cli::run_main("linear_regression_cluster", [&] {
    int calls = 20, ps = 2, workers = 2;
    actortrain::cli::flags f{"linear_regression_cluster",
                             "TensorFlow's ParameterServerStrategy tutorial on an embedded cluster: fit called 20 "
                             "times, the loss printed after each call."};
    f.add("calls", calls, "how many times fit is called", range<int>{1, 100000})
      .add("ps", ps, "parameter-server shards", range<int>{1, 64})
      .add("workers", workers, "workers", range<int>{1, 256});
    if (!f.parse(argc, argv)) return 0;
    if (!f.positional().empty()) throw actortrain::cli::usage_error("unexpected argument '" + f.positional()[0] + "'");

    auto j = actortrain::jobs::tutorial();
    j.spec.num_ps = ps;
    j.spec.num_workers = workers;
    j.fit.verbose = 0;
    caf::actor_system_config cfg;
    actortrain::configure(cfg);
    caf::actor_system sys{cfg};
    actortrain::cluster c{sys, j};
    for (int call = 1; call <= calls; ++call)
      fmt::print("fit call {:>2}: loss {:.6f}\n", call, c.fit(j.train, j.fit).last("loss"));
    return 0;
  });
}
