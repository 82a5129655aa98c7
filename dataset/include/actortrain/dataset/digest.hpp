#pragma once
// A digest of an element's contents: what a worker records for the batch a step used,
// and what the exactly-once checker (actortrain/actors/ps/ledger.hpp) recomputes from the
// dataset's own definition. Equal elements (same shapes, same float bits) give equal
// digests on every platform; any changed value, shape or order of matrices changes it
// with overwhelming probability. Not cryptographic: it detects mistakes (a wrong or
// repeated batch), not an adversary. About 10 GB/s (a 128 x 784 batch in ~40 us).

#include <actortrain/dataset/element.hpp>

#include <cstddef>
#include <cstdint>

namespace actortrain::dataset {

/// The digest of `e`: its feature matrices in order, then its labels, each with its
/// shape. Never 0 (0 marks "no digest" where one is optional).
uint64_t element_digest(const element& e);

/// The digest of `n` floats (the building block of element_digest).
uint64_t float_digest(const float* data, size_t n, uint64_t seed);

}  // namespace actortrain::dataset
