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

#include <cstddef>
#include <cstdint>

namespace actortrain::model::detail {

/// The most slots any optimizer here keeps (RMSprop centered with momentum: 3).
constexpr size_t max_slots = 4;

template <class Kernel>
void run_dense(const Kernel& kernel, float* values, const float* grads, size_t n, slot_block& s) {
  float* slots[max_slots] = {};
  for (size_t k = 0; k < s.slots.size(); ++k) slots[k] = s.slots[k].data();
  kernel(values, grads, slots, n);
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
