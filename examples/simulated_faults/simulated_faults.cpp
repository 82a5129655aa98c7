// simulated_faults — an application tests its own training under simulated faults: the
// Fashion-MNIST MLP (a slice of the data), as the job it runs, trained by an embedded
// cluster on CAF's deterministic test scheduler under random fault plans (lost,
// delayed and duplicated messages, crashed workers, ps shards and dataset shards, two
// fit calls). Each plan is judged from the ps partitions' ledgers against the data's
// own definition; a violation prints with the line that replays it.
//
//   build/examples/simulated_faults [--plans N] [--images N] [--data-dir DIR] [--sync]
//
// Its test (simulated_faults_test.cpp, beside it) runs 200 plans in the suite.

#include "fashion_mnist_job.hpp"

#include <actortrain/actors/cli/flags.hpp>
#include <actortrain/actors/sim/simulator.hpp>
#include <actortrain/dataset/fashion_mnist.hpp>

#include <string>

#include <fmt/format.h>

int main(int argc, char** argv) {
  return actortrain::cli::run_main("simulated_faults", [&] {
    int plans = 20;
    int64_t images = 512;
    std::string data_dir = actortrain::dataset::fashion_mnist_default_dir;
    bool sync = false;
    actortrain::cli::flags f{"simulated_faults",
                             "Trains the Fashion-MNIST MLP on its first --images images under --plans random fault "
                             "plans and checks each from the ps partitions' ledgers."};
    f.add("plans", plans, "fault plans (seeds 1 to N)", actortrain::cli::range<int>{1, 100000})
      .add("images", images, "training images", actortrain::cli::range<int64_t>{1, 60000})
      .add("data-dir", data_dir, "directory with the four Fashion-MNIST .gz files")
      .add("sync", sync, "synchronous training, and compare the values with a fault-free run")
      .footer("Exit status: 0 every plan kept exactly-once, 1 a violation (printed with its replay line), 2 bad "
              "flags.");
    if (!f.parse(argc, argv)) return 0;
    if (!f.positional().empty())
      throw actortrain::cli::usage_error("unexpected argument '" + f.positional().front() + "'");
    auto job = example::fashion_mnist_job(data_dir, images);
    if (sync) job.spec.consistency = actortrain::consistency_mode::sync();
    int bad = 0;
    for (int seed = 1; seed <= plans; ++seed) {
      actortrain::sim_options o;
      o.seed = static_cast<uint64_t>(seed);
      o.fits = 2;
      auto r = actortrain::simulate(job, o);
      fmt::print("plan {}: {} — {} steps exactly once, {} faults injected{}\n", seed, r.ok() ? "ok" : "VIOLATION",
                 r.steps, r.injected.size(), r.values_compared ? ", values equal to the fault-free run's" : "");
      if (!r.ok()) {
        ++bad;
        fmt::print("{}  replay: {}\n", r.report(), r.replay);
      }
    }
    fmt::print("{} of {} plans kept exactly-once{}\n", plans - bad, plans, sync ? " and the fault-free values" : "");
    return bad == 0 ? 0 : 1;
  });
}
