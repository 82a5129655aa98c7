#include <actortrain/model/train_step.hpp>

#include "builtin_step.hpp"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

namespace actortrain::model {

const matrix& step_context::forward() { return forward(data_.features); }

const matrix& step_context::forward(const std::vector<matrix>& inputs) {
  return ex_.forward(params_, inputs, true, key_);
}

void step_context::backward(const matrix& d_outputs) { ex_.backward(params_, d_outputs, grads_); }

double step_context::compute_loss(const matrix& out, const matrix& labels, matrix* d_out) const {
  return loss_.compute(out, labels, d_out);
}

void step_context::update_metrics(const matrix& out, const matrix& labels) {
  if (!metrics_) return;
  for (auto& m : *metrics_) m->update(out, labels);
}

double detail::builtin_step(step_context& ctx) {
  const matrix& out = ctx.forward();
  matrix& d_out = ctx.d_out_buffer();
  double l = ctx.compute_loss(out, ctx.data().labels, &d_out);
  ctx.update_metrics(out, ctx.data().labels);
  ctx.backward(d_out);
  return l;
}

logs default_train_step(step_context& ctx) { return {{"loss", detail::builtin_step(ctx)}}; }

double clip_by_global_norm(gradient_store& grads, double max_norm) {
  if (!(max_norm > 0)) throw std::invalid_argument(fmt::format("clip_by_global_norm: max_norm = {} (> 0)", max_norm));
  double sq = 0;
  for (size_t v = 0; v < grads.size(); ++v) {
    if (grads.is_sparse[v])
      sq += static_cast<double>(grads.sparse[v].rows.squaredNorm());
    else
      sq += static_cast<double>(grads.dense[v].squaredNorm());
  }
  const double norm = std::sqrt(sq);
  if (norm > max_norm) {
    const auto scale = static_cast<float>(max_norm / norm);
    for (size_t v = 0; v < grads.size(); ++v) {
      if (grads.is_sparse[v])
        grads.sparse[v].rows *= scale;
      else
        grads.dense[v] *= scale;
    }
  }
  return norm;
}

step_function clipped_step(double max_norm) {
  if (!(max_norm > 0)) throw std::invalid_argument(fmt::format("clipped_step: max_norm = {} (> 0)", max_norm));
  return {fmt::format("clip_by_global_norm({})", max_norm), [max_norm](step_context& s) {
            auto l = default_train_step(s);
            clip_by_global_norm(s.gradients(), max_norm);
            return l;
          }};
}

}  // namespace actortrain::model
