#include <actortrain/model/tensor.hpp>

#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

namespace actortrain::model {

std::string to_string(const shape2& s) { return fmt::format("[{} x {}]", s.rows, s.cols); }

std::string shape_string(const matrix& m) { return fmt::format("[{} x {}]", m.rows(), m.cols()); }

bool all_finite(const float* values, size_t n) {
  // An IEEE float is NaN or infinite exactly when its exponent bits are all ones.
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, values + i, sizeof bits);
    bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

matrix stack_rows(const std::vector<matrix>& parts, Eigen::Index cols) {
  Eigen::Index rows = 0;
  for (auto& p : parts) {
    if (p.cols() != cols)
      throw std::invalid_argument(fmt::format("stack_rows: a part of {} columns among parts of {}", p.cols(), cols));
    rows += p.rows();
  }
  matrix all(rows, cols);
  Eigen::Index r = 0;
  for (auto& p : parts) {
    all.middleRows(r, p.rows()) = p;
    r += p.rows();
  }
  return all;
}

}  // namespace actortrain::model
