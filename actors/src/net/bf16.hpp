#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// bfloat16 on the data plane's wire (data_plane.hpp, "wire_floats"): the top 16 bits of a
// float32 (its sign, all 8 exponent bits, 7 of the 23 fraction bits), so half the bytes
// and the same range; about 3 significant decimal digits. Rounded to nearest, ties to
// even, as bf16 hardware rounds; infinities stay infinite and a NaN stays a NaN (the ps
// refuses a gradient that is not finite, compressed or not). Widening back is exact.

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace actortrain::data_plane::bf16 {

/// `n` floats of `in` rounded to bfloat16 into `out`.
inline void narrow(const float* in, size_t n, uint16_t* out) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t b;
    std::memcpy(&b, in + i, sizeof b);
    // A NaN keeps its sign and becomes quiet (its payload may sit in the dropped bits);
    // everything else rounds to nearest even, overflowing to infinity as it should.
    uint32_t rounded = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
    uint32_t nan = (b >> 16) | 0x40u;
    out[i] = static_cast<uint16_t>((b & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
  }
}

/// `n` bfloat16 values of `in` widened to floats into `out` (exactly).
inline void widen(const uint16_t* in, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t b = static_cast<uint32_t>(in[i]) << 16;
    std::memcpy(out + i, &b, sizeof b);
  }
}

/// Widens, within the same buffer, the `n` bfloat16 values that fill the upper half of
/// `data` (its bytes [2n, 4n)) into the `n` floats of `data`: a frame's narrowed floats
/// are read straight into the matrix that receives them. Safe in ascending order: the
/// floats of values 0..i end at byte 4(i + 1), never past the first value not yet read,
/// at 2n + 2(i + 1), since i < n; blocks of 16 are read whole before they are written.
inline void widen_in_place(float* data, size_t n) {
  const auto* half = reinterpret_cast<const unsigned char*>(data) + 2 * n;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    uint16_t in[16];
    std::memcpy(in, half + 2 * i, sizeof in);
    uint32_t out[16];
    for (int k = 0; k < 16; ++k) out[k] = static_cast<uint32_t>(in[k]) << 16;
    std::memcpy(data + i, out, sizeof out);
  }
  for (; i < n; ++i) {
    uint16_t in;
    std::memcpy(&in, half + 2 * i, sizeof in);
    uint32_t out = static_cast<uint32_t>(in) << 16;
    std::memcpy(data + i, &out, sizeof out);
  }
}

}  // namespace actortrain::data_plane::bf16
