#pragma once
// Models: a graph of layer applications, as Keras's functional API, with Sequential as
// the chain special case. A `model` is structure only (immutable, cheap to copy, safe to
// share across threads); values live in a parameter_store and buffers in an `executor`,
// one per thread. That split is what lets a worker be "a model replica, structure only"
// that computes on parameters it pulled.
//
// example[in_model]:
//   graph g;
//   auto ids   = g.input(3, "ids");
//   auto dense = g.input(13, "dense");
//   auto e     = g.apply(layers::embedding(1000, 8), ids);
//   auto h     = g.apply(layers::concatenate(), {e, dense});
//   auto out   = g.apply(layers::dense(1), g.apply(layers::dense(32, layers::activation::relu), h));
//   model m = model::functional(g, {ids, dense}, out);
//
// Inputs are fed in the order given to functional() (an element's features[i] feeds
// input i). A model has exactly one output.

#include <actortrain/model/layer.hpp>
#include <actortrain/model/tensor.hpp>
#include <actortrain/model/variable.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace actortrain::model {

/// A value in a graph under construction (the output of an input or a layer application).
struct symbol {
  int32_t node = -1;
};

/// A functional graph under construction. Applying the same layer object twice shares
/// its variables (Keras's shared layers).
class graph {
 public:
  /// A model input of `width` columns.
  symbol input(int64_t width, std::string name = {});
  /// Applies `l` to `inputs`; throws std::invalid_argument if a symbol is not of this graph.
  symbol apply(layer_ptr l, std::vector<symbol> inputs);
  symbol apply(layer_ptr l, symbol input) { return apply(std::move(l), std::vector<symbol>{input}); }

  struct node {
    layer_ptr op;                 ///< null for an input
    std::vector<int32_t> inputs;  ///< earlier nodes
    int64_t width = 0;            ///< inputs: their width (layers: set when a model is built)
    std::string name;             ///< inputs: their name
  };
  const std::vector<node>& nodes() const { return nodes_; }

 private:
  std::vector<node> nodes_;
};

class model {
 public:
  /// An empty model; use functional() or sequential().
  model() = default;

  /// The part of `g` that computes `output` from `inputs`. Throws std::invalid_argument
  /// when the output depends on an input not listed, when a layer rejects its input
  /// widths (the message names the layer), or when two layers share a name.
  static model functional(const graph& g, std::vector<symbol> inputs, symbol output);

  /// A chain of layers on one input of `input_width` columns.
  static model sequential(int64_t input_width, std::vector<layer_ptr> layers);

  /// Variables in declaration order; a variable_id indexes this list.
  const std::vector<variable_spec>& variables() const;
  /// The id of the variable named `name` ("dense_1/kernel"), or -1.
  variable_id find_variable(const std::string& name) const;
  /// Number of floats in all variables.
  int64_t num_parameters() const;

  /// Per variable, the model inputs (positions in the feed) whose values are its row
  /// ids: for an embedding table applied only straight to model inputs, so a batch's
  /// rows are known before forward (a worker pulls only those). Empty for dense
  /// variables and for tables fed by another layer's output.
  const std::vector<std::vector<int32_t>>& row_feeds() const;
  /// Per variable: it has row feeds, and nothing reads those inputs but this table's
  /// embedding layers. A worker then hands the model only a batch's rows: a table of one
  /// row per distinct id, with the ids in those inputs renumbered to its rows.
  const std::vector<bool>& compact_rows() const;

  size_t num_inputs() const;
  int64_t input_width(size_t i) const;
  int64_t output_width() const;

  /// Initial values, seeded per variable (see parameter_store).
  parameter_store initial_parameters(uint64_t seed) const;

  /// Layers and shapes, one line each, Keras's summary() in short: also the structural
  /// part of a job fingerprint.
  std::string describe() const;

  /// Internal: the compiled structure the executor runs.
  struct compiled;
  const compiled& structure() const { return *c_; }
  bool empty() const { return c_ == nullptr; }

 private:
  std::shared_ptr<const compiled> c_;
};

/// Runs a model: forward, then backward of the same batch. Owns per-node buffers, so one
/// executor per thread; reusing it across steps allocates nothing once shapes settle.
class executor {
 public:
  explicit executor(const model& m);

  /// Computes the output for `inputs` (one matrix per model input, equal row counts).
  /// Throws std::invalid_argument naming input and shapes when they do not fit.
  /// `step_seed` seeds random layers (dropout) in training mode.
  const matrix& forward(const parameter_store& params, const std::vector<matrix>& inputs,
                        bool training, uint64_t step_seed = 0);

  /// Back-propagates d_output (dLoss/dOutput of the last forward) and ADDS variable
  /// gradients into `grads` (zero it first for one step's gradients).
  void backward(const parameter_store& params, const matrix& d_output, gradient_store& grads);

  const model& structure() const { return model_; }

 private:
  model model_;
  std::vector<node_state> states_;
  std::vector<matrix> values_;  // per node
  std::vector<matrix> grads_;   // per node: dLoss/dValue
  std::vector<matrix> temp_;    // per node: scratch for summing fan-out gradients
  std::vector<const matrix*> in_ptrs_;
  std::vector<matrix*> d_ptrs_;
  std::vector<char> has_grad_;  // per node, during backward (kept to avoid allocating per step)
  const std::vector<matrix>* inputs_ = nullptr;
};

}  // namespace actortrain::model
