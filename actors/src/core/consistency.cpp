// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// consistency_mode's text form (core/consistency.hpp).
#include <actortrain/actors/core/consistency.hpp>

#include <fmt/format.h>

#include <stdexcept>

namespace actortrain {

consistency_mode consistency_mode::parse(const std::string& text) {
  if (text == "async") return async();
  if (text == "sync") return sync();
  const std::string head = "bounded_staleness(";
  if (text.compare(0, head.size(), head) == 0 && text.size() > head.size() + 1 && text.back() == ')') {
    auto arg = text.substr(head.size(), text.size() - head.size() - 1);
    bool digits = !arg.empty() && arg.size() <= 9 && arg.find_first_not_of("0123456789") == std::string::npos;
    if (digits) return bounded_staleness(std::stoull(arg));
    throw std::invalid_argument(fmt::format(
      "consistency '{}': the bound must be a whole number of steps >= 0, as in bounded_staleness(2)", text));
  }
  throw std::invalid_argument(
    fmt::format("unknown consistency '{}' (async, bounded_staleness(s) or sync)", text));
}

std::string consistency_mode::to_string() const {
  switch (kind_) {
    case kind::async: return "async";
    case kind::bounded_staleness: return fmt::format("bounded_staleness({})", bound_);
    case kind::sync: return "sync";
  }
  return "async";
}

}  // namespace actortrain
