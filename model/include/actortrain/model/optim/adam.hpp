#pragma once
// Adam (Kingma & Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015,
// arXiv:1412.6980), with the update of Keras and TF (keras.optimizers.Adam, both the
// Keras 2.x legacy optimizer and Keras 3; TF's ApplyAdam kernel). At step t (1-based,
// t = slot_block::iterations after the increment):
//
//   lr_t = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t)        (once per call, in double)
//   m    = m + (g - m) * (1 - beta_1)                        (= beta_1 m + (1 - beta_1) g)
//   v    = v + (g^2 - v) * (1 - beta_2)
//   w    = w - lr_t * m / (sqrt(v) + epsilon)
//
// Epsilon placement: epsilon is added to sqrt(v) of the *uncorrected* second moment, i.e.
// it is the paper's "epsilon hat" (the efficient form just before Section 2.1), not the
// epsilon of Algorithm 1 (which is added to sqrt(v_hat)). This is what Keras and TF do,
// so a model trained here matches a Keras run step for step; the two forms differ by
// epsilon_hat = epsilon * sqrt(1 - beta_2^t), which matters only when sqrt(v) ~ epsilon.
// Consequence: the first step moves each weight by about lr * sign(g).
//
// apply_rows is lazy Adam (tfa.optimizers.LazyAdam): only the touched rows' m, v and
// values change, with the block's t. Keras's dense-on-sparse Adam instead decays m and v
// of every row each step; lazy is the usual choice for embeddings and is what a ps shard
// can do in O(touched rows).
//
// Slots: {"m", "v"}, zero-initialized. No AMSGrad variant.

#include <actortrain/model/optim/optimizer.hpp>

namespace actortrain::model {

struct adam_options {
  /// Step size alpha. Keras's default 0.001 (the paper's).
  double learning_rate = 0.001;
  /// Decay of the first-moment estimate, in [0, 1). Paper and Keras: 0.9.
  double beta_1 = 0.9;
  /// Decay of the second-moment estimate, in [0, 1). Paper and Keras: 0.999.
  double beta_2 = 0.999;
  /// "Epsilon hat" (see above), > 0. Keras's default 1e-7 (the paper's 1e-8 is for its
  /// Algorithm 1 placement).
  double epsilon = 1e-7;
  /// Keep an exponential moving average of the values (optimizer.hpp, "Averaging").
  /// Keras's default false.
  bool use_ema = false;
  /// The average's momentum, in [0, 1). Keras's default 0.99.
  double ema_momentum = 0.99;
  /// Update the average on every k-th apply only (optimizer.hpp, "Averaging"); 1 as Keras.
  int ema_every = 1;
};

class adam final : public optimizer {
 public:
  /// Throws std::invalid_argument naming the bad option.
  explicit adam(const adam_options& options = {});
  optimizer_ptr clone() const override;

 protected:
  void update_dense(float* values, const float* grads, size_t n, slot_block& s, double lr_scale) const override;
  void update_dense_ahead(float* values, const float* grads, size_t n, slot_block& s, double lr_scale, float k,
                          float* ahead) const override;
  void update_rows(float* values, size_t row_width, const int64_t* rows, size_t num_rows,
                   const float* grad_rows, slot_block& s, double lr_scale) const override;

 private:
  struct kernel;
  kernel make_kernel(int64_t t, double lr_scale) const;

  size_t learning_rate_;
  size_t beta_1_;
  size_t beta_2_;
  size_t epsilon_;
};

/// An Adam optimizer with the given options.
optimizer_ptr make_adam(const adam_options& options = {});

}  // namespace actortrain::model
