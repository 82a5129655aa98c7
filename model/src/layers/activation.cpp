#include <actortrain/model/layers/activation.hpp>

#include <memory>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace actortrain::model {

std::string to_string(activation a) {
  switch (a) {
    case activation::linear: return "linear";
    case activation::relu: return "relu";
    case activation::tanh: return "tanh";
    case activation::sigmoid: return "sigmoid";
    case activation::softmax: return "softmax";
  }
  return "unknown";
}

namespace layers {

namespace {

// Calls f(in, out) once per row with `in` = z.row(r) (+ bias) and `out` = y.row(r), both
// as arrays, so each activation is written once and the bias add fuses into its pass.
// In-place use (&y == &z) is safe: every f below reads element c before writing it.
template <class F>
void for_each_row(const matrix& z, const matrix* bias, matrix& y, F f) {
  if (&y != &z) y.resize(z.rows(), z.cols());
  if (bias) {
    const auto b = bias->row(0).array();
    for (Eigen::Index r = 0; r < z.rows(); ++r) f(z.row(r).array() + b, y.row(r).array());
  } else {
    for (Eigen::Index r = 0; r < z.rows(); ++r) f(z.row(r).array(), y.row(r).array());
  }
}

}  // namespace

void activate(activation a, const matrix& z, matrix& y, const matrix* bias) {
  switch (a) {
    case activation::linear:
      if (!bias) {
        if (&y != &z) y = z;
        return;
      }
      for_each_row(z, bias, y, [](const auto& in, auto&& out) { out = in; });
      return;
    case activation::relu:
      for_each_row(z, bias, y, [](const auto& in, auto&& out) { out = in.max(0.0f); });
      return;
    case activation::tanh:
      for_each_row(z, bias, y, [](const auto& in, auto&& out) { out = in.tanh(); });
      return;
    case activation::sigmoid:
      for_each_row(z, bias, y, [](const auto& in, auto&& out) { out = in.logistic(); });
      return;
    case activation::softmax:
      for_each_row(z, bias, y, [](const auto& in, auto&& out) {
        const float m = in.maxCoeff();
        out = (in - m).exp();
        out *= 1.0f / out.sum();
      });
      return;
  }
}

void activation_backward(activation a, const matrix& y, const matrix& g, matrix& d) {
  if (&d != &g) d.resize(y.rows(), y.cols());
  switch (a) {
    case activation::linear:
      if (&d != &g) d = g;
      return;
    case activation::relu:
      d.array() = (y.array() > 0.0f).select(g.array(), 0.0f);
      return;
    case activation::tanh:
      d.array() = g.array() * (1.0f - y.array().square());
      return;
    case activation::sigmoid:
      d.array() = g.array() * y.array() * (1.0f - y.array());
      return;
    case activation::softmax:
      for (Eigen::Index r = 0; r < y.rows(); ++r) {
        const auto yr = y.row(r).array();
        const float s = (g.row(r).array() * yr).sum();
        d.row(r).array() = yr * (g.row(r).array() - s);
      }
      return;
  }
}

namespace {

// build() stores the input width in st.ids[0]; forward() checks the batch against it.
class activation_op final : public layer {
 public:
  explicit activation_op(activation a) : act_(a) {}

  std::string describe() const override { return to_string(act_); }
  std::string kind() const override { return to_string(act_); }

  int64_t build(variable_registry&, const std::vector<int64_t>& input_widths,
                node_state& st) override {
    if (input_widths.size() != 1 || input_widths[0] <= 0)
      throw std::invalid_argument(fmt::format("{}: expects one input of positive width, got widths [{}]",
                                              label(), fmt::join(input_widths, ", ")));
    st.vars.clear();
    st.ids.assign(1, input_widths[0]);
    return input_widths[0];
  }

  void forward(const forward_context&, const std::vector<const matrix*>& inputs, matrix& out,
               node_state& st) const override {
    if (inputs.size() != 1 || inputs[0]->cols() != st.ids[0])
      throw std::invalid_argument(fmt::format("{}: expects one input of width {}, got {} inputs, the first {}",
                                              label(), st.ids[0], inputs.size(),
                                              inputs.empty() ? "missing" : shape_string(*inputs[0])));
    activate(act_, *inputs[0], out);
  }

  void backward(const backward_context&, const std::vector<const matrix*>&, const matrix& out,
                const matrix& d_out, const std::vector<matrix*>& d_inputs,
                node_state&) const override {
    if (!d_inputs.empty() && d_inputs[0]) activation_backward(act_, out, d_out, *d_inputs[0]);
  }

 private:
  std::string label() const { return name().empty() ? kind() : name(); }

  activation act_;
};

}  // namespace

layer_ptr activation_layer(activation a) { return std::make_shared<activation_op>(a); }
layer_ptr relu() { return activation_layer(activation::relu); }
layer_ptr tanh() { return activation_layer(activation::tanh); }
layer_ptr sigmoid() { return activation_layer(activation::sigmoid); }
layer_ptr softmax() { return activation_layer(activation::softmax); }

}  // namespace layers
}  // namespace actortrain::model
