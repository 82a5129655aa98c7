#include <actortrain/dataset/digest.hpp>
#include <actortrain/model/digest.hpp>

#include <cstring>

namespace actortrain::dataset {

namespace {

constexpr uint64_t k1 = 0x9e3779b97f4a7c15ull, k2 = 0xbf58476d1ce4e5b9ull, k3 = 0x94d049bb133111ebull;

uint64_t finish(uint64_t z) {
  z = (z ^ (z >> 30)) * k2;
  z = (z ^ (z >> 27)) * k3;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t float_digest(const float* data, size_t n, uint64_t seed) { return model::float_digest(data, n, seed); }

uint64_t element_digest(const element& e) {
  uint64_t d = finish(static_cast<uint64_t>(e.features.size()) + k3);
  for (const auto& f : e.features) d = finish(d * k1 ^ model::matrix_digest(f, d));
  for (size_t k = 0; k < e.ids.size(); ++k)
    if (e.is_ids(k)) {
      // Ids change the digest of a data set that has them, and only of one.
      d = finish(d * k1 ^ (k + k2));
      const auto& x = e.ids[k];
      for (Eigen::Index i = 0; i < x.size(); ++i) d = finish(d * k1 ^ static_cast<uint64_t>(x.data()[i]));
    }
  d = finish(d * k1 ^ model::matrix_digest(e.labels, d ^ k2));
  return d == 0 ? 1 : d;
}

}  // namespace actortrain::dataset
