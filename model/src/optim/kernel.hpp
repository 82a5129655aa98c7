#pragma once
// Internal: runs an element-wise update kernel over a dense block or over selected rows.
//
// Every optimizer here is element-wise once its per-step scalars are known (Adam's
// bias-corrected rate, ...), so one kernel serves both paths: the dense path calls it once
// over the whole block, the lazy row path once per touched row with the value, gradient
// and slot pointers offset to that row. A kernel is a small struct holding the per-step
// float scalars with
//   void operator()(float* w, const float* g, float* const* slots, size_t n) const;
// written as a plain loop that GCC vectorizes (no calls, no pow, no branches inside).

#include <actortrain/model/optim/optimizer.hpp>

#include <Eigen/Core>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace actortrain::model::detail {

/// The most slots any optimizer here keeps (RMSprop centered with momentum and use_ema: 4).
constexpr size_t max_slots = 4;

/// The average slot's update over n values (optimizer::average_step's momentum):
/// average = m average + (1 - m) values.
inline void keep_average(const float* values, float* average, size_t n, float m) {
  const float rest = 1.0f - m;
  for (size_t i = 0; i < n; ++i) average[i] = m * average[i] + rest * values[i];
}

/// Pieces of the block that fit in the first-level cache, so that what follows the
/// kernel over a piece (the average, the extrapolation) reads values still in it.
constexpr size_t piece = 2048;

template <class Kernel>
void run_dense(const Kernel& kernel, float* values, const float* grads, size_t n, slot_block& s,
               optimizer::average_step avg = {}) {
  float* slots[max_slots] = {};
  for (size_t k = 0; k < s.slots.size(); ++k) slots[k] = s.slots[k].data();
  if (avg.slot < 0) {
    kernel(values, grads, slots, n);
    return;
  }
  float* at[max_slots] = {};
  for (size_t off = 0; off < n; off += piece) {
    const size_t len = n - off < piece ? n - off : piece;
    for (size_t j = 0; j < s.slots.size(); ++j) at[j] = slots[j] + off;
    kernel(values + off, grads + off, at, len);
    keep_average(values + off, at[avg.slot], len, avg.momentum);
  }
}

/// ahead[i] = now[i] + k (now[i] - old[i]), i < n, as one Eigen expression (the
/// compensator's view had the same one: the same floats).
inline void extrapolate(const float* now, const float* old, size_t n, float k, float* ahead) {
  using array = Eigen::Array<float, Eigen::Dynamic, 1>;
  const auto len = static_cast<Eigen::Index>(n);
  Eigen::Map<const array> w(now, len), b(old, len);
  Eigen::Map<array>(ahead, len) = w + k * (w - b);
}

/// run_dense and extrapolate in one pass: the kernel runs over pieces that fit in the
/// first-level cache, each piece's old values kept on the stack (an element-wise kernel
/// gives the same floats over pieces as over the whole).
template <class Kernel>
void run_dense_ahead(const Kernel& kernel, float* values, const float* grads, size_t n, slot_block& s, float k,
                     float* ahead, optimizer::average_step avg = {}) {
  float old[piece];  // 8 KiB of old values
  float* slots[max_slots] = {};
  for (size_t j = 0; j < s.slots.size(); ++j) slots[j] = s.slots[j].data();
  float* at[max_slots] = {};
  for (size_t off = 0; off < n; off += piece) {
    const size_t len = n - off < piece ? n - off : piece;
    std::memcpy(old, values + off, len * sizeof(float));
    for (size_t j = 0; j < s.slots.size(); ++j) at[j] = slots[j] + off;
    kernel(values + off, grads + off, at, len);
    extrapolate(values + off, old, len, k, ahead + off);
    if (avg.slot >= 0) keep_average(values + off, at[avg.slot], len, avg.momentum);
  }
}

template <class Kernel>
void run_rows(const Kernel& kernel, float* values, size_t row_width, const int64_t* rows,
              size_t num_rows, const float* grad_rows, slot_block& s) {
  const size_t num_slots = s.slots.size();
  float* slots[max_slots] = {};
  for (size_t j = 0; j < num_rows; ++j) {
    const size_t offset = static_cast<size_t>(rows[j]) * row_width;
    for (size_t k = 0; k < num_slots; ++k) slots[k] = s.slots[k].data() + offset;
    kernel(values + offset, grad_rows + j * row_width, slots, row_width);
  }
}

}  // namespace actortrain::model::detail
