#pragma once
// Variable initializers, seeded. An initializer fills a matrix in place from a seed;
// the same (seed, shape) always gives the same values on every machine (the generator
// is a fixed algorithm, not std::default_random_engine's implementation-defined one).

#include <actortrain/model/tensor.hpp>

#include <cstdint>
#include <functional>
#include <string>

namespace actortrain::model {

/// Fills `m` (already sized) deterministically from `seed`.
using initializer_fn = std::function<void(matrix& m, uint64_t seed)>;

struct initializer {
  std::string name;   ///< "glorot_uniform", "he_normal", "zeros", ...
  initializer_fn fill;
};

/// Keras's Dense default: U(-l, l), l = sqrt(6 / (fan_in + fan_out)), fan_in = rows,
/// fan_out = cols (Glorot & Bengio 2010).
initializer glorot_uniform();

/// N(0, sqrt(2 / fan_in)) truncated at two standard deviations, as Keras's he_normal
/// (He et al. 2015); fan_in = rows.
initializer he_normal();

/// All zeros (Keras's bias default).
initializer zeros();

/// U(lo, hi) (Keras's Embedding default is uniform(-0.05, 0.05)).
initializer uniform(float lo, float hi);

/// N(0, stddev).
initializer normal(float stddev);

/// A constant.
initializer constant(float value);

}  // namespace actortrain::model
