#include <actortrain/model/optim/rmsprop.hpp>

#include "kernel.hpp"

#include <cmath>

#include <fmt/format.h>

namespace actortrain::model {

namespace {

// Slot order: velocity, [momentum], [average_gradient].
template <bool Momentum, bool Centered>
struct rmsprop_kernel {
  float lr;
  float rho;
  float one_minus_rho;
  float momentum;
  float epsilon;
  void operator()(float* __restrict w, const float* __restrict g, float* const* slots,
                  size_t n) const {
    float* __restrict v = slots[0];
    float* __restrict mom = Momentum ? slots[1] : nullptr;
    float* __restrict mg = Centered ? slots[Momentum ? 2 : 1] : nullptr;
    for (size_t i = 0; i < n; ++i) {
      const float gi = g[i];
      const float vi = rho * v[i] + one_minus_rho * gi * gi;
      v[i] = vi;
      float d;
      if constexpr (Centered) {
        const float mgi = rho * mg[i] + one_minus_rho * gi;
        mg[i] = mgi;
        d = (vi - mgi * mgi) + epsilon;
      } else {
        d = vi + epsilon;
      }
      const float inc = lr * gi / std::sqrt(d);
      if constexpr (Momentum) {
        const float mi = momentum * mom[i] + inc;
        mom[i] = mi;
        w[i] -= mi;
      } else {
        w[i] -= inc;
      }
    }
  }
};

std::vector<std::string> rmsprop_slots(const rmsprop_options& o) {
  std::vector<std::string> names{"velocity"};
  if (o.momentum != 0.0) names.push_back("momentum");
  if (o.centered) names.push_back("average_gradient");
  return names;
}

}  // namespace

rmsprop::rmsprop(const rmsprop_options& o)
  : optimizer("rmsprop", rmsprop_slots(o)), has_momentum_(o.momentum != 0.0) {
  learning_rate_ = declare("learning_rate", o.learning_rate, value_range::non_negative);
  rho_ = declare("rho", o.rho, value_range::unit_open);
  momentum_ = declare("momentum", o.momentum, value_range::unit_closed);
  epsilon_ = declare("epsilon", o.epsilon, value_range::positive);
  centered_ = declare("centered", o.centered ? 1.0 : 0.0, value_range::flag, /*fixed=*/true);
  declare_average(o.use_ema, o.ema_momentum, o.ema_every);
}

optimizer_ptr rmsprop::clone() const {
  return std::make_unique<rmsprop>(*this);
}

std::string rmsprop::check_change(size_t index, double value) const {
  if (index == momentum_ && value != 0.0 && !has_momentum_)
    return fmt::format("momentum cannot become {} at run time: the optimizer was built with "
                       "momentum 0 and has no momentum slot (build it with momentum > 0)",
                       value);
  return {};
}

template <class Run>
void rmsprop::dispatch(double lr_scale, Run&& run) const {
  const auto lr = static_cast<float>(hp(learning_rate_) * lr_scale);
  const auto rho = static_cast<float>(hp(rho_));
  const auto one_minus_rho = static_cast<float>(1.0 - hp(rho_));
  const auto momentum = static_cast<float>(hp(momentum_));
  const auto epsilon = static_cast<float>(hp(epsilon_));
  const bool centered = hp(centered_) != 0.0;
  if (has_momentum_) {
    if (centered)
      run(rmsprop_kernel<true, true>{lr, rho, one_minus_rho, momentum, epsilon});
    else
      run(rmsprop_kernel<true, false>{lr, rho, one_minus_rho, momentum, epsilon});
  } else {
    if (centered)
      run(rmsprop_kernel<false, true>{lr, rho, one_minus_rho, momentum, epsilon});
    else
      run(rmsprop_kernel<false, false>{lr, rho, one_minus_rho, momentum, epsilon});
  }
}

void rmsprop::update_dense(float* values, const float* grads, size_t n, slot_block& s, double lr_scale) const {
  dispatch(lr_scale, [&](const auto& k) { detail::run_dense(k, values, grads, n, s, average(s)); });
}

void rmsprop::update_dense_ahead(float* values, const float* grads, size_t n, slot_block& s, double lr_scale,
                                 float k, float* ahead) const {
  dispatch(lr_scale, [&](const auto& kernel) { detail::run_dense_ahead(kernel, values, grads, n, s, k, ahead, average(s)); });
}

void rmsprop::update_rows(float* values, size_t row_width, const int64_t* rows, size_t num_rows,
                          const float* grad_rows, slot_block& s, double lr_scale) const {
  dispatch(lr_scale, [&](const auto& k) {
    detail::run_rows(k, values, row_width, rows, num_rows, grad_rows, s);
  });
}

optimizer_ptr make_rmsprop(const rmsprop_options& options) {
  return std::make_unique<rmsprop>(options);
}

}  // namespace actortrain::model
