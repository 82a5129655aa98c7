#include <actortrain/model/model.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

namespace actortrain::model {

struct model::compiled {
  struct node {
    layer_ptr op;                 // null for inputs
    std::vector<int32_t> inputs;  // indices into nodes (topological: always smaller)
    int64_t width = 0;
    int32_t input_slot = -1;      // for inputs: position in the feed
    bool needs_grad = false;      // some variable depends on it through a differentiable path
  };
  std::vector<node> nodes;        // reachable part of the graph, topological order
  std::vector<node_state> states; // build() results, copied into each executor
  std::vector<int32_t> input_nodes;
  int32_t output = -1;
  std::vector<variable_spec> variables;
  std::map<std::string, variable_id> by_name;
  std::vector<std::vector<int32_t>> row_feeds;  // per variable (see model::row_feeds)
  std::vector<bool> compact_rows;               // per variable (see model::compact_rows)
};

symbol graph::input(int64_t width, std::string name) {
  if (width <= 0) throw std::invalid_argument(fmt::format("graph input '{}': width {} <= 0", name, width));
  if (name.empty()) name = fmt::format("input_{}", nodes_.size());
  nodes_.push_back(node{nullptr, {}, width, std::move(name)});
  return symbol{static_cast<int32_t>(nodes_.size() - 1)};
}

symbol graph::apply(layer_ptr l, std::vector<symbol> inputs) {
  if (!l) throw std::invalid_argument("graph::apply: null layer");
  if (inputs.empty()) throw std::invalid_argument(fmt::format("graph::apply({}): no inputs", l->describe()));
  node n{std::move(l), {}, 0, {}};
  for (auto s : inputs) {
    if (s.node < 0 || s.node >= static_cast<int32_t>(nodes_.size()))
      throw std::invalid_argument(
        fmt::format("graph::apply({}): input symbol {} is not of this graph", n.op->describe(), s.node));
    n.inputs.push_back(s.node);
  }
  nodes_.push_back(std::move(n));
  return symbol{static_cast<int32_t>(nodes_.size() - 1)};
}

variable_id variable_registry::declare_dynamic(const std::string& local_name, int64_t, initializer, uint64_t,
                                              uint64_t) {
  throw std::invalid_argument(
    fmt::format("variable '{}': this registry holds no dynamic tables (variable_spec::dynamic)", local_name));
}

namespace {

class registry : public variable_registry {
 public:
  registry(model::compiled& c, std::string prefix) : c_(c), prefix_(std::move(prefix)) {}
  variable_id declare(const std::string& local, shape2 shape, initializer init, bool sparse) override {
    auto name = prefix_ + "/" + local;
    if (auto i = c_.by_name.find(name); i != c_.by_name.end()) {
      auto& v = c_.variables[static_cast<size_t>(i->second)];
      if (v.shape != shape || v.sparse != sparse || v.dynamic)
        throw std::invalid_argument(fmt::format("variable '{}' declared as {} and again as {}", name,
                                                to_string(v.shape), to_string(shape)));
      return i->second;
    }
    auto id = static_cast<variable_id>(c_.variables.size());
    c_.variables.push_back(variable_spec{name, shape, std::move(init), sparse});
    c_.by_name.emplace(name, id);
    return id;
  }
  variable_id declare_dynamic(const std::string& local, int64_t dim, initializer init, uint64_t admit_after,
                              uint64_t evict_after) override {
    auto name = prefix_ + "/" + local;
    if (auto i = c_.by_name.find(name); i != c_.by_name.end()) {
      auto& v = c_.variables[static_cast<size_t>(i->second)];
      if (!v.dynamic || v.shape.cols != dim)
        throw std::invalid_argument(fmt::format("variable '{}' declared as {} and again as a dynamic table of width {}",
                                                name, to_string(v.shape), dim));
      return i->second;
    }
    auto id = static_cast<variable_id>(c_.variables.size());
    variable_spec s{name, shape2{0, dim}, std::move(init), /*sparse=*/true};
    s.dynamic = true;
    s.admit_after = admit_after;
    s.evict_after = evict_after;
    c_.variables.push_back(std::move(s));
    c_.by_name.emplace(name, id);
    return id;
  }

 private:
  model::compiled& c_;
  std::string prefix_;
};

}  // namespace

model model::functional(const graph& g, std::vector<symbol> inputs, symbol output) {
  const auto& gn = g.nodes();
  auto in_graph = [&](symbol s) { return s.node >= 0 && s.node < static_cast<int32_t>(gn.size()); };
  if (!in_graph(output)) throw std::invalid_argument("model::functional: output is not of this graph");
  if (inputs.empty()) throw std::invalid_argument("model::functional: no inputs");
  std::map<int32_t, int32_t> slot_of;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!in_graph(inputs[i]) || gn[static_cast<size_t>(inputs[i].node)].op)
      throw std::invalid_argument(fmt::format("model::functional: inputs[{}] is not a graph input", i));
    if (!slot_of.emplace(inputs[i].node, static_cast<int32_t>(i)).second)
      throw std::invalid_argument(fmt::format("model::functional: inputs[{}] listed twice", i));
  }
  // Reachable set, walking back from the output.
  std::vector<bool> used(gn.size(), false);
  // Listed inputs are kept even when the output does not use them (they are still fed).
  std::vector<int32_t> stack{output.node};
  for (auto s : inputs) stack.push_back(s.node);
  while (!stack.empty()) {
    auto n = stack.back();
    stack.pop_back();
    if (used[static_cast<size_t>(n)]) continue;
    used[static_cast<size_t>(n)] = true;
    for (auto i : gn[static_cast<size_t>(n)].inputs) stack.push_back(i);
  }
  auto c = std::make_shared<compiled>();
  std::vector<int32_t> new_index(gn.size(), -1);
  c->input_nodes.assign(inputs.size(), -1);
  // Default names as Keras gives them: "dense", "dense_1", ... in graph order; a layer
  // object keeps the name it already has (shared layers get one name).
  std::map<std::string, int> kind_count;
  std::map<std::string, const layer*> name_owner;
  for (size_t k = 0; k < gn.size(); ++k) {
    if (!used[k]) continue;
    const auto& src = gn[k];
    compiled::node n;
    n.op = src.op;
    for (auto i : src.inputs) n.inputs.push_back(new_index[static_cast<size_t>(i)]);
    new_index[k] = static_cast<int32_t>(c->nodes.size());
    node_state st;
    if (!src.op) {
      auto s = slot_of.find(static_cast<int32_t>(k));
      if (s == slot_of.end())
        throw std::invalid_argument(fmt::format(
          "model::functional: the output depends on graph input '{}', which is not among the model's inputs",
          src.name));
      n.width = src.width;
      n.input_slot = s->second;
      c->input_nodes[static_cast<size_t>(s->second)] = new_index[k];
    } else {
      if (src.op->name().empty()) {
        auto kind = src.op->kind();
        int& count = kind_count[kind];
        std::string name;
        do {
          name = count == 0 ? kind : fmt::format("{}_{}", kind, count);
          ++count;
        } while (name_owner.count(name));
        src.op->set_name(name);
      }
      auto [it, fresh] = name_owner.emplace(src.op->name(), src.op.get());
      if (!fresh && it->second != src.op.get())
        throw std::invalid_argument(fmt::format("two different layers are named '{}'", src.op->name()));
      std::vector<int64_t> widths;
      for (auto i : n.inputs) widths.push_back(c->nodes[static_cast<size_t>(i)].width);
      registry reg{*c, src.op->name()};
      n.width = src.op->build(reg, widths, st);
      if (n.width <= 0)
        throw std::invalid_argument(fmt::format("layer '{}' has output width {}", src.op->name(), n.width));
      bool diff = src.op->inputs_differentiable();
      n.needs_grad = !st.vars.empty();
      if (diff)
        for (auto i : n.inputs) n.needs_grad = n.needs_grad || c->nodes[static_cast<size_t>(i)].needs_grad;
    }
    c->nodes.push_back(std::move(n));
    c->states.push_back(std::move(st));
  }
  c->output = new_index[static_cast<size_t>(output.node)];
  // Which model inputs carry each embedding table's row ids: a table every use of which
  // is an embedding layer applied straight to a model input.
  c->row_feeds.assign(c->variables.size(), {});
  std::vector<bool> unknown(c->variables.size(), false);
  for (size_t k = 0; k < c->nodes.size(); ++k) {
    const auto& n = c->nodes[k];
    if (!n.op) continue;
    bool direct = n.op->kind() == "embedding" && n.inputs.size() == 1 &&
                  c->nodes[static_cast<size_t>(n.inputs[0])].input_slot >= 0;
    for (auto v : c->states[k].vars) {
      auto& feeds = c->row_feeds[static_cast<size_t>(v)];
      if (!direct || !c->variables[static_cast<size_t>(v)].sparse) {
        unknown[static_cast<size_t>(v)] = true;
        continue;
      }
      auto slot = c->nodes[static_cast<size_t>(n.inputs[0])].input_slot;
      if (std::find(feeds.begin(), feeds.end(), slot) == feeds.end()) feeds.push_back(slot);
    }
  }
  for (size_t v = 0; v < unknown.size(); ++v)
    if (unknown[v]) c->row_feeds[v].clear();
  // Which tables own their feeds: every reader of each of their inputs is an embedding
  // layer of that table alone (an input that is also the model's output is read too).
  c->compact_rows.assign(c->variables.size(), false);
  for (size_t v = 0; v < c->variables.size(); ++v) c->compact_rows[v] = !c->row_feeds[v].empty();
  for (size_t k = 0; k < c->nodes.size(); ++k) {
    const auto& n = c->nodes[k];
    if (!n.op) continue;
    for (auto i : n.inputs) {
      auto slot = c->nodes[static_cast<size_t>(i)].input_slot;
      if (slot < 0) continue;
      const auto& vars = c->states[k].vars;
      bool own = n.op->kind() == "embedding" && vars.size() == 1;
      for (size_t v = 0; v < c->variables.size(); ++v) {
        const auto& feeds = c->row_feeds[v];
        if (std::find(feeds.begin(), feeds.end(), slot) == feeds.end()) continue;
        if (!own || vars[0] != static_cast<variable_id>(v)) c->compact_rows[v] = false;
      }
    }
  }
  if (auto slot = c->nodes[static_cast<size_t>(c->output)].input_slot; slot >= 0)
    for (size_t v = 0; v < c->variables.size(); ++v) {
      const auto& feeds = c->row_feeds[v];
      if (std::find(feeds.begin(), feeds.end(), slot) != feeds.end()) c->compact_rows[v] = false;
    }
  model m;
  m.c_ = std::move(c);
  return m;
}

model model::sequential(int64_t input_width, std::vector<layer_ptr> layers) {
  if (layers.empty()) throw std::invalid_argument("model::sequential: no layers");
  graph g;
  auto in = g.input(input_width, "input");
  auto x = in;
  for (auto& l : layers) x = g.apply(std::move(l), x);
  return functional(g, {in}, x);
}

const std::vector<variable_spec>& model::variables() const { return c_->variables; }

const std::vector<std::vector<int32_t>>& model::row_feeds() const { return c_->row_feeds; }

const std::vector<bool>& model::compact_rows() const { return c_->compact_rows; }

variable_id model::find_variable(const std::string& name) const {
  auto i = c_->by_name.find(name);
  return i == c_->by_name.end() ? -1 : i->second;
}

int64_t model::num_parameters() const {
  int64_t n = 0;
  for (auto& v : c_->variables) n += v.shape.size();
  return n;
}

size_t model::num_inputs() const { return c_->input_nodes.size(); }

int64_t model::input_width(size_t i) const {
  return c_->nodes[static_cast<size_t>(c_->input_nodes.at(i))].width;
}

int64_t model::output_width() const { return c_->nodes[static_cast<size_t>(c_->output)].width; }

parameter_store model::initial_parameters(uint64_t seed) const { return parameter_store{c_->variables, seed}; }

std::string model::describe() const {
  std::string out;
  for (size_t k = 0; k < c_->nodes.size(); ++k) {
    const auto& n = c_->nodes[k];
    if (!n.op) {
      out += fmt::format("#{} input[{}] width {}\n", k, n.input_slot, n.width);
      continue;
    }
    std::string ins;
    for (auto i : n.inputs) ins += fmt::format("{}#{}", ins.empty() ? "" : ",", i);
    out += fmt::format("#{} {} '{}' <- {} -> width {}\n", k, n.op->describe(), n.op->name(), ins, n.width);
  }
  for (auto& v : c_->variables)
    if (v.dynamic)
      out += fmt::format("var {} [dynamic x {}] sparse admit_after={} evict_after={}\n", v.name, v.shape.cols,
                         v.admit_after, v.evict_after);
    else
      out += fmt::format("var {} {}{}\n", v.name, to_string(v.shape), v.sparse ? " sparse" : "");
  return out;
}

executor::executor(const model& m) : model_(m) {
  if (m.empty()) throw std::invalid_argument("executor: empty model");
  const auto& c = m.structure();
  states_ = c.states;
  values_.resize(c.nodes.size());
  grads_.resize(c.nodes.size());
  temp_.resize(c.nodes.size());
}

namespace {
// Input nodes have no buffer of their own: they point at the caller's matrices.
const matrix& value_of(const model::compiled& c, const std::vector<matrix>& values,
                       const std::vector<matrix>& inputs, int32_t n) {
  const auto& node = c.nodes[static_cast<size_t>(n)];
  return node.op ? values[static_cast<size_t>(n)] : inputs[static_cast<size_t>(node.input_slot)];
}
}  // namespace

const matrix& executor::forward(const parameter_store& params, const std::vector<matrix>& inputs,
                                bool training, uint64_t step_seed) {
  const auto& c = model_.structure();
  if (inputs.size() != c.input_nodes.size())
    throw std::invalid_argument(
      fmt::format("model expects {} inputs, got {}", c.input_nodes.size(), inputs.size()));
  if (params.size() != c.variables.size())
    throw std::invalid_argument(
      fmt::format("model has {} variables, the parameter store {}", c.variables.size(), params.size()));
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto w = c.nodes[static_cast<size_t>(c.input_nodes[i])].width;
    if (inputs[i].cols() != w || inputs[i].rows() != inputs[0].rows())
      throw std::invalid_argument(fmt::format("model input {}: expected [{} x {}], got {}", i,
                                              inputs[0].rows(), w, shape_string(inputs[i])));
  }
  inputs_ = &inputs;
  forward_context ctx{&params, training, step_seed, 0};
  for (size_t k = 0; k < c.nodes.size(); ++k) {
    const auto& n = c.nodes[k];
    if (!n.op) continue;
    in_ptrs_.clear();
    for (auto i : n.inputs) in_ptrs_.push_back(&value_of(c, values_, inputs, i));
    ctx.node_index = static_cast<int32_t>(k);
    n.op->forward(ctx, in_ptrs_, values_[k], states_[k]);
  }
  return value_of(c, values_, inputs, c.output);
}

void executor::backward(const parameter_store& params, const matrix& d_output, gradient_store& grads) {
  const auto& c = model_.structure();
  if (!inputs_) throw std::logic_error("executor::backward before forward");
  const auto& inputs = *inputs_;
  const auto& out = value_of(c, values_, inputs, c.output);
  if (d_output.rows() != out.rows() || d_output.cols() != out.cols())
    throw std::invalid_argument(fmt::format("backward: d_output {} for an output of {}",
                                            shape_string(d_output), shape_string(out)));
  if (grads.size() != c.variables.size())
    throw std::invalid_argument("backward: gradient store does not match the model");
  auto& has = has_grad_;
  has.assign(c.nodes.size(), 0);
  backward_context ctx{&params, &grads};
  for (size_t k = c.nodes.size(); k-- > 0;) {
    const auto& n = c.nodes[k];
    if (!n.op || !n.needs_grad) continue;
    const matrix* d = nullptr;
    if (static_cast<int32_t>(k) == c.output)
      d = &d_output;
    else if (has[k])
      d = &grads_[k];
    else
      continue;  // nothing downstream of this node reaches the loss
    in_ptrs_.clear();
    d_ptrs_.clear();
    bool diff = n.op->inputs_differentiable();
    std::vector<std::pair<size_t, size_t>> add_back;  // (node, slot) written to temp
    for (size_t j = 0; j < n.inputs.size(); ++j) {
      auto i = static_cast<size_t>(n.inputs[j]);
      in_ptrs_.push_back(&value_of(c, values_, inputs, n.inputs[j]));
      if (!diff || !c.nodes[i].op || !c.nodes[i].needs_grad) {
        d_ptrs_.push_back(nullptr);
      } else if (!has[i]) {
        d_ptrs_.push_back(&grads_[i]);
        has[i] = 1;
        // The same node may feed this layer twice (add(x, x)): the second slot sums.
        for (size_t q = 0; q < j; ++q)
          if (n.inputs[q] == n.inputs[j]) {
            d_ptrs_.back() = &temp_[i];
            add_back.emplace_back(i, j);
          }
      } else {
        d_ptrs_.push_back(&temp_[i]);
        add_back.emplace_back(i, j);
      }
    }
    if (add_back.empty()) {
      n.op->backward(ctx, in_ptrs_, values_[k], *d, d_ptrs_, states_[k]);
    } else {
      // Several slots may share temp_[i]; give each its own buffer.
      std::vector<matrix> extra(add_back.size());
      for (size_t a = 0; a < add_back.size(); ++a) d_ptrs_[add_back[a].second] = &extra[a];
      n.op->backward(ctx, in_ptrs_, values_[k], *d, d_ptrs_, states_[k]);
      for (size_t a = 0; a < add_back.size(); ++a) grads_[add_back[a].first] += extra[a];
    }
  }
}

}  // namespace actortrain::model
