#pragma once
// Streaming metrics. A metric accumulates over batches and can be merged with another
// instance's state, so workers compute partial metrics and the coordinator combines
// them exactly (an average of per-worker AUCs would be wrong; merging histograms is not).

#include <actortrain/model/loss.hpp>
#include <actortrain/model/tensor.hpp>

#include <memory>
#include <string>
#include <vector>

namespace actortrain::model {

class metric {
 public:
  virtual ~metric() = default;
  /// "accuracy", "loss", "auc": the key under which histories report it.
  virtual std::string name() const = 0;
  /// Accumulates one batch. Predictions are model outputs (logits for classification).
  virtual void update(const matrix& pred, const matrix& labels) = 0;
  /// Value over everything accumulated since the last reset (0 when empty).
  virtual double result() const = 0;
  virtual void reset() = 0;
  /// Accumulated state as plain numbers, and its inverse-free combination: after
  /// a.merge(b.state()), a.result() is the metric over both a's and b's batches.
  virtual std::vector<double> state() const = 0;
  virtual void merge(const std::vector<double>& other_state) = 0;
  /// A fresh instance with the same configuration and empty state.
  virtual std::unique_ptr<metric> clone() const = 0;
};

using metric_ptr = std::unique_ptr<metric>;

/// Fraction of rows classified right. With k > 1 prediction columns: argmax of the row
/// against the class id (1 label column) or the argmax of a one-hot label. With one
/// prediction column (a binary logit): pred > 0 against label > 0.5.
metric_ptr accuracy();

/// Example-weighted mean of `l` over the batches ("loss" unless named otherwise).
metric_ptr mean_loss(loss_ptr l, std::string name = "loss");

/// Area under the ROC curve for a binary logit (one column), by a histogram of
/// sigmoid(pred) over `num_thresholds` buckets as Keras's AUC (default 200), trapezoid
/// rule; mergeable across workers.
metric_ptr auc(int num_thresholds = 200);

}  // namespace actortrain::model
