#include <actortrain/model/layers/dense.hpp>

#include <memory>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace actortrain::model::layers {

namespace {

// node_state use: vars = {kernel[, bias]}; scratch[0] = D = dLoss/d(XW + b) when the
// activation is not linear (for linear, D is d_out itself and no copy is made).
class dense_op final : public layer {
 public:
  dense_op(int64_t units, activation act, bool use_bias, initializer kernel, initializer bias)
      : units_(units), act_(act), use_bias_(use_bias), kernel_(std::move(kernel)),
        bias_(std::move(bias)) {}

  std::string kind() const override { return "dense"; }

  std::string describe() const override {
    if (!use_bias_)
      return fmt::format("dense({}, {}, use_bias=false, kernel={})", units_, to_string(act_),
                         kernel_.name);
    return fmt::format("dense({}, {}, use_bias=true, kernel={}, bias={})", units_, to_string(act_),
                       kernel_.name, bias_.name);
  }

  int64_t build(variable_registry& reg, const std::vector<int64_t>& input_widths,
                node_state& st) override {
    if (input_widths.size() != 1 || input_widths[0] <= 0)
      throw std::invalid_argument(
        fmt::format("{}: expects exactly one input of positive width, got widths [{}]", label(),
                    fmt::join(input_widths, ", ")));
    st.vars.clear();
    st.vars.push_back(reg.declare("kernel", shape2{input_widths[0], units_}, kernel_));
    if (use_bias_) st.vars.push_back(reg.declare("bias", shape2{1, units_}, bias_));
    st.scratch.resize(1);
    return units_;
  }

  void forward(const forward_context& ctx, const std::vector<const matrix*>& inputs, matrix& out,
               node_state& st) const override {
    const matrix& w = (*ctx.params)[st.vars[0]];
    if (inputs.size() != 1 || inputs[0]->cols() != w.rows())
      throw std::invalid_argument(fmt::format(
        "{}: expects one input of width {} (kernel {}), got {} inputs, the first {}", label(),
        w.rows(), shape_string(w), inputs.size(), inputs.empty() ? "missing" : shape_string(*inputs[0])));
    out.noalias() = *inputs[0] * w;
    activate(act_, out, out, use_bias_ ? &(*ctx.params)[st.vars[1]] : nullptr);
  }

  void backward(const backward_context& ctx, const std::vector<const matrix*>& inputs,
                const matrix& out, const matrix& d_out, const std::vector<matrix*>& d_inputs,
                node_state& st) const override {
    const matrix& x = *inputs[0];
    const matrix& w = (*ctx.params)[st.vars[0]];
    const matrix* d = &d_out;
    if (act_ != activation::linear) {
      if (st.scratch.empty()) st.scratch.resize(1);
      activation_backward(act_, out, d_out, st.scratch[0]);
      d = &st.scratch[0];
    }
    ctx.grads->dense[static_cast<size_t>(st.vars[0])].noalias() += x.transpose() * *d;
    if (use_bias_) {
      auto db = ctx.grads->dense[static_cast<size_t>(st.vars[1])].row(0);
      for (Eigen::Index r = 0; r < d->rows(); ++r) db += d->row(r);
    }
    if (!d_inputs.empty() && d_inputs[0]) d_inputs[0]->noalias() = *d * w.transpose();
  }

 private:
  std::string label() const { return name().empty() ? kind() : name(); }

  int64_t units_;
  activation act_;
  bool use_bias_;
  initializer kernel_;
  initializer bias_;
};

}  // namespace

layer_ptr dense(int64_t units, activation act, bool use_bias, initializer kernel, initializer bias) {
  if (units <= 0) throw std::invalid_argument(fmt::format("dense: units must be positive, got {}", units));
  if (!kernel.fill) throw std::invalid_argument("dense: the kernel initializer is empty");
  if (use_bias && !bias.fill) throw std::invalid_argument("dense: the bias initializer is empty");
  return std::make_shared<dense_op>(units, act, use_bias, std::move(kernel), std::move(bias));
}

}  // namespace actortrain::model::layers
