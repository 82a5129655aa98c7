#pragma once
// The unit a pipeline yields, and how many of them a pipeline yields.
//
// An element holds one or more examples as rows: one matrix per model input plus a
// label matrix, every one with the same number of rows. A source yields one example per
// element (every matrix 1 x d); batch(n) stacks the rows of n elements. Higher-rank data
// is flattened into columns at the source (a 28x28 image is a 1 x 784 row); class labels
// are one column holding the class id as a float.

#include <actortrain/model/batch_source.hpp>
#include <actortrain/model/tensor.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace actortrain::dataset {

using model::id_matrix;
using model::matrix;

/// One element of a pipeline: `rows()` examples, as `features` (one matrix per model
/// input, each with rows() rows) and `labels` (rows() rows; 0 columns when the data has
/// no labels). It is the trainer's model::batch (model/batch_source.hpp), so what a
/// pipeline yields goes to trainer::train_step as it is.
using element = model::batch;

/// Whether the number of elements of a pipeline is known without iterating it.
enum class cardinality_kind { known, unknown, infinite };

/// What `dataset::cardinality()` returns, with tf.data's rules: filter gives unknown,
/// repeat() gives infinite, batch rounds up (or down with drop_remainder), and so on.
struct cardinality_info {
  cardinality_kind kind = cardinality_kind::unknown;
  /// The number of elements when kind == known; -1 otherwise.
  int64_t n = -1;

  static cardinality_info known(int64_t n) { return {cardinality_kind::known, n}; }
  static cardinality_info unknown() { return {cardinality_kind::unknown, -1}; }
  static cardinality_info infinite() { return {cardinality_kind::infinite, -1}; }

  bool is_known() const { return kind == cardinality_kind::known; }
  bool is_infinite() const { return kind == cardinality_kind::infinite; }

  friend bool operator==(const cardinality_info& a, const cardinality_info& b) {
    return a.kind == b.kind && a.n == b.n;
  }
  friend bool operator!=(const cardinality_info& a, const cardinality_info& b) {
    return !(a == b);
  }
};

/// "60000", "unknown" or "infinite".
std::string to_string(const cardinality_info& c);

}  // namespace actortrain::dataset
