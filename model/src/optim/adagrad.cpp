#include <actortrain/model/optim/adagrad.hpp>

#include "kernel.hpp"

#include <cmath>

namespace actortrain::model {

struct adagrad::kernel {
  float lr;
  float epsilon;
  void operator()(float* __restrict w, const float* __restrict g, float* const* slots,
                  size_t n) const {
    float* __restrict a = slots[0];
    for (size_t i = 0; i < n; ++i) {
      const float gi = g[i];
      const float ai = a[i] + gi * gi;
      a[i] = ai;
      w[i] -= lr * gi / std::sqrt(ai + epsilon);
    }
  }
};

adagrad::adagrad(const adagrad_options& o) : optimizer("adagrad", {"accumulator"}) {
  learning_rate_ = declare("learning_rate", o.learning_rate, value_range::non_negative);
  initial_accumulator_value_ = declare("initial_accumulator_value", o.initial_accumulator_value,
                                       value_range::non_negative, /*fixed=*/true);
  epsilon_ = declare("epsilon", o.epsilon, value_range::positive);
  declare_average(o.use_ema, o.ema_momentum, o.ema_every);
}

optimizer_ptr adagrad::clone() const {
  return std::make_unique<adagrad>(*this);
}

float adagrad::initial_slot_value(size_t) const {
  return static_cast<float>(hp(initial_accumulator_value_));
}

adagrad::kernel adagrad::make_kernel(double lr_scale) const {
  return kernel{static_cast<float>(hp(learning_rate_) * lr_scale), static_cast<float>(hp(epsilon_))};
}

void adagrad::update_dense(float* values, const float* grads, size_t n, slot_block& s, double lr_scale) const {
  detail::run_dense(make_kernel(lr_scale), values, grads, n, s, average(s));
}

void adagrad::update_dense_ahead(float* values, const float* grads, size_t n, slot_block& s, double lr_scale,
                                 float k, float* ahead) const {
  detail::run_dense_ahead(make_kernel(lr_scale), values, grads, n, s, k, ahead, average(s));
}

void adagrad::update_rows(float* values, size_t row_width, const int64_t* rows, size_t num_rows,
                          const float* grad_rows, slot_block& s, double lr_scale) const {
  detail::run_rows(make_kernel(lr_scale), values, row_width, rows, num_rows, grad_rows, s);
}

optimizer_ptr make_adagrad(const adagrad_options& options) {
  return std::make_unique<adagrad>(options);
}

}  // namespace actortrain::model
