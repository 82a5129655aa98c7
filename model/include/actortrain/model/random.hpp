#pragma once
// Counter-based randomness: every random draw in ActorTrain is a pure function of
// (seed, counter), so a pipeline or a dropout mask can be recomputed for any position
// without replaying a generator's history. The mixer is SplitMix64's finalizer, a fixed
// algorithm that gives the same stream on every platform and standard library.

#include <cmath>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace actortrain::model {

/// A well-mixed 64-bit value from a 64-bit input (SplitMix64 finalizer).
constexpr uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// Combines a seed with a counter (and optionally a stream) into one draw.
constexpr uint64_t draw(uint64_t seed, uint64_t counter, uint64_t stream = 0) {
  return mix64(mix64(seed ^ mix64(stream)) + counter);
}

/// Uniform in [0, 1) with 24 bits (exactly representable in float).
inline float uniform01(uint64_t bits) {
  return static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);
}

/// Uniform integer in [0, n) (n > 0), by 128-bit multiply (Lemire), bias < n / 2^64.
inline uint64_t below(uint64_t bits, uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(bits) * n) >> 64);
}

/// A small sequential generator for code that draws many values in a row.
class rng {
 public:
  explicit rng(uint64_t seed, uint64_t stream = 0) : seed_(mix64(seed ^ mix64(stream))) {}
  uint64_t next() { return mix64(seed_ + counter_++); }
  float uniform() { return uniform01(next()); }
  uint64_t below(uint64_t n) { return ::actortrain::model::below(next(), n); }
  /// Standard normal (Box-Muller, one value per call).
  float normal() {
    float u1 = uniform();
    float u2 = uniform();
    if (u1 < 1e-12f) u1 = 1e-12f;
    return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.28318530717958647692f * u2);
  }

 private:
  uint64_t seed_;
  uint64_t counter_ = 0;
};

/// tf.data's shuffle buffer with counter-based draws, over values of type T pulled from
/// `pull()` (returns std::optional<T>): the buffer is filled with the first `buffer_size`
/// values; the k-th output takes slot below(draw(seed, k, stream), buffer size), which is
/// refilled with the next value or, once the input is exhausted, with the buffer's last.
/// buffer_size >= the number of values gives a uniform permutation. dataset::shuffle and
/// the trainer's fit(x, y) both shuffle with it, so they give the same order.
template <class T>
class shuffle_buffer {
 public:
  shuffle_buffer(uint64_t buffer_size, uint64_t seed, uint64_t stream)
      : buffer_size_(buffer_size), seed_(seed), stream_(stream) {}

  template <class Pull>
  std::optional<T> next(Pull&& pull) {
    if (!filled_) {
      filled_ = true;
      while (buffer_.size() < buffer_size_) {
        auto x = pull();
        if (!x) {
          exhausted_ = true;
          break;
        }
        buffer_.push_back(std::move(*x));
      }
    }
    if (buffer_.empty()) return std::nullopt;
    const auto j = static_cast<size_t>(below(draw(seed_, counter_++, stream_), buffer_.size()));
    T out = std::move(buffer_[j]);
    std::optional<T> refill;
    if (!exhausted_) {
      refill = pull();
      if (!refill) exhausted_ = true;
    }
    if (refill) {
      buffer_[j] = std::move(*refill);
    } else {
      if (j + 1 != buffer_.size()) buffer_[j] = std::move(buffer_.back());
      buffer_.pop_back();
    }
    return out;
  }

 private:
  uint64_t buffer_size_;
  uint64_t seed_;
  uint64_t stream_;
  uint64_t counter_ = 0;
  bool filled_ = false;
  bool exhausted_ = false;
  std::vector<T> buffer_;
};

}  // namespace actortrain::model
