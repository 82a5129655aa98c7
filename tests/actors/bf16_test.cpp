// bfloat16 on the data plane's wire (net/bf16.hpp), alone: rounding to nearest even,
// infinities and NaNs kept as such (a NaN whose payload sits only in the dropped bits
// included), exact round trips of values bf16 holds, the relative error bound, and
// widening in place.
#include <boost/test/unit_test.hpp>

#include "../../actors/src/net/bf16.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace bf16 = actortrain::data_plane::bf16;

namespace {

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// One value there and back.
float round_trip(float x) {
  uint16_t h = 0;
  bf16::narrow(&x, 1, &h);
  float y = 0;
  bf16::widen(&h, 1, &y);
  return y;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(bf16_suite)

BOOST_AUTO_TEST_CASE(rounds_to_nearest_with_ties_to_even) {
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7 (bf16's step at 1): the even one, 1.
  BOOST_TEST(round_trip(1.0f + std::ldexp(1.0f, -8)) == 1.0f);
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): up.
  BOOST_TEST(round_trip(1.0f + 3 * std::ldexp(1.0f, -8)) == 1.0f + std::ldexp(1.0f, -6));
  // Just above a tie rounds up, just below rounds down.
  BOOST_TEST(round_trip(from_bits(0x3f808001u)) == from_bits(0x3f810000u));
  BOOST_TEST(round_trip(from_bits(0x3f807fffu)) == 1.0f);
  // Negative values round by magnitude.
  BOOST_TEST(round_trip(-(1.0f + 3 * std::ldexp(1.0f, -8))) == -(1.0f + std::ldexp(1.0f, -6)));
}

BOOST_AUTO_TEST_CASE(values_bf16_holds_cross_exactly) {
  for (float x : {0.0f, 1.0f, -2.5f, 0.15625f, 3.0e38f, 1.0e-38f, std::ldexp(1.0f, -133)}) {
    uint32_t b = bits(x) & 0xffff0000u;  // the nearest value with nothing in the dropped bits
    BOOST_TEST(bits(round_trip(from_bits(b))) == b);
  }
  BOOST_TEST(bits(round_trip(-0.0f)) == bits(-0.0f));  // the sign of zero too
}

BOOST_AUTO_TEST_CASE(infinities_stay_infinite_and_nans_stay_nans) {
  const float inf = std::numeric_limits<float>::infinity();
  BOOST_TEST(round_trip(inf) == inf);
  BOOST_TEST(round_trip(-inf) == -inf);
  BOOST_TEST(std::isnan(round_trip(std::numeric_limits<float>::quiet_NaN())));
  // A NaN whose payload is only in the low 16 bits: rounding it would make it infinite.
  BOOST_TEST(std::isnan(round_trip(from_bits(0x7f800001u))));
  BOOST_TEST(std::isnan(round_trip(from_bits(0xff80ffffu))));
  BOOST_TEST(std::signbit(round_trip(from_bits(0xff800001u))));
  // The largest float is nearer 2^128 than any bf16 below it: infinite, as IEEE rounds.
  BOOST_TEST(round_trip(std::numeric_limits<float>::max()) == inf);
}

BOOST_AUTO_TEST_CASE(every_value_is_within_half_a_step) {
  std::mt19937 gen{7};
  std::normal_distribution<float> d{0.0f, 3.0f};
  std::vector<float> x(100000), y(x.size());
  for (auto& v : x) v = d(gen);
  std::vector<uint16_t> h(x.size());
  bf16::narrow(x.data(), x.size(), h.data());
  bf16::widen(h.data(), h.size(), y.data());
  size_t outside = 0, changed = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    // Half of bf16's step of 2^-7 relative to the leading bit: at most 2^-8 of |x|.
    if (std::fabs(y[i] - x[i]) > std::ldexp(std::fabs(x[i]), -8)) ++outside;
    if (y[i] != x[i]) ++changed;
  }
  BOOST_TEST(outside == 0u);
  BOOST_TEST(changed > x.size() / 2);  // (it does round)
}

// A frame's narrowed floats are read into the upper half of the receiving matrix and
// widened there: the same floats as widening from a buffer of their own, at every length
// around the blocks of 16 (a block written before it is read would differ).
BOOST_AUTO_TEST_CASE(widening_in_place_matches_widening_from_a_copy) {
  std::mt19937 gen{11};
  std::uniform_int_distribution<uint32_t> bits16{0, 0xffffu};
  for (size_t n : {1u, 2u, 15u, 16u, 17u, 31u, 32u, 33u, 1000u, 4097u}) {
    std::vector<uint16_t> h(n);
    for (auto& v : h) v = static_cast<uint16_t>(bits16(gen));
    std::vector<float> want(n), got(n);
    bf16::widen(h.data(), n, want.data());
    std::memcpy(reinterpret_cast<char*>(got.data()) + 2 * n, h.data(), 2 * n);
    bf16::widen_in_place(got.data(), n);
    BOOST_TEST(std::memcmp(got.data(), want.data(), 4 * n) == 0, "n = " << n);
  }
}

BOOST_AUTO_TEST_SUITE_END()
