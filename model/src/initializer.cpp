#include <actortrain/model/initializer.hpp>
#include <actortrain/model/random.hpp>

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

namespace actortrain::model {

namespace {

// Fan-in is the number of rows of a kernel [in x out]; a {1 x n} bias has fan-in 1.
float fan_in(const matrix& m) { return static_cast<float>(std::max<Eigen::Index>(1, m.rows())); }
float fan_out(const matrix& m) { return static_cast<float>(std::max<Eigen::Index>(1, m.cols())); }

void fill_uniform(matrix& m, uint64_t seed, float lo, float hi) {
  rng g{seed, 0x756e69666f726dULL};
  float* p = m.data();
  for (Eigen::Index i = 0; i < m.size(); ++i) p[i] = lo + (hi - lo) * g.uniform();
}

}  // namespace

initializer glorot_uniform() {
  return {"glorot_uniform", [](matrix& m, uint64_t seed) {
            float limit = std::sqrt(6.0f / (fan_in(m) + fan_out(m)));
            fill_uniform(m, seed, -limit, limit);
          }};
}

initializer he_normal() {
  return {"he_normal", [](matrix& m, uint64_t seed) {
            // Keras draws from a normal truncated at 2 stddev, with the stddev scaled by
            // 1/0.87962566 so that the truncated distribution has variance 2/fan_in.
            float stddev = std::sqrt(2.0f / fan_in(m)) / 0.87962566103423978f;
            rng g{seed, 0x68655f6e6f726dULL};
            float* p = m.data();
            for (Eigen::Index i = 0; i < m.size(); ++i) {
              float z;
              do {
                z = g.normal();
              } while (std::abs(z) > 2.0f);
              p[i] = z * stddev;
            }
          }};
}

initializer zeros() {
  return {"zeros", [](matrix& m, uint64_t) { m.setZero(); }};
}

initializer uniform(float lo, float hi) {
  if (!(lo <= hi))
    throw std::invalid_argument(fmt::format("uniform initializer: lo {} > hi {}", lo, hi));
  return {fmt::format("uniform({}, {})", lo, hi),
          [lo, hi](matrix& m, uint64_t seed) { fill_uniform(m, seed, lo, hi); }};
}

initializer normal(float stddev) {
  if (!(stddev >= 0))
    throw std::invalid_argument(fmt::format("normal initializer: stddev {} < 0", stddev));
  return {fmt::format("normal({})", stddev), [stddev](matrix& m, uint64_t seed) {
            rng g{seed, 0x6e6f726dULL};
            float* p = m.data();
            for (Eigen::Index i = 0; i < m.size(); ++i) p[i] = stddev * g.normal();
          }};
}

initializer constant(float value) {
  return {fmt::format("constant({})", value),
          [value](matrix& m, uint64_t) { m.setConstant(value); }};
}

}  // namespace actortrain::model
