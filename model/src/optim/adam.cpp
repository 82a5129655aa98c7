#include <actortrain/model/optim/adam.hpp>

#include "kernel.hpp"

#include <cmath>

namespace actortrain::model {

struct adam::kernel {
  float one_minus_beta_1;
  float one_minus_beta_2;
  float lr_t;
  float epsilon;
  void operator()(float* __restrict w, const float* __restrict g, float* const* slots,
                  size_t n) const {
    float* __restrict m = slots[0];
    float* __restrict v = slots[1];
    for (size_t i = 0; i < n; ++i) {
      const float gi = g[i];
      const float mi = m[i] + (gi - m[i]) * one_minus_beta_1;
      const float vi = v[i] + (gi * gi - v[i]) * one_minus_beta_2;
      m[i] = mi;
      v[i] = vi;
      w[i] -= lr_t * mi / (std::sqrt(vi) + epsilon);
    }
  }
};

adam::adam(const adam_options& o) : optimizer("adam", {"m", "v"}) {
  learning_rate_ = declare("learning_rate", o.learning_rate, value_range::non_negative);
  beta_1_ = declare("beta_1", o.beta_1, value_range::unit_open);
  beta_2_ = declare("beta_2", o.beta_2, value_range::unit_open);
  epsilon_ = declare("epsilon", o.epsilon, value_range::positive);
  declare_average(o.use_ema, o.ema_momentum, o.ema_every);
}

optimizer_ptr adam::clone() const {
  return std::make_unique<adam>(*this);
}

adam::kernel adam::make_kernel(int64_t t, double lr_scale) const {
  const double b1 = hp(beta_1_);
  const double b2 = hp(beta_2_);
  const double td = static_cast<double>(t);
  const double lr_t = hp(learning_rate_) * lr_scale * std::sqrt(1.0 - std::pow(b2, td)) /
                      (1.0 - std::pow(b1, td));
  return kernel{static_cast<float>(1.0 - b1), static_cast<float>(1.0 - b2),
                static_cast<float>(lr_t), static_cast<float>(hp(epsilon_))};
}

void adam::update_dense(float* values, const float* grads, size_t n, slot_block& s, double lr_scale) const {
  detail::run_dense(make_kernel(s.iterations, lr_scale), values, grads, n, s, average(s));
}

void adam::update_dense_ahead(float* values, const float* grads, size_t n, slot_block& s, double lr_scale,
                              float k, float* ahead) const {
  detail::run_dense_ahead(make_kernel(s.iterations, lr_scale), values, grads, n, s, k, ahead, average(s));
}

void adam::update_rows(float* values, size_t row_width, const int64_t* rows, size_t num_rows,
                       const float* grad_rows, slot_block& s, double lr_scale) const {
  detail::run_rows(make_kernel(s.iterations, lr_scale), values, row_width, rows, num_rows, grad_rows, s);
}

optimizer_ptr make_adam(const adam_options& options) {
  return std::make_unique<adam>(options);
}

}  // namespace actortrain::model
