// fashion_mnist — the main job: asynchronous parameter-server training embedded in one
// process. Two ps shards, two workers and a coordinator (flags change the shape) train
// an MLP 784-256-128-10 on the real Fashion-MNIST; each worker reads its own input
// pipeline (input_context.input_pipeline_id), progress is printed per epoch, and the
// final test accuracy at the end.
//
//   build/examples/fashion_mnist                       # tools/quickstart runs this
//   build/examples/fashion_mnist --ps=1 --workers=1 --epochs=3 --metrics=run.jsonl
//   build/examples/fashion_mnist --checkpoint-dir=ck --checkpoint-every=500
//       --kill-worker-at=300 --kill-ps-at=1500      (one line: faults, survived; then, after ^C:)
//   build/examples/fashion_mnist --checkpoint-dir=ck --checkpoint-every=500 --resume

#include <actortrain/actors/all.hpp>
#include <actortrain/actors/sim/fault_plan.hpp>
#include <actortrain/dataset/all.hpp>
#include <actortrain/model/all.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <fmt/format.h>

#include <actortrain/actors/cli/flags.hpp>

namespace ds = actortrain::dataset;
namespace md = actortrain::model;
using md::layers::activation;

int main(int argc, char** argv) {
  return actortrain::cli::run_main("fashion_mnist", [&] {
    int ps = 2, workers = 2, epochs = 10, verbose = 1, threads = 2, spe = 1, pull_every = 1, push_every = 1;
    bool pull_ahead = false, resume = false;
    int64_t kill_worker_at = 0, kill_ps_at = 0;
    int64_t batch = 128;
    double lr = 1e-3, local_lr = 0;
    uint64_t seed = 1;
    std::string data_dir = ds::fashion_mnist_default_dir, metrics, partitioner, checkpoint_dir, consistency = "async";
    int64_t checkpoint_every = 0, early_stopping = 0;
    std::string csv_log, lr_schedule = "none", best_dir;
    actortrain::cli::flags f{"fashion_mnist",
                               "Trains an MLP 784-256-128-10 on Fashion-MNIST with an embedded parameter-server "
                               "cluster\n(asynchronous unless --consistency says otherwise), and prints the test accuracy."};
    f.add("ps", ps, "parameter-server shards")
      .add("workers", workers, "workers (each with its own input pipeline)")
      .add("epochs", epochs, "passes over the 60,000 training images")
      .add("batch", batch, "batch size per step")
      .add("lr", lr, "Adam learning rate")
      .add("seed", seed, "seed of initialization and shuffling")
      .add("steps-per-execution", spe, "steps per task sent to a worker")
      .add("pull-every", pull_every, "pull the parameters every N training steps and reuse them in between (Downpour's "
           "n_fetch; async only; staleness reported)")
      .add("local-lr", local_lr, "with --pull-every: move the reused copy by -X x each step's gradient between pulls "
                                 "(Downpour's local update, plain SGD; ~0.3 here; 0: off)")
      .add("push-every", push_every, "push the mean gradient of N steps once (Downpour's n_push; async only; "
                                     "--steps-per-execution defaults to N)")
      .add("pull-ahead", pull_ahead, "fetch the next step's parameters while a step computes (faster, staleness +1)")
      .add("consistency", consistency,
           "async, bounded_staleness(s) (no step more than s steps ahead of the oldest unapplied one) or sync "
           "(rounds of one batch per worker, applied as one mean)")
      .add("partitioner", partitioner, "split variables over the ps shards: fixed_shards(n), min_size(bytes, n), max_size(bytes)")
      .add("checkpoint-dir", checkpoint_dir, "write coordinated checkpoints here (an empty or new directory)")
      .add("checkpoint-every", checkpoint_every, "applied steps between checkpoints (0: only the step-0 one and the last)")
      .add("resume", resume, "continue the run checkpointed in --checkpoint-dir (same flags otherwise)")
      .add("kill-worker-at", kill_worker_at, "kill worker 0 at its Nth pull; it is replaced (0: never)")
      .add("kill-ps-at", kill_ps_at,
           "kill ps shard 0 when its Nth push arrives; it is respawned and every shard rolls back to the last "
           "checkpoint (needs --checkpoint-dir; 0: never)")
      .add("threads", threads, "CAF scheduler threads")
      .add("metrics", metrics, "write JSON-lines metrics to this file")
      .add("data-dir", data_dir, "directory with the four Fashion-MNIST .gz files")
      .add("early-stopping", early_stopping,
           "stop when val_loss has not improved for N epochs, and keep the best epoch's variables (0: off)")
      .add("lr-schedule", lr_schedule, "learning rate per epoch from --lr: none, cosine (to 0 at the last epoch), step "
                                       "(halved every 3 epochs) or exponential (x 0.8 per epoch)")
      .add("best-checkpoint", best_dir, "write a checkpoint here at each epoch end with the best val_accuracy")
      .add("csv-log", csv_log, "append one CSV row per epoch (loss, accuracy, val_*) to this file")
      .add("verbose", verbose, "0 silent, 1 progress bar, 2 one line per epoch");
    if (!f.parse(argc, argv)) return 0;
    using actortrain::cli::usage_error;
    if (ps < 1 || workers < 1) throw usage_error("--ps and --workers must be >= 1");
    if (epochs < 1 || batch < 1 || spe < 1 || threads < 1 || pull_every < 1 || push_every < 1)
      throw usage_error("--epochs, --batch, --steps-per-execution, --threads, --pull-every and --push-every must be >= 1");
    if (push_every > 1 && spe == 1) spe = push_every;
    if (!(lr > 0)) throw usage_error("--lr must be > 0");
    if (!(local_lr >= 0) || (local_lr > 0 && pull_every == 1))
      throw usage_error("--local-lr must be >= 0, and needs --pull-every > 1");
    if (checkpoint_every < 0) throw usage_error("--checkpoint-every must be >= 0");
    if (early_stopping < 0) throw usage_error("--early-stopping must be >= 0");
    if (lr_schedule != "none" && lr_schedule != "cosine" && lr_schedule != "step" && lr_schedule != "exponential")
      throw usage_error("--lr-schedule must be none, cosine, step or exponential, not '" + lr_schedule + "'");
    if (!best_dir.empty() && best_dir == checkpoint_dir)
      throw usage_error("--best-checkpoint must differ from --checkpoint-dir");
    if (kill_worker_at < 0 || kill_ps_at < 0) throw usage_error("--kill-worker-at and --kill-ps-at must be >= 0");
    if ((kill_ps_at > 0 || resume) && checkpoint_dir.empty())
      throw usage_error("--kill-ps-at and --resume need --checkpoint-dir");

    auto train = ds::fashion_mnist(ds::split::train, data_dir);
    auto test = ds::fashion_mnist(ds::split::test, data_dir);

    caf::actor_system_config cfg;
    actortrain::configure(cfg);
    cfg.set("scheduler.max-threads", threads);
    caf::actor_system sys{cfg};

    actortrain::cluster_spec spec;
    spec.num_ps = ps;
    spec.num_workers = workers;
    spec.steps_per_execution = spe;
    spec.pull_every = pull_every;
    spec.local_learning_rate = local_lr;
    spec.push_every = push_every;
    spec.seed = seed;
    spec.pull_ahead = pull_ahead;
    spec.partitioner = partitioner;
    spec.consistency = consistency;
    spec.checkpoint_dir = checkpoint_dir;
    spec.checkpoint_every = checkpoint_every;
    spec.metrics_file = metrics;
    std::vector<actortrain::fault_rule> faults;
    using actortrain::actor_role;
    using actortrain::delivery;
    if (kill_worker_at > 0)
      faults.push_back({delivery::kind::crash, actor_role::worker, 0, actor_role::ps, -1, "pull",
                        static_cast<uint64_t>(kill_worker_at), 1, {}});
    if (kill_ps_at > 0)
      faults.push_back({delivery::kind::kill_receiver, actor_role::worker, -1, actor_role::ps, 0, "push",
                        static_cast<uint64_t>(kill_ps_at), 1, {}});
    if (!faults.empty()) {
      spec.faults = std::make_shared<actortrain::fault_plan>(std::move(faults));
      spec.restart_lost_workers = true;
    }
    auto mlp = md::model::sequential(784, {md::layers::dense(256, activation::relu),
                                           md::layers::dense(128, activation::relu), md::layers::dense(10)});
    std::vector<md::metric_ptr> ms;
    ms.push_back(md::accuracy());
    actortrain::cluster c{sys, spec, mlp, *md::make_adam({lr}), md::softmax_cross_entropy(), std::move(ms)};

    // dataset_fn: each input pipeline reads its own shard of the training set.
    auto dataset_fn = [train, seed, batch](const ds::input_context& ctx) {
      return train.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        .shuffle(60000, seed + static_cast<uint64_t>(ctx.input_pipeline_id))
        .batch(batch);
    };
    if (early_stopping > 0)
      c.add_callback(std::make_shared<actortrain::early_stopping>(
        actortrain::early_stopping_options{"val_loss", early_stopping, 0, "min", true}));
    if (lr_schedule == "cosine") c.add_callback(actortrain::learning_rate_schedule(actortrain::cosine_decay(lr, epochs)));
    if (lr_schedule == "step") c.add_callback(actortrain::learning_rate_schedule(actortrain::step_decay(lr, 0.5, 3)));
    if (lr_schedule == "exponential")
      c.add_callback(actortrain::learning_rate_schedule(actortrain::exponential_decay(lr, 0.8)));
    if (!best_dir.empty())
      c.add_callback(std::make_shared<actortrain::model_checkpoint>(
        actortrain::model_checkpoint_options{best_dir, 0, "val_accuracy", "max", 1}));
    if (!csv_log.empty()) c.add_callback(actortrain::csv_logger(csv_log));
    md::fit_options opts;
    opts.epochs = epochs;
    opts.verbose = verbose;
    opts.validation = test.batch(1000);
    if (resume) opts.resume_from = checkpoint_dir;
    auto h = c.fit(dataset_fn, opts);
    // With early stopping the variables are the best epoch's, not the last one's.
    auto final = early_stopping > 0 ? c.evaluate(test.batch(1000))
                                    : std::map<std::string, double>{{"accuracy", h.last("val_accuracy")},
                                                                    {"loss", h.last("val_loss")}};
    fmt::print("test accuracy: {:.4f} (loss {:.4f}) after {} epochs on {} ps shard(s) and {} worker(s), {}\n",
               final.at("accuracy"), final.at("loss"), h["loss"].size(), ps, workers, consistency);
    return 0;
  });
}
