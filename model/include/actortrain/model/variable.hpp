#pragma once
// Variables live outside the layers: a layer declares what it needs (name, shape,
// initializer), the model collects the declarations, and the values sit in a
// parameter_store that a local trainer owns or a worker fills from ps pulls. Gradients
// come out per variable in a gradient_store: dense variables as a full matrix, sparse
// ones (embeddings) as the touched rows only.

#include <actortrain/model/initializer.hpp>
#include <actortrain/model/tensor.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace actortrain::model {

/// What a layer asks for. `sparse` variables get row gradients (embedding tables).
struct variable_spec {
  std::string name;
  shape2 shape;
  initializer init;
  bool sparse = false;
};

/// Index of a variable in its model's variable list (stable for the model's lifetime).
using variable_id = int32_t;

/// Values of a model's variables, indexed by variable_id. Not thread-safe.
class parameter_store {
 public:
  parameter_store() = default;

  /// Allocates every variable and fills it with its initializer, seeded per variable by
  /// (seed, variable index) so that adding a layer does not change earlier layers.
  parameter_store(const std::vector<variable_spec>& specs, uint64_t seed);

  size_t size() const { return values_.size(); }
  matrix& operator[](variable_id i) { return values_[static_cast<size_t>(i)]; }
  const matrix& operator[](variable_id i) const { return values_[static_cast<size_t>(i)]; }
  std::vector<matrix>& values() { return values_; }
  const std::vector<matrix>& values() const { return values_; }

 private:
  std::vector<matrix> values_;
};

/// Touched rows of a sparse variable: `ids` sorted and unique, `rows` one row each.
struct sparse_rows {
  std::vector<int64_t> ids;
  matrix rows;
};

/// Gradients of one step, indexed by variable_id. Dense variables use `dense[i]`
/// (same shape as the variable); sparse variables use `sparse[i]`.
class gradient_store {
 public:
  gradient_store() = default;
  explicit gradient_store(const std::vector<variable_spec>& specs);

  /// Sets every dense gradient to zero and empties every sparse one (keeps capacity).
  void zero();

  size_t size() const { return dense.size(); }
  std::vector<matrix> dense;
  std::vector<sparse_rows> sparse;
  std::vector<bool> is_sparse;
};

/// Accumulates rows `ids` (any order, repeats allowed) of `grad` into `out`, which ends
/// sorted by id with repeats summed. `grad` has one row per id.
void accumulate_rows(sparse_rows& out, const std::vector<int64_t>& ids, const matrix& grad);

}  // namespace actortrain::model
