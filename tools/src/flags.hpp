#pragma once
// A small command-line parser for the examples and the local subcommands of
// `actortrain`: --name=value or --name value, --flag for booleans, -h/--help. Unknown
// flags and bad values are errors that name the flag; callers print them and exit 2.
// (Actor programs parse through caf::actor_system_config instead.)

#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace actortrain::tools {

struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class flags {
 public:
  explicit flags(std::string program, std::string summary);

  flags& add(const std::string& name, std::string& target, const std::string& help);
  flags& add(const std::string& name, int64_t& target, const std::string& help);
  flags& add(const std::string& name, int& target, const std::string& help);
  flags& add(const std::string& name, uint64_t& target, const std::string& help);
  flags& add(const std::string& name, double& target, const std::string& help);
  flags& add(const std::string& name, bool& target, const std::string& help);

  /// Parses argv[first..]; returns false when --help was printed (exit 0). Throws
  /// usage_error for unknown flags, missing or malformed values.
  bool parse(int argc, char** argv, int first = 1);
  /// Positional arguments left after the flags.
  const std::vector<std::string>& positional() const { return positional_; }
  std::string help() const;

 private:
  struct option {
    std::string help;
    std::string default_text;
    bool is_bool = false;
    std::function<void(const std::string&)> set;
  };
  flags& add_option(const std::string& name, option o);
  std::string program_, summary_;
  std::map<std::string, option> options_;
  std::vector<std::string> order_;
  std::vector<std::string> positional_;
};

/// Runs `body`, turning usage_error into "PROGRAM: error: ..." + exit code 2 and any
/// other exception into "PROGRAM: error: ..." + exit code 1.
int run_main(const std::string& program, const std::function<int()>& body);

}  // namespace actortrain::tools
