#include <actortrain/model/layers/merge.hpp>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace actortrain::model::layers {

namespace {

// "[3 x 4], [3 x 5]" for error messages.
std::string shapes_string(const std::vector<const matrix*>& inputs) {
  std::vector<std::string> s;
  s.reserve(inputs.size());
  for (const auto* m : inputs) s.push_back(shape_string(*m));
  return fmt::format("{}", fmt::join(s, ", "));
}

// True when the inputs are as built: widths[i] columns each and equal row counts.
bool fits(const std::vector<const matrix*>& inputs, const std::vector<int64_t>& widths) {
  if (inputs.size() != widths.size()) return false;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i]->cols() != widths[i] || inputs[i]->rows() != inputs[0]->rows()) return false;
  return true;
}

// node_state use (both layers): ids = the built input widths.
class merge_op : public layer {
 protected:
  std::string label() const { return name().empty() ? kind() : name(); }

  void check(const std::vector<const matrix*>& inputs, const node_state& st) const {
    if (!fits(inputs, st.ids))
      throw std::invalid_argument(fmt::format("{}: built for inputs of widths [{}], got {}", label(),
                                              fmt::join(st.ids, ", "), shapes_string(inputs)));
  }
};

class concatenate_op final : public merge_op {
 public:
  std::string kind() const override { return "concatenate"; }
  std::string describe() const override { return "concatenate"; }

  int64_t build(variable_registry&, const std::vector<int64_t>& input_widths,
                node_state& st) override {
    if (input_widths.empty() ||
        std::any_of(input_widths.begin(), input_widths.end(), [](int64_t w) { return w <= 0; }))
      throw std::invalid_argument(fmt::format("{}: expects one or more inputs of positive width, got widths [{}]",
                                              label(), fmt::join(input_widths, ", ")));
    st.vars.clear();
    st.ids = input_widths;
    int64_t total = 0;
    for (auto w : input_widths) total += w;
    return total;
  }

  void forward(const forward_context&, const std::vector<const matrix*>& inputs, matrix& out,
               node_state& st) const override {
    check(inputs, st);
    Eigen::Index total = 0;
    for (auto w : st.ids) total += w;
    out.resize(inputs[0]->rows(), total);
    Eigen::Index offset = 0;
    for (const auto* x : inputs) {
      out.middleCols(offset, x->cols()) = *x;
      offset += x->cols();
    }
  }

  void backward(const backward_context&, const std::vector<const matrix*>&, const matrix&,
                const matrix& d_out, const std::vector<matrix*>& d_inputs,
                node_state& st) const override {
    Eigen::Index offset = 0;
    for (size_t i = 0; i < st.ids.size(); ++i) {
      if (i < d_inputs.size() && d_inputs[i]) *d_inputs[i] = d_out.middleCols(offset, st.ids[i]);
      offset += st.ids[i];
    }
  }
};

class add_op final : public merge_op {
 public:
  std::string kind() const override { return "add"; }
  std::string describe() const override { return "add"; }

  int64_t build(variable_registry&, const std::vector<int64_t>& input_widths,
                node_state& st) override {
    const bool equal = std::all_of(input_widths.begin(), input_widths.end(),
                                   [&](int64_t w) { return w == input_widths[0]; });
    if (input_widths.size() < 2 || !equal || input_widths[0] <= 0)
      throw std::invalid_argument(
        fmt::format("{}: expects two or more inputs of one positive width, got widths [{}]", label(),
                    fmt::join(input_widths, ", ")));
    st.vars.clear();
    st.ids = input_widths;
    return input_widths[0];
  }

  void forward(const forward_context&, const std::vector<const matrix*>& inputs, matrix& out,
               node_state& st) const override {
    check(inputs, st);
    if (inputs.size() == 2) {
      out.noalias() = *inputs[0] + *inputs[1];
      return;
    }
    out = *inputs[0];
    for (size_t i = 1; i < inputs.size(); ++i) out += *inputs[i];
  }

  void backward(const backward_context&, const std::vector<const matrix*>&, const matrix&,
                const matrix& d_out, const std::vector<matrix*>& d_inputs,
                node_state&) const override {
    for (auto* d : d_inputs)
      if (d) *d = d_out;
  }
};

}  // namespace

layer_ptr concatenate() { return std::make_shared<concatenate_op>(); }
layer_ptr add() { return std::make_shared<add_op>(); }

}  // namespace actortrain::model::layers
