#pragma once
// Stochastic gradient descent with optional (Nesterov) momentum, with Keras's update rules
// (keras.optimizers.SGD; TF's ResourceApplyKerasMomentum):
//
//   plain:     w <- w - lr * g
//   momentum:  v <- momentum * v - lr * g;  w <- w + v
//   nesterov:  v <- momentum * v - lr * g;  w <- w + momentum * v - lr * g
//
// The velocity v is kept in units of the step (it already includes lr), as Keras does; a
// learning-rate change therefore affects new gradients only. Nesterov momentum in this
// form is from Sutskever, Martens, Dahl & Hinton, "On the importance of initialization and
// momentum in deep learning", ICML 2013.
//
// Slots: {"momentum"} when built with momentum > 0, {} otherwise (as Keras, which creates
// the slot only for a non-zero momentum). Because the slot layout is fixed at
// construction, momentum can be changed at run time only on an optimizer built with a
// non-zero momentum (it may then go to 0 and back).
//
// apply_rows is lazy: only touched rows and their velocity rows change (TF's
// ResourceSparseApplyKerasMomentum); without momentum it equals apply_dense on those rows.

#include <actortrain/model/optim/optimizer.hpp>

namespace actortrain::model {

struct sgd_options {
  /// Step size. Keras's default 0.01.
  double learning_rate = 0.01;
  /// Velocity decay in [0, 1]; 0 disables momentum (no slot). Keras's default 0.
  double momentum = 0.0;
  /// Nesterov's look-ahead form of momentum (has no effect when momentum is 0).
  bool nesterov = false;
  /// Keep an exponential moving average of the values (optimizer.hpp, "Averaging").
  /// Keras's default false.
  bool use_ema = false;
  /// The average's momentum, in [0, 1). Keras's default 0.99.
  double ema_momentum = 0.99;
  /// Update the average on every k-th apply only (optimizer.hpp, "Averaging"); 1 as Keras.
  int ema_every = 1;
};

class sgd final : public optimizer {
 public:
  /// Throws std::invalid_argument naming the bad option (negative learning rate,
  /// momentum outside [0, 1]).
  explicit sgd(const sgd_options& options = {});
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
  // Built with momentum > 0: slot 0 is the velocity (an average slot comes after it).
  bool has_velocity() const { return num_slots() > (average_slot() >= 0 ? 1u : 0u); }

  size_t learning_rate_;
  size_t momentum_;
  size_t nesterov_;
};

/// An SGD optimizer with the given options.
optimizer_ptr make_sgd(const sgd_options& options = {});

}  // namespace actortrain::model
