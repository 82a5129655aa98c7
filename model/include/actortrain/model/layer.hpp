#pragma once
// The layer contract. A layer is structure only: it declares variables when a model is
// built and computes with values it is handed, so one layer object can be applied at
// several places of a functional model (shared layers) and a worker can run it on
// parameters pulled from parameter servers. Per-application scratch (masks, cached
// activations) lives in the node_state the model gives each application.
//
// Shapes: every input and output is a batch (rows = examples). A layer computes its
// output width from its input widths in build().

#include <actortrain/model/tensor.hpp>
#include <actortrain/model/variable.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace actortrain::model {

/// Where a layer declares its variables while a model is built.
class variable_registry {
 public:
  virtual ~variable_registry() = default;
  /// Declares a variable named `<prefix>/<local_name>` and returns its id. Calling it
  /// again for a shared layer's second application must return the same id; the
  /// registry does that by name and throws std::invalid_argument if the shape differs.
  virtual variable_id declare(const std::string& local_name, shape2 shape, initializer init,
                              bool sparse = false) = 0;
  /// Declares an embedding table keyed by raw ids (variable_spec::dynamic) of `dim`
  /// columns, the same way. The default throws std::invalid_argument (a registry that
  /// holds no such tables).
  virtual variable_id declare_dynamic(const std::string& local_name, int64_t dim, initializer init,
                                      uint64_t admit_after, uint64_t evict_after);
};

/// Per-application state owned by the model executor (one per graph node).
struct node_state {
  std::vector<matrix> scratch;  ///< layer-defined buffers (reused across steps)
  std::vector<int64_t> ids;     ///< layer-defined integer buffer (embedding ids)
  std::vector<variable_id> vars;  ///< the variables this application uses, from build()
};

/// What a forward pass knows besides its inputs.
struct forward_context {
  const parameter_store* params = nullptr;
  bool training = false;
  /// Seed of this step: random layers (dropout) draw from (step_seed, node index,
  /// element index), so re-running a step reproduces its masks exactly.
  uint64_t step_seed = 0;
  int32_t node_index = 0;
};

/// What a backward pass writes to.
struct backward_context {
  const parameter_store* params = nullptr;
  gradient_store* grads = nullptr;  ///< gradients are ADDED here (shared layers sum)
};

class layer {
 public:
  virtual ~layer() = default;

  /// Layer kind and configuration, e.g. "dense(256, relu)"; part of the job
  /// fingerprint, so it must describe everything that changes the computation.
  virtual std::string describe() const = 0;

  /// Checks the input widths, declares the variables this application needs (their ids
  /// go into st.vars) and returns the output width. Throws std::invalid_argument naming
  /// the layer and the widths when they do not fit.
  virtual int64_t build(variable_registry& reg, const std::vector<int64_t>& input_widths,
                        node_state& st) = 0;

  /// out = f(inputs). `out` is resized by the layer (reuse keeps its allocation).
  virtual void forward(const forward_context& ctx, const std::vector<const matrix*>& inputs,
                       matrix& out, node_state& st) const = 0;

  /// Given d_out (dLoss/dOut), adds variable gradients into ctx.grads and writes
  /// dLoss/dInput into d_inputs[i] (resized by the layer) where d_inputs[i] != nullptr.
  /// `out` is the value forward() produced.
  virtual void backward(const backward_context& ctx, const std::vector<const matrix*>& inputs,
                        const matrix& out, const matrix& d_out,
                        const std::vector<matrix*>& d_inputs, node_state& st) const = 0;

  /// True when backward() never needs d_inputs (for example embedding: its inputs are ids).
  virtual bool inputs_differentiable() const { return true; }

  /// The name prefix of this layer's variables ("dense_1"); set once by the model.
  const std::string& name() const { return name_; }
  void set_name(std::string n) { name_ = std::move(n); }
  /// The kind used to make default names ("dense", "relu", ...).
  virtual std::string kind() const = 0;

 private:
  std::string name_;
};

using layer_ptr = std::shared_ptr<layer>;

}  // namespace actortrain::model
