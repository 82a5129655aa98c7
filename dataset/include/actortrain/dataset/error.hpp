#pragma once
// The error thrown for data files: missing, unreadable, malformed, truncated.

#include <cstdint>
#include <stdexcept>
#include <string>

namespace actortrain::dataset {

/// A data file that cannot be read or does not hold what it should. what() starts with
/// the path (and the 1-based line for text formats), then says what is wrong, e.g.
/// "train.csv:17: column 'age': 'abc' is not a number".
class file_error : public std::runtime_error {
 public:
  /// `line` is 0 when the error is not about one line.
  file_error(std::string path, const std::string& message, int64_t line = 0);

  const std::string& path() const noexcept { return path_; }
  int64_t line() const noexcept { return line_; }

 private:
  std::string path_;
  int64_t line_;
};

}  // namespace actortrain::dataset
