#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// The command-line layer every ActorTrain program uses: `actortrain` and each of its
// subcommands, the examples, run_node (net/process.hpp), and your own programs. It is
// CLI11 underneath (in one source file; this header does not include it):
//
// example[main]:
//   int epochs = 10;
//   double lr = 1e-3;
//   bool quiet = false;
//   actortrain::cli::flags f{"my_trainer", "Trains my model."};
//   f.add("epochs", epochs, "epochs to train", actortrain::cli::range<int>{1, 1000})
//    .add("learning-rate", lr, "Adam's learning rate", actortrain::cli::range<double>{0, 1})
//    .add("quiet", quiet, "print nothing per epoch");
//   return actortrain::cli::run_main("my_trainer", [&] {
//     if (!f.parse(argc, argv)) return 0;  // --help was printed
//     std::printf("%d epochs at %g%s\n", epochs, lr, quiet ? ", quietly" : "");
//     return 0;
//   });
//
// What every program built on it does alike:
//   --name=VALUE and --name VALUE; booleans as --name, or --name=on|off|true|false|1|0;
//   the last of a repeated flag wins; -h/--help prints every flag with its default and
//   range, to stdout, exit 0; arguments after `--` are positional, whatever they look like.
//   An unknown flag, a missing or malformed value, or one out of range is a usage_error
//   naming the flag ("--epochs: '0' is out of range (1 to 1000)"); run_main prints it
//   as "PROGRAM: error: ..." and returns 2, and any other exception 1.
//   With pass_caf_options, --caf.NAME=VALUE flags are kept for CAF's own configuration
//   (e.g. --caf.scheduler.max-threads=2) instead of being unknown flags.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace actortrain::cli {

/// A bad command line: run_main turns it into exit code 2.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The values a numeric flag accepts, both ends included.
template <class T>
struct range {
  T min;
  T max;
};

class flags {
 public:
  /// `program` as it is typed ("actortrain bench sparse"); `summary` opens --help.
  flags(std::string program, std::string summary);
  ~flags();
  flags(flags&&) noexcept;
  flags& operator=(flags&&) noexcept;

  /// A flag --NAME that sets `target`; its value before parsing is the default --help shows.
  flags& add(const std::string& name, std::string& target, const std::string& help);
  flags& add(const std::string& name, bool& target, const std::string& help);
  flags& add(const std::string& name, int& target, const std::string& help, std::optional<range<int>> r = {});
  flags& add(const std::string& name, int64_t& target, const std::string& help, std::optional<range<int64_t>> r = {});
  flags& add(const std::string& name, uint64_t& target, const std::string& help,
             std::optional<range<uint64_t>> r = {});
  flags& add(const std::string& name, double& target, const std::string& help, std::optional<range<double>> r = {});
  /// A string flag whose value must be one of `choices`.
  flags& add_choice(const std::string& name, std::string& target, const std::string& help,
                    std::vector<std::string> choices);

  /// A flag whose text `parse` turns into a typed value (e.g. consistency_mode::parse);
  /// a std::invalid_argument it throws becomes a usage_error naming the flag.
  /// `default_text` is what --help shows.
  flags& add_parsed(const std::string& name, const std::string& default_text, const std::string& help,
                    std::function<void(const std::string&)> parse);

  /// Keeps --caf.NAME=VALUE flags, as typed, in `target` instead of refusing them
  /// (run_node hands them to CAF; see net/process.hpp).
  flags& pass_caf_options(std::vector<std::string>& target);
  /// A line for --help after the flags (what the positional arguments are, exit codes).
  flags& footer(std::string text);

  /// Parses argv[first..]. Returns false when --help was printed (the program exits 0).
  /// Throws usage_error naming the flag for anything wrong.
  bool parse(int argc, char** argv, int first = 1);
  bool parse(const std::vector<std::string>& args);
  /// Arguments that are not flags, in order (and everything after `--`).
  const std::vector<std::string>& positional() const;
  /// True when --NAME was given (not only defaulted).
  bool given(const std::string& name) const;
  std::string help() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// Runs `body`: a usage_error prints "PROGRAM: error: WHAT" and returns 2, any other
/// exception prints the same and returns 1.
int run_main(const std::string& program, const std::function<int()>& body);

}  // namespace actortrain::cli
