#pragma once
// Custom training steps (Keras's train_step override): a function that gets a step's
// batch, the model and the parameters to compute on, fills the step's gradients and
// returns its logs. What happens to the gradients is not its business: the trainer
// applies them with its optimizer, a cluster's worker pushes them to the ps shards, where
// they are applied exactly once as every step's are. The built-in step is
// default_train_step; a custom one usually calls the same pieces (forward, loss,
// backward) and changes what it needs — clip the gradients, add a penalty, weigh the loss.
//
// example[trainer]:
//   // Clip the gradient's global norm to 1 after the usual step.
//   t.set_train_step({"clip_by_global_norm(1)", [](model::step_context& s) {
//     auto logs = model::default_train_step(s);
//     model::clip_by_global_norm(s.gradients(), 1.0);
//     return logs;
//   }});
//
// In a cluster the function runs on the workers (cluster_spec::train_step; a job's spec
// carries it to every task of a cluster of processes, where each process builds the same
// job: a function cannot travel, so its `name` is what the job fingerprint compares).
// It must be a function of the context alone: randomness from step_key(), which is the
// same when a step is re-run after a failure; no state kept between calls (a step may
// run twice, on two workers, and only one result is applied).

#include <actortrain/model/batch_source.hpp>
#include <actortrain/model/callbacks.hpp>
#include <actortrain/model/loss.hpp>
#include <actortrain/model/metric.hpp>
#include <actortrain/model/model.hpp>
#include <actortrain/model/variable.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace actortrain::model {

/// What a training step works with. Made by the trainer or a worker for one step.
class step_context {
 public:
  /// `d_out`: a buffer the owner keeps across steps (default_train_step's loss gradient).
  step_context(executor& ex, const parameter_store& params, gradient_store& grads, const loss& l,
               std::vector<metric_ptr>* metrics, const batch& data, uint64_t step_key, matrix& d_out)
      : ex_(ex), params_(params), grads_(grads), loss_(l), metrics_(metrics), data_(data), key_(step_key),
        d_out_(d_out) {}

  /// The step's batch: features feed the model's inputs, labels the loss.
  const batch& data() const { return data_; }
  const model& structure() const { return ex_.structure(); }
  const parameter_store& parameters() const { return params_; }
  /// The step's gradients, zero when the step begins; what the step leaves here is applied.
  gradient_store& gradients() { return grads_; }
  /// Seeds this step's randomness: the same for a re-run of the same step.
  uint64_t step_key() const { return key_; }

  /// The model's outputs for `inputs` (default: the batch's features) in training mode,
  /// dropout keyed by step_key(); valid until the next forward.
  const matrix& forward();
  const matrix& forward(const std::vector<matrix>& inputs);
  /// Back-propagates d(loss)/d(outputs) of the last forward and ADDS into gradients().
  void backward(const matrix& d_outputs);
  /// The compiled loss of `out` against `labels`, and its gradient into d_out (if set).
  double compute_loss(const matrix& out, const matrix& labels, matrix* d_out) const;
  /// Updates the compiled metrics (reported beside the loss).
  void update_metrics(const matrix& out, const matrix& labels);
  /// A matrix kept across steps, for d(loss)/d(outputs) without allocating each step.
  matrix& d_out_buffer() { return d_out_; }

 private:
  executor& ex_;
  const parameter_store& params_;
  gradient_store& grads_;
  const loss& loss_;
  std::vector<metric_ptr>* metrics_;
  const batch& data_;
  uint64_t key_;
  matrix& d_out_;
};

/// A step function: fills ctx.gradients() and returns the step's logs, which must hold
/// "loss" (the value averaged into the epoch's loss); other keys are reported as they are.
using train_step_fn = std::function<logs(step_context& ctx)>;

/// A named step: the name identifies it where a function cannot be compared (a
/// cluster's job fingerprint, checkpoints' descriptions).
struct step_function {
  std::string name;
  train_step_fn fn;
  explicit operator bool() const { return static_cast<bool>(fn); }
};

/// The built-in step: forward, the compiled loss, the metrics, backward.
logs default_train_step(step_context& ctx);

/// Scales every gradient (dense and row-wise) by min(1, max_norm / global L2 norm), as
/// tf.clip_by_global_norm. Returns the norm before clipping. max_norm > 0.
double clip_by_global_norm(gradient_store& grads, double max_norm);

/// default_train_step, then clip_by_global_norm(max_norm), named
/// "clip_by_global_norm(<max_norm>)". Throws std::invalid_argument unless max_norm > 0.
step_function clipped_step(double max_norm);

}  // namespace actortrain::model
