#include <actortrain/model/optim/sgd.hpp>

#include "kernel.hpp"

#include <fmt/format.h>

namespace actortrain::model {

namespace {

struct plain_kernel {
  float lr;
  void operator()(float* __restrict w, const float* __restrict g, float* const*, size_t n) const {
    for (size_t i = 0; i < n; ++i) w[i] -= lr * g[i];
  }
};

struct momentum_kernel {
  float lr;
  float momentum;
  void operator()(float* __restrict w, const float* __restrict g, float* const* slots,
                  size_t n) const {
    float* __restrict v = slots[0];
    for (size_t i = 0; i < n; ++i) {
      const float vi = momentum * v[i] - lr * g[i];
      v[i] = vi;
      w[i] += vi;
    }
  }
};

struct nesterov_kernel {
  float lr;
  float momentum;
  void operator()(float* __restrict w, const float* __restrict g, float* const* slots,
                  size_t n) const {
    float* __restrict v = slots[0];
    for (size_t i = 0; i < n; ++i) {
      const float step = lr * g[i];
      const float vi = momentum * v[i] - step;
      v[i] = vi;
      w[i] += momentum * vi - step;
    }
  }
};

std::vector<std::string> sgd_slots(const sgd_options& o) {
  if (o.momentum != 0.0) return {"momentum"};
  return {};
}

}  // namespace

sgd::sgd(const sgd_options& o) : optimizer("sgd", sgd_slots(o)) {
  learning_rate_ = declare("learning_rate", o.learning_rate, value_range::non_negative);
  momentum_ = declare("momentum", o.momentum, value_range::unit_closed);
  nesterov_ = declare("nesterov", o.nesterov ? 1.0 : 0.0, value_range::flag);
  declare_average(o.use_ema, o.ema_momentum, o.ema_every);
}

optimizer_ptr sgd::clone() const {
  return std::make_unique<sgd>(*this);
}

std::string sgd::check_change(size_t index, double value) const {
  if (index == momentum_ && value != 0.0 && !has_velocity())
    return fmt::format("momentum cannot become {} at run time: the optimizer was built with "
                       "momentum 0 and has no velocity slot (build it with momentum > 0)",
                       value);
  return {};
}

// Picks the kernel once per call; `run` receives it and runs the dense or the row path.
template <class Run>
void sgd::dispatch(double lr_scale, Run&& run) const {
  const auto lr = static_cast<float>(hp(learning_rate_) * lr_scale);
  const auto momentum = static_cast<float>(hp(momentum_));
  if (!has_velocity())
    run(plain_kernel{lr});
  else if (hp(nesterov_) != 0.0)
    run(nesterov_kernel{lr, momentum});
  else
    run(momentum_kernel{lr, momentum});
}

void sgd::update_dense(float* values, const float* grads, size_t n, slot_block& s, double lr_scale) const {
  dispatch(lr_scale, [&](const auto& k) { detail::run_dense(k, values, grads, n, s, average(s)); });
}

void sgd::update_dense_ahead(float* values, const float* grads, size_t n, slot_block& s, double lr_scale,
                             float k, float* ahead) const {
  dispatch(lr_scale, [&](const auto& kernel) { detail::run_dense_ahead(kernel, values, grads, n, s, k, ahead, average(s)); });
}

void sgd::update_rows(float* values, size_t row_width, const int64_t* rows, size_t num_rows,
                      const float* grad_rows, slot_block& s, double lr_scale) const {
  dispatch(lr_scale, [&](const auto& k) {
    detail::run_rows(k, values, row_width, rows, num_rows, grad_rows, s);
  });
}

optimizer_ptr make_sgd(const sgd_options& options) {
  return std::make_unique<sgd>(options);
}

}  // namespace actortrain::model
