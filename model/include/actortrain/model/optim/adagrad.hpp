#pragma once
// Adagrad (Duchi, Hazan & Singer, "Adaptive Subgradient Methods for Online Learning and
// Stochastic Optimization", JMLR 12, 2011), with the update of keras.optimizers.Adagrad
// (Keras 3 and tf.keras >= 2.11):
//
//   a = a + g^2
//   w = w - lr * g / sqrt(a + epsilon)
//
// Epsilon placement: inside the square root, as current Keras. (The legacy tf.keras
// optimizer_v2 Adagrad, i.e. TF's ApplyAdagradV2 kernel, uses sqrt(a) + epsilon; with the
// accumulator starting at 0.1 the two differ by less than 1e-6 relative.)
//
// Slots: {"accumulator"}, initialized to `initial_accumulator_value` (fixed at
// construction: it only matters for new slots). apply_rows is lazy: only touched rows and
// their accumulator rows change (TF's SparseApplyAdagradV2). For Adagrad this is exactly
// the dense rule with zero gradients on the untouched rows (a zero gradient changes neither
// the accumulator nor the value).

#include <actortrain/model/optim/optimizer.hpp>

namespace actortrain::model {

struct adagrad_options {
  /// Step size. Keras's default 0.001.
  double learning_rate = 0.001;
  /// Starting value of the accumulator, >= 0. Keras's default 0.1 (keeps the first steps
  /// from dividing by ~0).
  double initial_accumulator_value = 0.1;
  /// Added under the square root, > 0. Keras's default 1e-7.
  double epsilon = 1e-7;
  /// Keep an exponential moving average of the values (optimizer.hpp, "Averaging").
  /// Keras's default false.
  bool use_ema = false;
  /// The average's momentum, in [0, 1). Keras's default 0.99.
  double ema_momentum = 0.99;
  /// Update the average on every k-th apply only (optimizer.hpp, "Averaging"); 1 as Keras.
  int ema_every = 1;
};

class adagrad final : public optimizer {
 public:
  /// Throws std::invalid_argument naming the bad option.
  explicit adagrad(const adagrad_options& options = {});
  optimizer_ptr clone() const override;

 protected:
  float initial_slot_value(size_t k) const override;
  void update_dense(float* values, const float* grads, size_t n, slot_block& s, double lr_scale) const override;
  void update_dense_ahead(float* values, const float* grads, size_t n, slot_block& s, double lr_scale, float k,
                          float* ahead) const override;
  void update_rows(float* values, size_t row_width, const int64_t* rows, size_t num_rows,
                   const float* grad_rows, slot_block& s, double lr_scale) const override;

 private:
  struct kernel;
  kernel make_kernel(double lr_scale) const;

  size_t learning_rate_;
  size_t initial_accumulator_value_;
  size_t epsilon_;
};

/// An Adagrad optimizer with the given options.
optimizer_ptr make_adagrad(const adagrad_options& options = {});

}  // namespace actortrain::model
