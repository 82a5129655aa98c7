#pragma once
// Dense float32 tensors. Every batch is a row-major matrix whose rows are examples
// (Eigen's default is column-major; row-major keeps one example contiguous, which is
// what batching, sharding and the wire format want). Higher-rank data is flattened
// into columns at the source (a 28x28 image is a row of 784).

#include <Eigen/Core>

#include <cstdint>
#include <string>
#include <vector>

namespace actortrain::model {

/// A batch or a variable: rows x cols, row-major, float32.
using matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// 64-bit integer ids (an embedding's inputs, given raw: model::batch::ids), row-major
/// like matrix.
using id_matrix = Eigen::Matrix<int64_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// A row vector (one example, or a bias).
using row_vector = Eigen::Matrix<float, 1, Eigen::Dynamic, Eigen::RowMajor>;

/// Shape of a variable: {rows, cols}. Variables are always two-dimensional (a bias is
/// {1, n}); rows are the unit of partitioning across parameter servers.
struct shape2 {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t size() const { return rows * cols; }
  friend bool operator==(const shape2& a, const shape2& b) {
    return a.rows == b.rows && a.cols == b.cols;
  }
  friend bool operator!=(const shape2& a, const shape2& b) { return !(a == b); }
};

/// "[rows x cols]", for error messages.
std::string to_string(const shape2& s);

/// "[rows x cols]" of a matrix, for error messages.
std::string shape_string(const matrix& m);

/// True when no value is NaN or infinite. A branch-free integer test on the exponent bits,
/// which vectorizes (Eigen's allFinite() computes x - x and does not): workers and ps
/// shards run it over every gradient of every step.
bool all_finite(const float* values, size_t n);
inline bool all_finite(const matrix& m) { return all_finite(m.data(), static_cast<size_t>(m.size())); }

/// The parts one under the other (every part has `cols` columns): batches of outputs
/// into one matrix.
matrix stack_rows(const std::vector<matrix>& parts, Eigen::Index cols);

}  // namespace actortrain::model
