#include <actortrain/model/digest.hpp>

#include <cstring>

namespace actortrain::model {

namespace {

constexpr uint64_t k1 = 0x9e3779b97f4a7c15ull, k2 = 0xbf58476d1ce4e5b9ull, k3 = 0x94d049bb133111ebull;

uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

// splitmix64's finalizer: every input bit reaches every output bit.
uint64_t finish(uint64_t z) {
  z = (z ^ (z >> 30)) * k2;
  z = (z ^ (z >> 27)) * k3;
  return z ^ (z >> 31);
}

uint64_t lane(uint64_t h, uint64_t w) { return rotl(h ^ (w * k2), 29) * k1; }

}  // namespace

uint64_t float_digest(const float* data, size_t n, uint64_t seed) {
  // Four independent lanes over 32-byte blocks (so the multiplies overlap), then the
  // tail word by word; the count enters the result, so trailing zeros matter.
  uint64_t h[4] = {seed ^ k1, seed ^ k2, seed ^ k3, seed + k1};
  const auto* bytes = reinterpret_cast<const unsigned char*>(data);
  size_t len = n * sizeof(float), i = 0;
  for (; i + 32 <= len; i += 32)
    for (int j = 0; j < 4; ++j) {
      uint64_t w;
      std::memcpy(&w, bytes + i + 8 * static_cast<size_t>(j), 8);
      h[j] = lane(h[j], w);
    }
  for (; i + 8 <= len; i += 8) {
    uint64_t w;
    std::memcpy(&w, bytes + i, 8);
    h[0] = lane(h[0], w);
  }
  if (i < len) {
    uint64_t w = 0;
    std::memcpy(&w, bytes + i, len - i);
    h[1] = lane(h[1], w);
  }
  uint64_t out = finish(h[0]) ^ rotl(finish(h[1]), 17) ^ rotl(finish(h[2]), 31) ^ rotl(finish(h[3]), 47);
  return finish(out ^ static_cast<uint64_t>(len));
}

uint64_t matrix_digest(const matrix& m, uint64_t seed) {
  uint64_t shape = (static_cast<uint64_t>(m.rows()) << 32) ^ static_cast<uint64_t>(m.cols());
  return float_digest(m.data(), static_cast<size_t>(m.size()), finish(seed ^ shape));
}

uint64_t parameters_digest(const std::vector<matrix>& variables) {
  uint64_t d = finish(static_cast<uint64_t>(variables.size()) + k1);
  for (const auto& m : variables) d = finish(d * k3 ^ matrix_digest(m, d));
  return d;
}

uint64_t parameters_digest(const parameter_store& p) {
  std::vector<matrix> all;
  all.reserve(p.size());
  for (size_t v = 0; v < p.size(); ++v) all.push_back(p[static_cast<variable_id>(v)]);
  return parameters_digest(all);
}

}  // namespace actortrain::model
