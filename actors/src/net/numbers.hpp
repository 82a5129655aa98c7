#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// Numbers as cluster definitions and engines' environments write them.

#include <cstdint>
#include <optional>
#include <string>

namespace actortrain::detail {

/// The value of `text` when it is 1..max_digits decimal digits: no sign, no spaces, no
/// exponent, which std::stoll alone would let through.
inline std::optional<int64_t> whole_number(const std::string& text, size_t max_digits = 9) {
  if (text.empty() || text.size() > max_digits || text.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  return std::stoll(text);
}

}  // namespace actortrain::detail
