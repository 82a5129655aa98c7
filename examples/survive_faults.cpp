// survive_faults — an embedded cluster survives real faults, injected through its fault
// plan (sim/fault_plan.hpp) in the middle of training the registered fashion_mnist
// job: worker 0 crashes at its Nth push and is replaced (its steps are re-queued, none
// applied twice), and ps shard 0 is killed when its Nth push arrives: it is respawned
// and every shard rolls back to the last coordinated checkpoint. The metrics file
// records each failure and recovery (actortrain plot draws them on a time line).
//
//   build/examples/survive_faults --kill-worker-at 300 --kill-ps-at 600 --checkpoint-dir ck --metrics run.jsonl
//   build/tools/actortrain plot run.jsonl --out figures

#include <actortrain/actors/all.hpp>
#include <actortrain/actors/jobs/jobs.hpp>
#include <actortrain/actors/sim/fault_plan.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <fmt/format.h>

#include <cstdlib>
#include <stdexcept>

using actortrain::cli::range;

int main(int argc, char** argv) {
  return actortrain::cli::run_main("survive_faults", [&] {
    actortrain::jobs::fashion_mnist_options o;
    o.epochs = 2;
    int64_t kill_worker_at = 300, kill_ps_at = 600, checkpoint_every = 200;  // 2 epochs: 940 steps
    std::string checkpoint_dir, metrics;
    int verbose = 2;
    actortrain::cli::flags f{"survive_faults",
                             "Trains the fashion_mnist job on an embedded cluster (2 ps shards, 2 workers) while a "
                             "worker crashes and a ps shard is killed, and prints the test accuracy it still reaches."};
    f.add("epochs", o.epochs, "passes over the 60,000 training images", range<int>{1, 10000})
      .add("kill-worker-at", kill_worker_at, "crash worker 0 at its Nth push; it is replaced (0: never)",
           range<int64_t>{0, int64_t{1} << 40})
      .add("kill-ps-at", kill_ps_at,
           "kill ps shard 0 when its Nth push arrives; it is respawned and every shard rolls back to the last "
           "checkpoint (0: never)",
           range<int64_t>{0, int64_t{1} << 40})
      .add("checkpoint-dir", checkpoint_dir,
           "coordinated checkpoints here, an empty or new directory (default: a new one under /tmp)")
      .add("checkpoint-every", checkpoint_every, "applied steps between checkpoints", range<int64_t>{1, 1 << 30})
      .add("metrics", metrics, "write JSON-lines metrics (failures and recoveries included) to this file")
      .add("data-dir", o.data_dir, "directory with the four Fashion-MNIST .gz files")
      .add("verbose", verbose, "0 silent, 1 progress bar, 2 one line per epoch", range<int>{0, 2});
    if (!f.parse(argc, argv)) return 0;
    if (!f.positional().empty()) throw actortrain::cli::usage_error("unexpected argument '" + f.positional()[0] + "'");
    if (kill_ps_at > 0 && checkpoint_dir.empty()) {  // the shards roll back to a checkpoint
      char dir[] = "/tmp/survive_faults-XXXXXX";
      if (!::mkdtemp(dir)) throw std::runtime_error("cannot create a checkpoint directory under /tmp");
      checkpoint_dir = dir;
      fmt::print("checkpoints under {}\n", checkpoint_dir);
    }

    auto j = actortrain::jobs::fashion_mnist(o);
    j.spec.num_ps = 2;
    j.spec.num_workers = 2;
    j.spec.checkpoint_dir = checkpoint_dir;
    j.spec.checkpoint_every = checkpoint_every;
    j.spec.metrics_file = metrics;
    j.fit.verbose = verbose;
    using actortrain::actor_role;
    using actortrain::delivery;
    std::vector<actortrain::fault_rule> faults;
    if (kill_worker_at > 0)
      faults.push_back({delivery::kind::crash, actor_role::worker, 0, actor_role::ps, -1, "push",
                        static_cast<uint64_t>(kill_worker_at), 1, {}});
    if (kill_ps_at > 0)
      faults.push_back({delivery::kind::kill_receiver, actor_role::worker, -1, actor_role::ps, 0, "push",
                        static_cast<uint64_t>(kill_ps_at), 1, {}});
    if (!faults.empty()) {
      j.spec.faults = std::make_shared<actortrain::fault_plan>(std::move(faults));
      j.spec.restart_lost_workers = true;  // a crashed worker is replaced
    }

    caf::actor_system_config cfg;
    actortrain::configure(cfg);
    caf::actor_system sys{cfg};
    actortrain::cluster c{sys, j};
    auto h = c.fit(j.train, j.fit);
    fmt::print("test accuracy: {:.4f} (loss {:.4f}) after {} epochs, through the faults\n", h.last("val_accuracy"),
               h.last("val_loss"), h["loss"].size());
    return 0;
  });
}
