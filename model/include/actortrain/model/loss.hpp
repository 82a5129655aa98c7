#pragma once
// Losses. A loss reduces a batch to the mean over its rows and gives the gradient of
// that mean with respect to the predictions. Workers push the gradient of the mean
// with the example count, so a synchronous round can form the example-weighted mean.

#include <actortrain/model/tensor.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace actortrain::model {

class loss {
 public:
  virtual ~loss() = default;
  /// "mean_squared_error", ... (part of the job fingerprint).
  virtual std::string describe() const = 0;
  /// Mean loss over the rows of `pred`; when `d_pred` is not null it is resized and set
  /// to d(mean loss)/d(pred). Throws std::invalid_argument naming both shapes when
  /// `labels` does not fit `pred`, and naming the row when a class label is out of range.
  virtual double compute(const matrix& pred, const matrix& labels, matrix* d_pred) const = 0;
  /// Per-row losses (for evaluation and metrics), resized to pred.rows() x 1.
  virtual void per_example(const matrix& pred, const matrix& labels, matrix& out) const = 0;
};

using loss_ptr = std::shared_ptr<const loss>;

/// mean over rows of the mean over columns of (pred - labels)^2, as Keras's "mse".
loss_ptr mean_squared_error();

/// Softmax cross-entropy from logits, computed stably (log-sum-exp with the row max
/// subtracted). Labels are either class ids (one column, values 0..k-1, Keras's
/// sparse_categorical_crossentropy) or k columns of probabilities (one-hot).
loss_ptr softmax_cross_entropy();

/// Binary cross-entropy from logits: max(x,0) - x*z + log(1 + exp(-|x|)), labels in [0,1],
/// same shape as pred.
loss_ptr binary_cross_entropy();

/// Keras's class_weight as a loss: `inner`'s per-example losses, each times the weight
/// of its example's class, averaged over the rows (the gradient row by row likewise). A
/// row's class is its label for one label column (class ids, or 0/1 for a binary
/// output), or the index of its largest label for several (one-hot). A class without a
/// weight throws std::invalid_argument naming it and the row. fit_options::class_weight
/// wraps the trainer's loss in it for one fit; give it to a cluster's job as its loss.
loss_ptr class_weighted(loss_ptr inner, std::map<int64_t, double> weights);

}  // namespace actortrain::model
