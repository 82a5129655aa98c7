#include <actortrain/model/progress.hpp>

#include <cstdio>
#include <iostream>
#include <unistd.h>

#include <fmt/format.h>

namespace actortrain::model {

progress_printer::progress_printer(std::ostream& out, int verbose, bool is_terminal)
  : out_(out), verbose_(verbose), tty_(is_terminal) {}

bool progress_printer::stdout_is_terminal(const std::ostream& out) {
  return &out == &std::cout && isatty(fileno(stdout)) == 1;
}

void progress_printer::begin_epoch(int epoch, int epochs, int64_t total_steps) {
  total_ = total_steps;
  epoch_ = epoch;
  epochs_ = epochs;
  start_ = std::chrono::steady_clock::now();
  last_draw_ = start_;
  drawn_ = false;
  has_staleness_ = false;
  if (verbose_ == 1) out_ << fmt::format("Epoch {}/{}\n", epoch + 1, epochs) << std::flush;
}

std::string progress_printer::line(int64_t step, int64_t samples,
                                   const std::map<std::string, double>& values, bool final) const {
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::string s;
  if (total_ > 0) {
    int width = 30;
    int done = static_cast<int>(width * std::min<int64_t>(step, total_) / total_);
    std::string bar(static_cast<size_t>(done), '=');
    if (done < width) bar += '>';
    bar.resize(static_cast<size_t>(width), '.');
    auto digits = fmt::format("{}", total_).size();
    s = fmt::format("{:>{}}/{} [{}]", step, digits, total_, bar);
  } else {
    s = fmt::format("{} steps", step);
  }
  s += fmt::format(" - {:.1f}s", secs);
  // While the bar runs: the time left at this epoch's pace so far, as Keras shows it.
  if (!final && total_ > 0 && step > 0 && step < total_) {
    auto left = static_cast<int64_t>(secs / static_cast<double>(step) * static_cast<double>(total_ - step) + 0.5);
    if (left < 60)
      s += fmt::format(" - ETA: {}s", left);
    else if (left < 3600)
      s += fmt::format(" - ETA: {}:{:02}", left / 60, left % 60);
    else
      s += fmt::format(" - ETA: {}:{:02}:{:02}", left / 3600, left / 60 % 60, left % 60);
  }
  if (final && step > 0) s += fmt::format(" {:.0f}us/step", 1e6 * secs / static_cast<double>(step));
  for (auto& [k, v] : values) s += fmt::format(" - {}: {:.4f}", k, v);
  if (has_staleness_) s += fmt::format(" - staleness {:.2f}/{}", staleness_mean_, staleness_max_);
  if (secs > 0) s += fmt::format(" - {:.0f} samples/s", static_cast<double>(samples) / secs);
  return s;
}

void progress_printer::update(int64_t step, int64_t samples, const std::map<std::string, double>& values) {
  if (verbose_ != 1 || !tty_) return;
  auto now = std::chrono::steady_clock::now();
  if (drawn_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  drawn_ = true;
  out_ << '\r' << line(step, samples, values, false) << "\x1b[K" << std::flush;
}

void progress_printer::end_epoch(int64_t steps, int64_t samples, const std::map<std::string, double>& values) {
  if (verbose_ == 0) return;
  if (verbose_ == 1 && tty_) out_ << '\r';
  // One line per epoch (verbose 2) says which epoch it is; the bar has its "Epoch" line.
  if (verbose_ == 2) out_ << fmt::format("Epoch {}/{} - ", epoch_ + 1, epochs_);
  out_ << line(steps, samples, values, true) << (tty_ ? "\x1b[K" : "") << '\n' << std::flush;
}

void progress_printer::staleness(double mean, uint64_t max) {
  has_staleness_ = true;
  staleness_mean_ = mean;
  staleness_max_ = max;
}

void progress_printer::note(const std::string& text) {
  if (verbose_ == 0) return;
  if (tty_ && drawn_) out_ << "\r\x1b[K";
  out_ << text << '\n' << std::flush;
}

}  // namespace actortrain::model
