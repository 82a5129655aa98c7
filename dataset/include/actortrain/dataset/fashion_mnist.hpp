#pragma once
// Fashion-MNIST (Xiao et al. 2017), as Debian's dataset-fashion-mnist package installs it:
// 60,000 training and 10,000 test 28x28 grey images of 10 clothing classes, gzipped IDX
// files. The Keras equivalent is tf.keras.datasets.fashion_mnist.load_data(), without the
// download: tools/setup installs the package.

#include <actortrain/dataset/dataset.hpp>

#include <string>

namespace actortrain::dataset {

/// Where Debian's dataset-fashion-mnist puts the files.
inline constexpr const char* fashion_mnist_default_dir = "/usr/share/datasets/fashion-mnist";

enum class split { train, test };

/// Images as rows of 784 pixels scaled to [0, 1], labels as class ids in one column.
struct fashion_mnist_arrays {
  model::matrix images;
  model::matrix labels;
};

/// Reads one split into memory. Throws file_error naming the file when it is missing
/// (with a hint to run tools/setup) or malformed.
fashion_mnist_arrays load_fashion_mnist(split s, const std::string& dir = fashion_mnist_default_dir);

/// The same split as a dataset of unbatched elements (one image, one label each).
dataset fashion_mnist(split s, const std::string& dir = fashion_mnist_default_dir);

}  // namespace actortrain::dataset
