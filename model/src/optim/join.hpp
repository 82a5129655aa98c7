#pragma once
// Internal: joins values with a separator for error messages. (fmt::join is avoided on
// purpose: with fmt 9 and GCC 12 at -O3 its run-time spec parsing trips a false
// -Wstringop-overflow warning.)

#include <string>
#include <vector>

#include <fmt/format.h>

namespace actortrain::model::detail {

template <class T>
std::string join(const std::vector<T>& items, const char* separator = ", ") {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += separator;
    out += fmt::format("{}", items[i]);
  }
  return out;
}

}  // namespace actortrain::model::detail
