#pragma once
// Losses. A loss reduces a batch to the mean over its rows and gives the gradient of
// that mean with respect to the predictions. Workers push the gradient of the mean
// with the example count, so a synchronous round can form the example-weighted mean.

#include <actortrain/model/tensor.hpp>

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

}  // namespace actortrain::model
