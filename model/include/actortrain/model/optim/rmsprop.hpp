#pragma once
// RMSprop (Hinton, "Neural Networks for Machine Learning", lecture 6e, 2012; the centered
// form from Graves, "Generating Sequences With Recurrent Neural Networks",
// arXiv:1308.0850), with the update of keras.optimizers.RMSprop (Keras 3 and
// tf.keras >= 2.11):
//
//   v   = rho * v + (1 - rho) * g^2
//   centered:  mg = rho * mg + (1 - rho) * g;  d = v - mg^2 + epsilon
//   otherwise: d = v + epsilon
//   inc = lr * g / sqrt(d)
//   momentum > 0:  mom = momentum * mom + inc;  w = w - mom
//   otherwise:     w = w - inc
//
// Epsilon placement: inside the square root on both paths, as current Keras. (The
// legacy tf.keras optimizer_v2 RMSprop put it inside with momentum and outside,
// sqrt(v) + epsilon, without; we do not copy that inconsistency.)
//
// Slots, fixed at construction: {"velocity"}, then "momentum" if momentum > 0, then
// "average_gradient" if centered. So `centered` cannot change at run time, and momentum
// can only change on an optimizer built with a non-zero momentum.
//
// apply_rows is lazy: only touched rows of every slot and of the values change (TF's
// SparseApplyRMSProp; Keras 3's sparse path instead decays every row's velocity).

#include <actortrain/model/optim/optimizer.hpp>

namespace actortrain::model {

struct rmsprop_options {
  /// Step size. Keras's default 0.001.
  double learning_rate = 0.001;
  /// Decay of the squared-gradient average, in [0, 1). Keras's default 0.9 (Hinton's).
  double rho = 0.9;
  /// Momentum on the scaled step, in [0, 1]; 0 = no momentum slot. Keras's default 0.
  double momentum = 0.0;
  /// Added under the square root, > 0. Keras's default 1e-7.
  double epsilon = 1e-7;
  /// Normalize by the estimated variance (Graves 2013) instead of the second moment;
  /// costs one more slot.
  bool centered = false;
  /// Keep an exponential moving average of the values (optimizer.hpp, "Averaging").
  /// Keras's default false.
  bool use_ema = false;
  /// The average's momentum, in [0, 1). Keras's default 0.99.
  double ema_momentum = 0.99;
  /// Update the average on every k-th apply only (optimizer.hpp, "Averaging"); 1 as Keras.
  int ema_every = 1;
};

class rmsprop final : public optimizer {
 public:
  /// Throws std::invalid_argument naming the bad option.
  explicit rmsprop(const rmsprop_options& options = {});
  optimizer_ptr clone() const override;

 protected:
  std::string check_change(size_t index, double value) const override;
  void update_dense(float* values, const float* grads, size_t n, slot_block& s, double lr_scale) const override;
  void update_dense_ahead(float* values, const float* grads, size_t n, slot_block& s, double lr_scale, float k,
                          float* ahead) const override;
  void update_rows(float* values, size_t row_width, const int64_t* rows, size_t num_rows,
                   const float* grad_rows, slot_block& s, double lr_scale) const override;

 private:
  template <class Run>
  void dispatch(double lr_scale, Run&& run) const;

  bool has_momentum_;
  size_t learning_rate_;
  size_t rho_;
  size_t momentum_;
  size_t epsilon_;
  size_t centered_;
};

/// An RMSprop optimizer with the given options.
optimizer_ptr make_rmsprop(const rmsprop_options& options = {});

}  // namespace actortrain::model
