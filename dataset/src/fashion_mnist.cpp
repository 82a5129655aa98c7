#include <actortrain/dataset/error.hpp>
#include <actortrain/dataset/fashion_mnist.hpp>
#include <actortrain/dataset/idx.hpp>
#include <actortrain/dataset/sources.hpp>

#include <sys/stat.h>

namespace actortrain::dataset {

namespace {

struct paths {
  std::string images, labels;
};

paths files_of(split s, const std::string& dir) {
  std::string prefix = s == split::train ? "train" : "t10k";
  paths p{dir + "/" + prefix + "-images-idx3-ubyte.gz", dir + "/" + prefix + "-labels-idx1-ubyte.gz"};
  for (auto* f : {&p.images, &p.labels}) {
    struct stat sb;
    if (::stat(f->c_str(), &sb) != 0)
      throw file_error(*f, "Fashion-MNIST file not found (install the dataset-fashion-mnist package: tools/setup)");
  }
  return p;
}

}  // namespace

fashion_mnist_arrays load_fashion_mnist(split s, const std::string& dir) {
  auto p = files_of(s, dir);
  auto images = read_idx(p.images);
  auto labels = read_idx(p.labels);
  if (images.data.rows() != labels.data.rows())
    throw file_error(p.labels, "label count differs from the image count of " + p.images);
  fashion_mnist_arrays out;
  out.images = std::move(images.data);
  out.images *= 1.0f / 255.0f;
  out.labels = std::move(labels.data);
  return out;
}

dataset fashion_mnist(split s, const std::string& dir) {
  auto p = files_of(s, dir);
  return from_idx(p.images, p.labels, 1.0f / 255.0f);
}

}  // namespace actortrain::dataset
