// fashion_mnist_local — single-process training on the real Fashion-MNIST.
//
// Shows: the Keras-like local API (a Sequential MLP, Adam, softmax cross-entropy from
// logits, accuracy) on a tf.data-like pipeline; the baseline the actor cluster is
// measured against.
//
//   build/examples/fashion_mnist_local                 # 10 epochs, prints test accuracy
//   build/examples/fashion_mnist_local --epochs=2 --seed=3 --verbose=2

#include <actortrain/dataset/all.hpp>
#include <actortrain/model/all.hpp>

#include <fmt/format.h>

#include <actortrain/actors/cli/flags.hpp>

namespace ds = actortrain::dataset;
namespace md = actortrain::model;
using md::layers::activation;

int main(int argc, char** argv) {
  return actortrain::cli::run_main("fashion_mnist_local", [&] {
    int epochs = 10, verbose = 1;
    int64_t batch = 128;
    double lr = 1e-3;
    uint64_t seed = 1;
    std::string data_dir = ds::fashion_mnist_default_dir;
    actortrain::cli::flags f{"fashion_mnist_local",
                               "Trains an MLP 784-256-128-10 on Fashion-MNIST in one process and "
                               "prints the test accuracy."};
    f.add("epochs", epochs, "passes over the 60,000 training images")
      .add("batch", batch, "batch size")
      .add("lr", lr, "Adam learning rate")
      .add("seed", seed, "seed of initialization and shuffling")
      .add("data-dir", data_dir, "directory with the four Fashion-MNIST .gz files")
      .add("verbose", verbose, "0 silent, 1 progress bar, 2 one line per epoch");
    if (!f.parse(argc, argv)) return 0;
    if (epochs < 1) throw actortrain::cli::usage_error("--epochs must be >= 1");
    if (batch < 1) throw actortrain::cli::usage_error("--batch must be >= 1");
    if (!(lr > 0)) throw actortrain::cli::usage_error("--lr must be > 0");

    auto train = ds::fashion_mnist(ds::split::train, data_dir);
    auto test = ds::fashion_mnist(ds::split::test, data_dir);

    auto mlp = md::model::sequential(784, {md::layers::dense(256, activation::relu),
                                           md::layers::dense(128, activation::relu),
                                           md::layers::dense(10)});
    md::trainer t{mlp, md::make_adam({lr}), md::softmax_cross_entropy(), seed};
    t.add_metric(md::accuracy());
    md::fit_options opts;
    opts.epochs = epochs;
    opts.verbose = verbose;
    opts.validation = test.batch(1000);
    auto h = t.fit(train.shuffle(60000, seed).batch(batch).prefetch(4), opts);
    fmt::print("test accuracy: {:.4f} (loss {:.4f}) after {} epochs\n", h.last("val_accuracy"),
               h.last("val_loss"), epochs);
    return 0;
  });
}
