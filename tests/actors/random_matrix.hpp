#pragma once
// Uniform values in [-1, 1) from a seed: the inputs of the actor tests' small jobs.

#include <actortrain/model/random.hpp>
#include <actortrain/model/tensor.hpp>

namespace actortrain::testing {

inline model::matrix random_matrix(Eigen::Index r, Eigen::Index c, uint64_t seed) {
  model::rng g{seed};
  model::matrix m(r, c);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = 2 * g.uniform() - 1;
  return m;
}

}  // namespace actortrain::testing
