#pragma once
// Keras-like progress output for fit: "Epoch 3/10" then a bar with step n/N, the time
// so far and, while the epoch runs, the time left at its pace ("ETA: 12s"), loss,
// metrics and samples/s. On a terminal the bar is redrawn in place (at most ~10 times a
// second); elsewhere (logs, CI) only the final line of each epoch is written, so logs
// stay readable. The distributed coordinator's runner uses the same printer.

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>

namespace actortrain::model {

class progress_printer {
 public:
  /// verbose: 0 silent, 1 bar (in place when `out` is a terminal), 2 one line per epoch
  /// ("Epoch 3/10 - 469 steps - ...").
  progress_printer(std::ostream& out, int verbose, bool is_terminal);

  /// total_steps < 0 when the epoch length is unknown.
  void begin_epoch(int epoch, int epochs, int64_t total_steps);
  /// After each step: running means so far in this epoch.
  void update(int64_t step, int64_t samples, const std::map<std::string, double>& values);
  /// The epoch's final values (validation included), ends the line.
  void end_epoch(int64_t steps, int64_t samples, const std::map<std::string, double>& values);
  /// The epoch's version staleness so far (distributed training), shown after the
  /// values as "staleness 0.42/3" (mean/max) until the next begin_epoch.
  void staleness(double mean, uint64_t max);
  /// Prints a line of its own (warnings, failures), keeping the bar intact.
  void note(const std::string& line);

  /// True when `out` is std::cout and stdout is a terminal.
  static bool stdout_is_terminal(const std::ostream& out);

 private:
  std::string line(int64_t step, int64_t samples, const std::map<std::string, double>& values,
                   bool final) const;
  std::ostream& out_;
  int verbose_;
  bool tty_;
  int64_t total_ = -1;
  int epoch_ = 0, epochs_ = 0;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
  bool drawn_ = false;
  bool has_staleness_ = false;
  double staleness_mean_ = 0;
  uint64_t staleness_max_ = 0;
};

}  // namespace actortrain::model
