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

#include <actortrain/actors/sim/simulator.hpp>
#include <actortrain/dataset/fashion_mnist.hpp>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include <fmt/format.h>

int main(int argc, char** argv) {
  int plans = 20;
  int64_t images = 512;
  std::string data_dir = actortrain::dataset::fashion_mnist_default_dir;
  bool sync = false;
  auto usage = [] {
    std::cout << "usage: simulated_faults [--plans N] [--images N] [--data-dir DIR] [--sync]\n"
                 "  Trains the Fashion-MNIST MLP on its first N images (default 512) under N random fault\n"
                 "  plans (default 20) and checks each from the ps partitions' ledgers; --sync also\n"
                 "  compares the values with a fault-free run. Exit 1 on a violation, 2 on bad flags.\n";
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* flag) -> long long {
      if (i + 1 >= argc) {
        std::cerr << "simulated_faults: " << flag << " needs a value\n";
        std::exit(2);
      }
      char* end = nullptr;
      auto v = std::strtoll(argv[++i], &end, 10);
      if (*end != '\0' || v < 1) {
        std::cerr << "simulated_faults: " << flag << ": '" << argv[i] << "' is not a whole number >= 1\n";
        std::exit(2);
      }
      return v;
    };
    if (a == "--plans") {
      plans = static_cast<int>(value("--plans"));
    } else if (a == "--images") {
      images = value("--images");
    } else if (a == "--data-dir" && i + 1 < argc) {
      data_dir = argv[++i];
    } else if (a == "--sync") {
      sync = true;
    } else if (a == "--help" || a == "-h") {
      usage();
      return 0;
    } else {
      std::cerr << "simulated_faults: unknown flag '" << a << "'\n";
      usage();
      return 2;
    }
  }
  try {
    auto job = example::fashion_mnist_job(data_dir, images);
    if (sync) job.spec.consistency = "sync";
    int bad = 0;
    for (int seed = 1; seed <= plans; ++seed) {
      actortrain::sim_options o;
      o.seed = static_cast<uint64_t>(seed);
      o.fits = 2;
      auto r = actortrain::simulate(job, o);
      fmt::print("plan {}: {} — {} steps exactly once, {} faults injected{}\n", seed, r.ok() ? "ok" : "VIOLATION", r.steps,
                 r.injected.size(), r.values_compared ? ", values equal to the fault-free run's" : "");
      if (!r.ok()) {
        ++bad;
        fmt::print("{}  replay: {}\n", r.report(), r.replay);
      }
    }
    fmt::print("{} of {} plans kept exactly-once{}\n", plans - bad, plans, sync ? " and the fault-free values" : "");
    return bad == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "simulated_faults: " << e.what() << "\n";
    return 1;
  }
}
