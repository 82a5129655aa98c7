// fashion_mnist_local — the registered fashion_mnist job trained in one process, without
// actors: a job (actortrain::jobs::fashion_mnist — a Sequential MLP, Adam, softmax
// cross-entropy from logits, accuracy, a tf.data-like pipeline) is plain values, and
// model::trainer fits them the Keras way. The baseline the actor cluster is measured
// against.
//
//   build/examples/fashion_mnist_local                 # 10 epochs, prints test accuracy
//   build/examples/fashion_mnist_local --epochs 2 --seed 3 --verbose 2

#include <actortrain/actors/cli/flags.hpp>
#include <actortrain/actors/jobs/jobs.hpp>
#include <actortrain/dataset/all.hpp>
#include <actortrain/model/all.hpp>

#include <fmt/format.h>

namespace md = actortrain::model;
using actortrain::cli::range;

int main(int argc, char** argv) {
  return actortrain::cli::run_main("fashion_mnist_local", [&] {
    actortrain::jobs::fashion_mnist_options o;
    o.use_ema = false;  // the baseline trains and evaluates the weights themselves
    int verbose = 1;
    actortrain::cli::flags f{"fashion_mnist_local",
                             "Trains an MLP 784-256-128-10 on Fashion-MNIST in one process and prints the test "
                             "accuracy."};
    f.add("epochs", o.epochs, "passes over the 60,000 training images", range<int>{1, 10000})
      .add("batch", o.batch, "batch size", range<int64_t>{1, 60000})
      .add("lr", o.learning_rate, "Adam learning rate", range<double>{1e-9, 10})
      .add("seed", o.seed, "seed of initialization and shuffling")
      .add("use-ema", o.use_ema, "keep a moving average of the weights, validate it and end with it (Keras's use_ema)")
      .add("ema-every", o.ema_every, "with --use-ema: update the average on every k-th step only, with the momentum "
           "to the k-th power (1: Keras's rule)", range<int>{1, 1000})
      .add("data-dir", o.data_dir, "directory with the four Fashion-MNIST .gz files")
      .add("verbose", verbose, "0 silent, 1 progress bar, 2 one line per epoch", range<int>{0, 2});
    if (!f.parse(argc, argv)) return 0;
    if (!f.positional().empty()) throw actortrain::cli::usage_error("unexpected argument '" + f.positional()[0] + "'");

    auto j = actortrain::jobs::fashion_mnist(o);
    md::trainer t{j.structure, j.optimizer->clone(), j.loss, o.seed};
    for (auto& m : j.metrics()) t.add_metric(std::move(m));
    j.fit.verbose = verbose;
    // One input pipeline, all of the data; read ahead on a thread of its own.
    auto train = j.train(actortrain::dataset::input_context{}).prefetch(4);
    auto h = t.fit(train, j.fit);
    fmt::print("test accuracy: {:.4f} (loss {:.4f}) after {} epochs\n", h.last("val_accuracy"), h.last("val_loss"),
               o.epochs);
    return 0;
  });
}
