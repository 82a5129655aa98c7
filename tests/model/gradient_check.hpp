#pragma once
// Finite-difference gradient checks, for layer tests and whole-model tests.
//
// The central checker, check_gradients(), perturbs every entry x of the tensors it is
// given by +-h (h = step * max(1, |x|), rounded to what float can hold: the difference
// quotient divides by the step actually taken), evaluates a scalar objective in double
// precision, and compares (f(x+) - f(x-)) / (x+ - x-) with the analytic gradient:
//
//   rel = |analytic - numeric| / max(|analytic|, |numeric|, floor)
//
// The floor keeps float noise on near-zero gradients from counting as a relative error;
// with the defaults (step 1e-3, tolerance 1e-2, floor 0.1) a wrong sign, a missing term or
// a factor of two is caught on any entry whose gradient is above ~1e-3, while rounding
// noise of float forward passes (~1e-4 after the division by 2h) passes.
//
// For layers, check_layer_gradients() builds the layer on a test_registry, initializes
// its variables, runs forward, draws a fixed random R of the output's shape, runs backward
// with d_out = R (so the objective is sum(out .* R)), and checks every variable (sparse
// gradients densified: untouched rows must be zero) and every input when
// inputs_differentiable(). Objectives with kinks (relu, dropout masks) need inputs away
// from them by more than h.

#include <actortrain/model/layer.hpp>
#include <actortrain/model/random.hpp>
#include <actortrain/model/tensor.hpp>
#include <actortrain/model/variable.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace actortrain::model::testing {

/// A variable_registry for tests: declares "<prefix>/<local_name>" in `specs`, returns the
/// same id when a name is declared again (a shared layer's second build) and throws
/// std::invalid_argument when the shape or the sparsity differs.
class test_registry : public variable_registry {
 public:
  std::string prefix;
  std::vector<variable_spec> specs;

  variable_id declare(const std::string& local_name, shape2 shape, initializer init,
                      bool sparse = false) override {
    const std::string name = prefix + "/" + local_name;
    if (auto it = by_name_.find(name); it != by_name_.end()) {
      const auto& s = specs[static_cast<size_t>(it->second)];
      if (s.shape != shape || s.sparse != sparse)
        throw std::invalid_argument(fmt::format("test_registry: '{}' declared as {} and again as {}",
                                                name, to_string(s.shape), to_string(shape)));
      return it->second;
    }
    const auto id = static_cast<variable_id>(specs.size());
    specs.push_back(variable_spec{name, shape, std::move(init), sparse});
    by_name_.emplace(name, id);
    return id;
  }

  /// The id of `<prefix>/<local_name>` as declared, or -1.
  variable_id find(const std::string& full_name) const {
    auto it = by_name_.find(full_name);
    return it == by_name_.end() ? -1 : it->second;
  }

 private:
  std::map<std::string, variable_id> by_name_;
};

/// Builds `l` on `reg` (prefix = the layer's name, set to its kind() when empty).
inline int64_t build_layer(layer& l, test_registry& reg, const std::vector<int64_t>& widths,
                           node_state& st) {
  if (l.name().empty()) l.set_name(l.kind());
  reg.prefix = l.name();
  return l.build(reg, widths, st);
}

/// rows x cols drawn from U(lo, hi), a pure function of `seed`.
inline matrix random_matrix(Eigen::Index rows, Eigen::Index cols, uint64_t seed, float lo = -1.0f,
                            float hi = 1.0f) {
  rng g{seed, 0x7465737473ULL};
  matrix m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = lo + (hi - lo) * g.uniform();
  return m;
}

/// sum(out .* weights), accumulated in double: the scalar objective of the checks.
inline double weighted_sum(const matrix& out, const matrix& weights) {
  if (out.rows() != weights.rows() || out.cols() != weights.cols())
    throw std::invalid_argument(fmt::format("weighted_sum: {} against weights {}", shape_string(out),
                                            shape_string(weights)));
  double s = 0.0;
  for (Eigen::Index i = 0; i < out.size(); ++i)
    s += static_cast<double>(out.data()[i]) * weights.data()[i];
  return s;
}

/// A sparse row gradient as a full matrix of `shape` (rows not listed are zero). Throws
/// std::logic_error when the ids are not sorted and unique, as sparse_rows promises.
inline matrix densify(const sparse_rows& s, shape2 shape) {
  matrix d = matrix::Zero(shape.rows, shape.cols);
  for (size_t i = 0; i < s.ids.size(); ++i) {
    if (i > 0 && s.ids[i] <= s.ids[i - 1])
      throw std::logic_error(fmt::format("sparse_rows: ids not sorted and unique at position {}", i));
    d.row(s.ids[i]) += s.rows.row(static_cast<Eigen::Index>(i));
  }
  return d;
}

struct gradient_check_options {
  double step = 1e-3;       ///< perturbation, relative to max(1, |x|)
  double tolerance = 1e-2;  ///< largest relative error that passes
  double floor = 1e-1;      ///< |g| floor of the relative error's denominator
  int64_t max_entries = 0;  ///< per tensor: 0 checks every entry, else an even spread of this many
};

struct gradient_check_result {
  bool passed = true;
  double max_rel_error = 0.0;
  int64_t checked = 0;  ///< entries compared
  std::string worst;    ///< the entry with the largest error, for the failure message
};

/// A tensor to check: `value` is perturbed in place (and restored), `analytic` is the
/// gradient of the objective with respect to it (same shape).
struct checked_tensor {
  std::string name;
  matrix* value = nullptr;
  matrix analytic;
};

/// Compares `analytic` gradients with central differences of `objective`, which must read
/// the tensors through their `value` pointers. Throws std::invalid_argument when a
/// gradient's shape differs from its tensor's.
inline gradient_check_result check_gradients(const std::function<double()>& objective,
                                             const std::vector<checked_tensor>& tensors,
                                             const gradient_check_options& opt = {}) {
  gradient_check_result res;
  res.worst = "(nothing checked)";
  for (const auto& t : tensors) {
    matrix& x = *t.value;
    if (t.analytic.rows() != x.rows() || t.analytic.cols() != x.cols())
      throw std::invalid_argument(fmt::format("check_gradients: gradient of '{}' is {}, the tensor {}",
                                              t.name, shape_string(t.analytic), shape_string(x)));
    const Eigen::Index size = x.size();
    const Eigen::Index stride =
      opt.max_entries > 0 && size > opt.max_entries ? (size + opt.max_entries - 1) / opt.max_entries : 1;
    for (Eigen::Index i = 0; i < size; i += stride) {
      float& v = x.data()[i];
      const float orig = v;
      const double h = opt.step * std::max(1.0, std::abs(static_cast<double>(orig)));
      const float up = static_cast<float>(orig + h);
      const float down = static_cast<float>(orig - h);
      v = up;
      const double f_up = objective();
      v = down;
      const double f_down = objective();
      v = orig;
      const double numeric = (f_up - f_down) / (static_cast<double>(up) - down);
      const double analytic = t.analytic.data()[i];
      const double denom = std::max({std::abs(analytic), std::abs(numeric), opt.floor});
      const double rel = std::abs(analytic - numeric) / denom;
      ++res.checked;
      if (res.checked == 1 || rel > res.max_rel_error) {
        res.max_rel_error = rel;
        res.worst = fmt::format("{}[{}, {}]: analytic {:.6g}, numeric {:.6g}, relative error {:.3g}",
                                  t.name, i / x.cols(), i % x.cols(), analytic, numeric, rel);
      }
    }
  }
  res.passed = res.max_rel_error <= opt.tolerance;
  return res;
}

/// The gradient of every variable of `grads` as full matrices (sparse ones densified).
inline std::vector<matrix> dense_gradients(const gradient_store& grads,
                                           const std::vector<variable_spec>& specs) {
  std::vector<matrix> out;
  for (size_t i = 0; i < specs.size(); ++i)
    out.push_back(specs[i].sparse ? densify(grads.sparse[i], specs[i].shape) : grads.dense[i]);
  return out;
}

/// Checks one application of `l` on `inputs`: variables seeded from `seed`, objective
/// sum(out .* R) with R ~ U(-1, 1) from seed + 1. `ctx` supplies training and step_seed
/// (its params are set here). Inputs are checked only when l.inputs_differentiable().
inline gradient_check_result check_layer_gradients(layer& l, std::vector<matrix> inputs,
                                                   forward_context ctx = {}, uint64_t seed = 7,
                                                   const gradient_check_options& opt = {}) {
  test_registry reg;
  node_state st;
  std::vector<int64_t> widths;
  for (const auto& x : inputs) widths.push_back(x.cols());
  build_layer(l, reg, widths, st);
  parameter_store params{reg.specs, seed};
  ctx.params = &params;

  std::vector<const matrix*> in_ptrs;
  for (const auto& x : inputs) in_ptrs.push_back(&x);
  matrix out;
  l.forward(ctx, in_ptrs, out, st);
  const matrix r = random_matrix(out.rows(), out.cols(), seed + 1);

  gradient_store grads{reg.specs};
  std::vector<matrix> d_in(inputs.size());
  std::vector<matrix*> d_ptrs(inputs.size(), nullptr);
  const bool diff = l.inputs_differentiable();
  if (diff)
    for (size_t i = 0; i < inputs.size(); ++i) d_ptrs[i] = &d_in[i];
  l.backward(backward_context{&params, &grads}, in_ptrs, out, r, d_ptrs, st);

  std::vector<checked_tensor> tensors;
  auto analytic = dense_gradients(grads, reg.specs);
  for (size_t i = 0; i < reg.specs.size(); ++i)
    tensors.push_back({reg.specs[i].name, &params[static_cast<variable_id>(i)], std::move(analytic[i])});
  if (diff)
    for (size_t i = 0; i < inputs.size(); ++i)
      tensors.push_back({fmt::format("input {}", i), &inputs[i], d_in[i]});

  node_state probe = st;
  matrix probe_out;
  auto objective = [&] {
    l.forward(ctx, in_ptrs, probe_out, probe);
    return weighted_sum(probe_out, r);
  };
  return check_gradients(objective, tensors, opt);
}

}  // namespace actortrain::model::testing
