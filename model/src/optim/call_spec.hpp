#pragma once
// Internal: the small "name(arg, key=value, ...)" language of command-line specs
// ("adam(learning_rate=0.01)", "fixed_shards(3)"). Shared by make_optimizer and
// make_partitioner; not installed.

#include <string>
#include <utility>
#include <vector>

namespace actortrain::model::detail {

struct call_spec {
  std::string name;
  /// In the order written; `first` is empty for a positional argument. Values are the raw
  /// tokens (numbers, true/false).
  std::vector<std::pair<std::string, std::string>> args;
};

/// Parses `text` ("name" or "name(...)", spaces allowed between tokens). Throws
/// std::invalid_argument "<what>: bad spec '<text>': <problem>" naming the offending token
/// and its position.
call_spec parse_call_spec(const std::string& text, const char* what);

/// Maps positional arguments to `names` (in order) and checks keyword names against
/// `names`; returns (name, token) pairs. Throws std::invalid_argument naming the unknown
/// or repeated key, a positional after a keyword, or too many positionals.
std::vector<std::pair<std::string, std::string>>
bind_args(const call_spec& spec, const std::vector<std::string>& names, const std::string& text,
          const char* what);

/// A number ("0.01", "1e-7", "262144") or a flag ("true"/"false"). Throws
/// std::invalid_argument naming the token and the argument.
double parse_value(const std::string& token, const std::string& arg, const std::string& text,
                   const char* what);

}  // namespace actortrain::model::detail
