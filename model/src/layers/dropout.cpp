#include <actortrain/model/layers/dropout.hpp>
#include <actortrain/model/random.hpp>

#include <memory>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace actortrain::model::layers {

namespace {

// node_state use: ids = {built width, 1 if the last forward applied a mask else 0};
// scratch[0] = the mask of the last training forward, entries 0 or 1 / (1 - rate).
class dropout_op final : public layer {
 public:
  explicit dropout_op(float rate) : rate_(rate), scale_(1.0f / (1.0f - rate)) {}

  std::string kind() const override { return "dropout"; }
  std::string describe() const override { return fmt::format("dropout({})", rate_); }

  int64_t build(variable_registry&, const std::vector<int64_t>& input_widths,
                node_state& st) override {
    if (input_widths.size() != 1 || input_widths[0] <= 0)
      throw std::invalid_argument(fmt::format("{}: expects one input of positive width, got widths [{}]",
                                              label(), fmt::join(input_widths, ", ")));
    st.vars.clear();
    st.ids.assign({input_widths[0], 0});
    st.scratch.resize(1);
    return input_widths[0];
  }

  void forward(const forward_context& ctx, const std::vector<const matrix*>& inputs, matrix& out,
               node_state& st) const override {
    if (inputs.size() != 1 || inputs[0]->cols() != st.ids[0])
      throw std::invalid_argument(fmt::format("{}: expects one input of width {}, got {} inputs, the first {}",
                                              label(), st.ids[0], inputs.size(),
                                              inputs.empty() ? "missing" : shape_string(*inputs[0])));
    const matrix& x = *inputs[0];
    if (!ctx.training || rate_ == 0.0f) {
      st.ids[1] = 0;
      out = x;
      return;
    }
    st.ids[1] = 1;
    if (st.scratch.empty()) st.scratch.resize(1);
    matrix& mask = st.scratch[0];
    mask.resize(x.rows(), x.cols());
    out.resize(x.rows(), x.cols());
    const auto node = static_cast<uint64_t>(ctx.node_index);
    const Eigen::Index size = x.size();
    const float* in = x.data();
    float* m = mask.data();
    float* o = out.data();
    // Row-major storage: flat index i is r * cols + c.
    for (Eigen::Index i = 0; i < size; ++i) {
      const bool keep = uniform01(draw(ctx.step_seed, node, static_cast<uint64_t>(i))) >= rate_;
      m[i] = keep ? scale_ : 0.0f;
      o[i] = in[i] * m[i];
    }
  }

  void backward(const backward_context&, const std::vector<const matrix*>&, const matrix&,
                const matrix& d_out, const std::vector<matrix*>& d_inputs,
                node_state& st) const override {
    if (d_inputs.empty() || !d_inputs[0]) return;
    if (st.ids[1] == 0)
      *d_inputs[0] = d_out;
    else
      d_inputs[0]->noalias() = (d_out.array() * st.scratch[0].array()).matrix();
  }

 private:
  std::string label() const { return name().empty() ? kind() : name(); }

  float rate_;
  float scale_;
};

}  // namespace

layer_ptr dropout(float rate) {
  if (!(rate >= 0.0f && rate < 1.0f))
    throw std::invalid_argument(fmt::format("dropout: rate must be in [0, 1), got {}", rate));
  return std::make_shared<dropout_op>(rate);
}

}  // namespace actortrain::model::layers
