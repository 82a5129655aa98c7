#pragma once
// Variables live outside the layers: a layer declares what it needs (name, shape,
// initializer), the model collects the declarations, and the values sit in a
// parameter_store that a local trainer owns or a worker fills from ps pulls. Gradients
// come out per variable in a gradient_store: dense variables as a full matrix, sparse
// ones (embeddings) as the touched rows only.

#include <actortrain/model/initializer.hpp>
#include <actortrain/model/tensor.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace actortrain::model {

/// What a layer asks for. `sparse` variables get row gradients (embedding tables).
struct variable_spec {
  std::string name;
  shape2 shape;
  initializer init;
  bool sparse = false;
  /// An embedding table keyed by raw ids (model/dynamic_table.hpp): sparse, with no
  /// fixed rows (shape.rows is 0, shape.cols its width); a row exists once a gradient
  /// for its id was applied, starting from `init` seeded by the id.
  bool dynamic = false;
  uint64_t admit_after = 0;  ///< dynamic: dynamic_table_options::admit_after
  uint64_t evict_after = 0;  ///< dynamic: dynamic_table_options::evict_after
};

/// Index of a variable in its model's variable list (stable for the model's lifetime).
using variable_id = int32_t;

/// The seed of variable i's initial values, for a model seeded by `seed`
/// (parameter_store's, and a dynamic table's, whose rows mix in their ids).
uint64_t variable_seed(uint64_t seed, size_t i);

/// Values of a model's variables, indexed by variable_id. Not thread-safe.
///
/// Each value sits behind a shared pointer so that it can change hands without a copy:
/// a worker adopts the partitions it pulled (share-nothing in-process), and a local
/// trainer owns and updates its values in place. A store that adopted values reads them
/// only: writing through operator[] is for values the store allocated itself.
class parameter_store {
 public:
  parameter_store() = default;

  /// Allocates every variable and fills it with its initializer, seeded per variable by
  /// (seed, variable index) so that adding a layer does not change earlier layers. A
  /// dynamic table gets a matrix of no rows (its rows are its dynamic_table's).
  parameter_store(const std::vector<variable_spec>& specs, uint64_t seed);

  /// `n` empty variables (to be adopted).
  explicit parameter_store(size_t n) : values_(n) {}

  size_t size() const { return values_.size(); }
  matrix& operator[](variable_id i) { return *values_[static_cast<size_t>(i)]; }
  const matrix& operator[](variable_id i) const { return *values_[static_cast<size_t>(i)]; }
  /// True when variable i has a value.
  bool has(variable_id i) const { return values_[static_cast<size_t>(i)] != nullptr; }
  /// Variable i's storage, shared (no copy).
  std::shared_ptr<const matrix> share(variable_id i) const { return values_[static_cast<size_t>(i)]; }
  /// Makes `v` variable i's value without copying (the store only reads it).
  void adopt(variable_id i, std::shared_ptr<const matrix> v) {
    values_[static_cast<size_t>(i)] = std::const_pointer_cast<matrix>(std::move(v));
  }
  /// Drops every value (a worker lets go of what it pulled before pushing, so a ps shard
  /// can write the next version in place).
  void release() {
    for (auto& v : values_) v.reset();
  }

 private:
  std::vector<std::shared_ptr<matrix>> values_;
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
