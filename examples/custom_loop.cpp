// custom_loop — TensorFlow's custom training loop over a distributed dataset, on the
// embedded cluster (the guide "Custom training with tf.distribute.Strategy"):
//
//   for epoch in range(EPOCHS):
//     total_loss = 0.0; num_batches = 0
//     for x in train_dist_dataset:
//       total_loss += distributed_train_step(x)   # strategy.reduce(SUM, strategy.run(train_step, args=(x,)))
//       num_batches += 1
//     print(f"Epoch {epoch + 1}, Loss: {total_loss / num_batches:.4f}")
//
// Here the training step is one the program registers by name (the built-in step, then
// the gradients clipped to a global norm, as tf.clip_by_global_norm) and runs on the
// next batch of every replica (input pipeline); the replicas' batch-mean losses are
// averaged, the global batch's loss. At the end the program checks, from the ps shards'
// ledgers and the dataset alone, that every batch of every pass was applied once.
//
//   build/examples/custom_loop [--epochs 3] [--ps 2] [--workers 2] [--clip-norm 1]

#include <actortrain/actors/all.hpp>
#include <actortrain/actors/cluster/job.hpp>
#include <actortrain/actors/jobs/jobs.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <fmt/format.h>

using actortrain::cli::range;

int main(int argc, char** argv) {
  return actortrain::cli::run_main("custom_loop", [&] {
    int epochs = 3, ps = 2, workers = 2;
    double clip = 1.0;
    actortrain::cli::flags f{"custom_loop",
                             "TensorFlow's custom training loop over a distributed dataset on an embedded cluster: "
                             "a registered step run on every replica's next batch, 'Epoch N, Loss: X' per pass."};
    f.add("epochs", epochs, "passes over the data", range<int>{1, 100000})
      .add("ps", ps, "parameter-server shards", range<int>{1, 64})
      .add("workers", workers, "workers (and replicas: one input pipeline each)", range<int>{1, 256})
      .add("clip-norm", clip, "the step clips the gradients to this global L2 norm", range<double>{1e-9, 1e12});
    if (!f.parse(argc, argv)) return 0;
    if (!f.positional().empty()) throw actortrain::cli::usage_error("unexpected argument '" + f.positional()[0] + "'");

    actortrain::jobs::linear_options lo;
    lo.epochs = epochs;
    auto j = actortrain::jobs::linear(lo);  // a planted linear regression: its data, model and optimizer
    j.spec.num_ps = ps;
    j.spec.num_workers = workers;
    auto step = actortrain::model::clipped_step(clip);
    j.spec.steps.push_back(step);
    caf::actor_system_config cfg;
    actortrain::configure(cfg);
    caf::actor_system sys{cfg};
    actortrain::cluster c{sys, j};

    auto dist = c.distribute_dataset(j.train);
    for (int epoch = 0; epoch < epochs; ++epoch) {
      double total = 0;
      int batches = 0;
      for (const auto& x : dist) {
        total += actortrain::reduce(actortrain::reduce_op::mean, c.run(step.name, x));
        ++batches;
      }
      fmt::print("Epoch {}, Loss: {:.4f}\n", epoch + 1, total / batches);
    }
    auto result = c.join(dist.handle());

    auto verdict = actortrain::check_ledgers(c.ledgers(), {actortrain::ledger_run_of(j, j.spec, result.run)});
    if (!verdict.ok()) {
      for (auto& v : verdict.violations) fmt::print(stderr, "ledger: {}\n", v);
      return 1;
    }
    fmt::print("ledger check: exactly once, {} steps\n", verdict.steps.at(result.run));
    return 0;
  });
}
