// callbacks — Keras-style callbacks on an embedded cluster, run on the coordinator as
// TensorFlow's ParameterServerStrategy runs them on the chief: early stopping that ends
// with the best epoch's variables, a learning-rate schedule, a checkpoint of the best
// epoch, and a CSV log of every epoch. The job is the registered fashion_mnist.
//
//   build/examples/callbacks --epochs 6 --early-stopping 2 --lr-schedule cosine --best-checkpoint best --csv-log log.csv
//   build/tools/actortrain inspect best            # what the best checkpoint holds

#include <actortrain/actors/all.hpp>
#include <actortrain/actors/cluster/callbacks.hpp>
#include <actortrain/actors/jobs/jobs.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <fmt/format.h>

using actortrain::cli::range;

int main(int argc, char** argv) {
  return actortrain::cli::run_main("callbacks", [&] {
    actortrain::jobs::fashion_mnist_options o;
    int64_t early_stopping = 0;
    std::string lr_schedule = "none", best_dir, csv_log;
    int verbose = 2;
    actortrain::cli::flags f{"callbacks",
                             "Trains the fashion_mnist job on an embedded cluster (2 ps shards, 2 workers) with "
                             "callbacks on the coordinator, and prints the test accuracy of the variables it ends with."};
    f.add("epochs", o.epochs, "passes over the 60,000 training images", range<int>{1, 10000})
      .add("lr", o.learning_rate, "Adam learning rate (the schedule starts here)", range<double>{1e-9, 10})
      .add("early-stopping", early_stopping,
           "stop when val_loss has not improved for N epochs, and keep the best epoch's variables (0: off)",
           range<int64_t>{0, 10000})
      .add_choice("lr-schedule", lr_schedule,
                  "learning rate per epoch: cosine (to 0 at the last epoch), step (halved every 3 epochs), "
                  "exponential (x 0.8 per epoch)",
                  {"none", "cosine", "step", "exponential"})
      .add("best-checkpoint", best_dir, "write a checkpoint here at each epoch end with the best val_accuracy")
      .add("csv-log", csv_log, "append one CSV row per epoch (loss, accuracy, val_*) to this file")
      .add("data-dir", o.data_dir, "directory with the four Fashion-MNIST .gz files")
      .add("verbose", verbose, "0 silent, 1 progress bar, 2 one line per epoch", range<int>{0, 2});
    if (!f.parse(argc, argv)) return 0;
    if (!f.positional().empty()) throw actortrain::cli::usage_error("unexpected argument '" + f.positional()[0] + "'");

    auto j = actortrain::jobs::fashion_mnist(o);
    j.spec.num_ps = 2;
    j.spec.num_workers = 2;
    j.fit.verbose = verbose;
    if (early_stopping > 0)
      j.callbacks.push_back(std::make_shared<actortrain::early_stopping>(
        actortrain::early_stopping_options{"val_loss", early_stopping, 0, "min", true}));
    double lr = o.learning_rate;
    if (lr_schedule == "cosine")
      j.callbacks.push_back(actortrain::learning_rate_schedule(actortrain::cosine_decay(lr, o.epochs)));
    if (lr_schedule == "step")
      j.callbacks.push_back(actortrain::learning_rate_schedule(actortrain::step_decay(lr, 0.5, 3)));
    if (lr_schedule == "exponential")
      j.callbacks.push_back(actortrain::learning_rate_schedule(actortrain::exponential_decay(lr, 0.8)));
    if (!best_dir.empty())
      j.callbacks.push_back(std::make_shared<actortrain::model_checkpoint>(
        actortrain::model_checkpoint_options{best_dir, 0, "val_accuracy", "max", 1}));
    if (!csv_log.empty()) j.callbacks.push_back(actortrain::csv_logger(csv_log));

    caf::actor_system_config cfg;
    actortrain::configure(cfg);
    caf::actor_system sys{cfg};
    actortrain::cluster c{sys, j};
    auto h = c.fit(j.train, j.fit);
    // With early stopping the variables are the best epoch's, not the last one's.
    auto test = c.evaluate(*actortrain::dataset::as_dataset(*j.fit.validation));
    fmt::print("test accuracy: {:.4f} (loss {:.4f}) after {} epochs\n", test.at("accuracy"), test.at("loss"),
               h["loss"].size());
    return 0;
  });
}
