#pragma once
// The benchmark baseline: a bare single-threaded Eigen training loop for the
// 784-256-128-10 ReLU MLP with Adam and softmax cross-entropy, written the way one would
// write it by hand without a framework (fixed layers, no graph, no dataset views). The
// framework's variants are reported as ratios against it, measured in the same run.

#include <actortrain/model/tensor.hpp>

#include <cstdint>
#include <utility>
#include <vector>

namespace actortrain::tools {

struct bare_result {
  double samples_per_second = 0;  ///< training only (evaluation excluded)
  double test_accuracy = 0;       ///< after the last epoch
  /// After each epoch: (training seconds so far, test accuracy).
  std::vector<std::pair<double, double>> accuracy_at;
};

/// Trains for `epochs` on (x_train, y_train) (pixels in [0,1], labels as class ids in
/// one column) with batch `batch` and Adam(lr), reshuffling every epoch from `seed`,
/// and evaluates on the test set after each epoch with the clock stopped.
bare_result train_bare_mlp(const model::matrix& x_train, const model::matrix& y_train,
                           const model::matrix& x_test, const model::matrix& y_test, int epochs,
                           int64_t batch, float lr, uint64_t seed);

}  // namespace actortrain::tools
