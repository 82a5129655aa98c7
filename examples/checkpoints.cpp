// checkpoints — coordinated checkpoints of an embedded cluster, and resuming from them:
// the coordinator quiesces the workers every --checkpoint-every applied steps and writes
// every ps shard's partitions, the optimizer state and the run's state (the pipelines'
// positions, what was applied) under --checkpoint-dir. After a crash or Ctrl-C, the same
// command with --resume continues the run where its newest checkpoint left it, and
// sees every batch exactly once. The job is the registered fashion_mnist.
//
//   build/examples/checkpoints --checkpoint-dir ck --epochs 3    # ^C during epoch 2
//   build/examples/checkpoints --checkpoint-dir ck --epochs 3 --resume
//   build/tools/actortrain inspect ck                           # the newest checkpoint

#include <actortrain/actors/all.hpp>
#include <actortrain/actors/jobs/jobs.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <fmt/format.h>

#include <filesystem>
#include <system_error>

using actortrain::cli::range;

int main(int argc, char** argv) {
  return actortrain::cli::run_main("checkpoints", [&] {
    actortrain::jobs::fashion_mnist_options o;
    o.epochs = 3;
    int64_t checkpoint_every = 500;
    std::string checkpoint_dir;
    bool resume = false;
    int verbose = 2;
    actortrain::cli::flags f{"checkpoints",
                             "Trains the fashion_mnist job on an embedded cluster (2 ps shards, 2 workers) writing "
                             "coordinated checkpoints, or continues the run they hold (--resume)."};
    f.add("checkpoint-dir", checkpoint_dir, "where the checkpoints go (required; an empty or new directory)")
      .add("checkpoint-every", checkpoint_every, "applied steps between checkpoints (0: only the first and the last)",
           range<int64_t>{0, 1 << 30})
      .add("resume", resume, "continue the run checkpointed in --checkpoint-dir (same flags otherwise)")
      .add("epochs", o.epochs, "passes over the 60,000 training images", range<int>{1, 10000})
      .add("data-dir", o.data_dir, "directory with the four Fashion-MNIST .gz files")
      .add("verbose", verbose, "0 silent, 1 progress bar, 2 one line per epoch", range<int>{0, 2});
    if (!f.parse(argc, argv)) return 0;
    if (!f.positional().empty()) throw actortrain::cli::usage_error("unexpected argument '" + f.positional()[0] + "'");
    if (checkpoint_dir.empty()) throw actortrain::cli::usage_error("--checkpoint-dir DIR is required");
    std::error_code ec;
    if (!resume && std::filesystem::is_directory(checkpoint_dir, ec) && !std::filesystem::is_empty(checkpoint_dir, ec))
      throw actortrain::cli::usage_error("--checkpoint-dir " + checkpoint_dir +
                                         " is not empty: add --resume to continue the run it holds, or give an "
                                         "empty or new directory");

    auto j = actortrain::jobs::fashion_mnist(o);
    j.spec.num_ps = 2;
    j.spec.num_workers = 2;
    j.spec.checkpoint_dir = checkpoint_dir;
    j.spec.checkpoint_every = checkpoint_every;
    j.fit.verbose = verbose;
    if (resume) j.fit.resume_from = checkpoint_dir;

    caf::actor_system_config cfg;
    actortrain::configure(cfg);
    caf::actor_system sys{cfg};
    actortrain::cluster c{sys, j};
    auto h = c.fit(j.train, j.fit);
    fmt::print("test accuracy: {:.4f} (loss {:.4f}); checkpoints under {}\n", h.last("val_accuracy"),
               h.last("val_loss"), checkpoint_dir);
    return 0;
  });
}
