#pragma once
// Digests of float data: equal values (same shapes, same bits) give equal digests on
// every platform; a changed value, shape or order changes them with overwhelming
// probability. Not cryptographic: they tell whether two tasks hold the same parameters
// (a worker's pull against a checkpoint) or the same batch (dataset/digest.hpp), not
// whether an adversary forged them. About 10 GB/s.

#include <actortrain/model/tensor.hpp>
#include <actortrain/model/variable.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace actortrain::model {

/// The digest of `n` floats.
uint64_t float_digest(const float* data, size_t n, uint64_t seed);

/// The digest of a matrix: its shape and values.
uint64_t matrix_digest(const matrix& m, uint64_t seed);

/// The digest of every variable's values, in variable order (each with its shape).
/// `actortrain inspect --digest` prints the same for a checkpoint.
uint64_t parameters_digest(const parameter_store& p);
uint64_t parameters_digest(const std::vector<matrix>& variables);

}  // namespace actortrain::model
