// actortrain — the project's command line.
//
//   actortrain bench fashion-mnist [flags]   benchmark against a bare Eigen loop
//   actortrain bench consistency [flags]     the consistency modes side by side
//   actortrain bench sparse [flags]          embedding rows per second
//   actortrain bench transport [flags]       raw TCP against BASP between two processes
//   actortrain bench cluster [flags]         the main job embedded and as processes
//   actortrain bench faults [flags]          goodput under a schedule of kill -9
//   actortrain soak [flags]                  the fault simulator over many seeds
//   actortrain scale predict|calibrate|validate  scaling predicted on simulated time
//   actortrain node --example NAME ...       one task of a cluster of processes
//   actortrain launch --example NAME ...     a whole cluster of processes on 127.0.0.1
//   actortrain inspect DIR [flags]           what a checkpoint holds, validated
//   actortrain ledger check ... LEDGER...    exactly-once from the ps shards' ledgers
//   actortrain plot METRICS.jsonl --out DIR  figures of a run (gnuplot)
//   actortrain status [--cluster FILE]       a running cluster's live status
//   actortrain --help

#include "bench.hpp"
#include "flags.hpp"
#include "inspect.hpp"
#include "launch.hpp"
#include "ledger_check.hpp"
#include "plot.hpp"
#include "scale.hpp"
#include "soak.hpp"

#include <iostream>
#include <string>

namespace {

const char* usage =
  "usage: actortrain COMMAND [flags]\n"
  "\n"
  "commands:\n"
  "  bench fashion-mnist   train the Fashion-MNIST MLP as a bare Eigen loop, with the framework\n"
  "                        and with PyTorch, interleaved: samples/s, accuracy, time to 0.85 and\n"
  "                        0.88 test accuracy, ratios\n"
  "  bench consistency     train it with 2 workers in each consistency mode: samples/s, time\n"
  "                        to 0.85 and 0.88 test accuracy, staleness\n"
  "  bench sparse          embedding rows pulled and pushed per second, pulling the batch's\n"
  "                        rows against pulling whole tables\n"
  "  bench transport       push and pull tensors between two processes on 127.0.0.1: raw TCP\n"
  "                        against ActorTrain over BASP and on its tensor data plane, per size,\n"
  "                        and a sparse pull of 1M rows\n"
  "  bench cluster         the main job with 2 workers and 2 ps: embedded against 5 processes on\n"
  "                        127.0.0.1 and PyTorch (samples/s, accuracy, time to accuracy)\n"
  "  bench faults          the main job as processes, without faults and under a schedule of\n"
  "                        kill -9: goodput, steps redone, recovery times, exactly-once\n"
  "  soak                  run the fault simulator over many seeded fault plans and check\n"
  "                        exactly-once application and visitation\n"
  "  scale predict         the main job at 8 to 256 workers and 1 to 32 ps shards predicted on\n"
  "                        simulated time (the real protocol, a calibrated cost model):\n"
  "                        samples/s, staleness, the busiest shard; calibrate, validate\n"
  "  node                  play one task (chief, ps, worker) of a cluster of processes running\n"
  "                        a registered example (--cluster FILE or TF_CONFIG, --task TYPE:INDEX)\n"
  "  launch                start a whole cluster of processes on 127.0.0.1 running an example\n"
  "  inspect DIR           print a checkpoint (or a root's newest): step, optimizer, variables\n"
  "                        with partition statistics, run state and totals; validates every file\n"
  "  ledger check         judge what the ps shards applied (their ledgers, or a checkpoint's)\n"
  "                        against the example's data: every step exactly once on every\n"
  "                        partition, with the right batch\n"
  "  plot METRICS.jsonl    figures of a run from its metrics file (--out DIR): loss and accuracy\n"
  "                        per epoch and per step, samples/s per worker, staleness, a time line\n"
  "                        of failures and recoveries (PNG via gnuplot, with the data plotted)\n"
  "  status                a running cluster's live status: workers, ps shards, the last\n"
  "                        checkpoint, recent failures (--cluster FILE or TF_CONFIG)\n"
  "\n"
  "Run 'actortrain COMMAND ... --help' for a command's flags.\n";

}  // namespace

int main(int argc, char** argv) {
  return actortrain::tools::run_main("actortrain", [&]() -> int {
    if (argc < 2) {
      std::cerr << usage;
      return 2;
    }
    std::string cmd = argv[1];
    if (cmd == "-h" || cmd == "--help" || cmd == "help") {
      std::cout << usage;
      return 0;
    }
    if (cmd == "soak") return actortrain::tools::soak(argc, argv, 2);
    if (cmd == "scale") return actortrain::tools::scale_command(argc, argv, 2);
    if (cmd == "node") return actortrain::tools::node_command(argc, argv, 2);
    if (cmd == "launch") return actortrain::tools::launch_command(argc, argv, 2);
    if (cmd == "inspect") return actortrain::tools::inspect_command(argc, argv, 2);
    if (cmd == "ledger") return actortrain::tools::ledger_command(argc, argv, 2);
    if (cmd == "plot") return actortrain::tools::plot_command(argc, argv, 2);
    if (cmd == "status") return actortrain::tools::status_command(argc, argv, 2);
    if (cmd == "bench") {
      std::string what = argc > 2 ? argv[2] : "";
      if (what == "fashion-mnist") return actortrain::tools::bench_fashion_mnist(argc, argv, 3);
      if (what == "consistency") return actortrain::tools::bench_consistency(argc, argv, 3);
      if (what == "sparse") return actortrain::tools::bench_sparse(argc, argv, 3);
      if (what == "transport") return actortrain::tools::bench_transport(argc, argv, 3);
      if (what == "cluster") return actortrain::tools::bench_cluster(argc, argv, 3);
      if (what == "faults") return actortrain::tools::bench_faults(argc, argv, 3);
      if (what == "-h" || what == "--help") {
        std::cout << "usage: actortrain bench fashion-mnist|consistency|sparse|transport|cluster|faults [flags]\n";
        return 0;
      }
      const std::string known = "(fashion-mnist, consistency, sparse, transport, cluster, faults)";
      throw actortrain::tools::usage_error(what.empty() ? "bench: which benchmark? " + known
                                                        : "bench: unknown benchmark '" + what + "' " + known);
    }
    throw actortrain::tools::usage_error("unknown command '" + cmd + "' (see actortrain --help)");
  });
}
