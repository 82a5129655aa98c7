// fashion_mnist — the main job: asynchronous parameter-server training embedded in one
// process. Two ps shards, two workers and a coordinator train the registered
// fashion_mnist job (an MLP 784-256-128-10 with Adam; actortrain::jobs::fashion_mnist)
// on the real Fashion-MNIST: each worker reads its own input pipeline
// (input_context.input_pipeline_id), progress is printed per epoch, and the test
// accuracy at the end. Callbacks, faults and checkpoints each have an example of their
// own (callbacks.cpp, survive_faults.cpp, checkpoints.cpp).
//
//   build/examples/fashion_mnist                       # tools/quickstart runs this
//   build/examples/fashion_mnist --ps 1 --workers 1 --epochs 3 --metrics run.jsonl
//   build/examples/fashion_mnist --consistency sync --partitioner "fixed_shards(2)"

#include <actortrain/actors/all.hpp>
#include <actortrain/actors/jobs/jobs.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <fmt/format.h>

using actortrain::cli::range;

int main(int argc, char** argv) {
  return actortrain::cli::run_main("fashion_mnist", [&] {
    actortrain::jobs::fashion_mnist_options o;
    int ps = 2, workers = 2, threads = 2, verbose = 1;
    std::string metrics;
    actortrain::consistency_mode consistency;
    std::shared_ptr<const actortrain::model::partitioner> partitioner;
    bool pull_ahead = false;
    actortrain::cli::flags f{"fashion_mnist",
                             "Trains an MLP 784-256-128-10 on Fashion-MNIST with an embedded parameter-server cluster "
                             "(asynchronous unless --consistency says otherwise), and prints the test accuracy."};
    f.add("ps", ps, "parameter-server shards", range<int>{1, 64})
      .add("workers", workers, "workers (each with its own input pipeline)", range<int>{1, 256})
      .add("epochs", o.epochs, "passes over the 60,000 training images", range<int>{1, 10000})
      .add("batch", o.batch, "batch size per step", range<int64_t>{1, 60000})
      .add("lr", o.learning_rate, "Adam learning rate", range<double>{1e-9, 10})
      .add("seed", o.seed, "seed of initialization and shuffling")
      .add_parsed("consistency", "async",
                  "async, bounded_staleness(s) (no step more than s steps ahead of the oldest unapplied one) or "
                  "sync (rounds of one batch per worker, applied as one mean)",
                  [&](const std::string& v) { consistency = actortrain::consistency_mode::parse(v); })
      .add_parsed("partitioner", "none",
                  "split variables over the ps shards: fixed_shards(n), min_size(bytes, n), max_size(bytes)",
                  [&](const std::string& v) { partitioner = actortrain::model::make_partitioner(v); })
      .add("pull-ahead", pull_ahead, "fetch the next step's parameters while a step computes (faster, staleness +1)")
      .add_parsed("compensation", o.compensation.to_string(),
                  "what the ps shards do about stale gradients: none, lookahead (workers compute on the parameters "
                  "extrapolated along the last update), lookahead(k), staleness_lr, dc_asgd(lambda)",
                  [&](const std::string& v) { o.compensation = actortrain::staleness_compensation::parse(v); })
      .add("use-ema", o.use_ema,
           "Adam keeps a moving average of the weights, which evaluation and reads of the model see "
           "(--use-ema=off: the weights themselves)")
      .add("ema-momentum", o.ema_momentum, "the average's momentum (Keras's ema_momentum)", range<double>{0, 0.999999})
      .add("ema-every", o.ema_every,
           "update the average on every k-th update of a shard's partition only, with the momentum to the k-th power",
           range<int>{1, 1000})
      .add("threads", threads, "CAF scheduler threads", range<int>{1, 256})
      .add("metrics", metrics, "write JSON-lines metrics to this file (actortrain plot draws them)")
      .add("data-dir", o.data_dir, "directory with the four Fashion-MNIST .gz files")
      .add("verbose", verbose, "0 silent, 1 progress bar, 2 one line per epoch", range<int>{0, 2});
    if (!f.parse(argc, argv)) return 0;
    if (!f.positional().empty()) throw actortrain::cli::usage_error("unexpected argument '" + f.positional()[0] + "'");

    auto j = actortrain::jobs::fashion_mnist(o);
    j.spec.num_ps = ps;
    j.spec.num_workers = workers;
    j.spec.consistency = consistency;
    j.spec.partitioner = partitioner;
    j.spec.pull_ahead = pull_ahead;
    j.spec.metrics_file = metrics;
    j.fit.verbose = verbose;

    caf::actor_system_config cfg;
    actortrain::configure(cfg);
    cfg.set("scheduler.max-threads", threads);
    caf::actor_system sys{cfg};
    actortrain::cluster c{sys, j};  // the job's model, optimizer, loss and metrics, j.spec's shape
    auto h = c.fit(j.train, j.fit);
    fmt::print("test accuracy: {:.4f} (loss {:.4f}) after {} epochs on {} ps shard(s) and {} worker(s), {}\n",
               h.last("val_accuracy"), h.last("val_loss"), h["loss"].size(), ps, workers, consistency.to_string());
    return 0;
  });
}
