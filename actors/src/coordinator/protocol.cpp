#include <actortrain/actors/coordinator/protocol.hpp>

#include <actortrain/model/trainer.hpp>

#include <fmt/format.h>

namespace actortrain {

bool validates_after(const run_spec& s, int64_t epoch) {
  return model::validates_after(s.validation_freq, s.validation_epochs, epoch);  // fit_options' rule
}

std::string describe(const status_report& r) {
  // While training `epoch` is the current one (from 0); once idle, the epochs run.
  auto epoch = r.epoch < 0 ? std::string("no epoch yet")
               : r.training ? fmt::format("epoch {}", r.epoch + 1)
                            : fmt::format("{} epoch(s) done", r.epoch);
  std::string out = fmt::format("run {}: {}, {}, {} steps applied, up {:.1f} s\n", r.run,
                                r.training ? "training" : "idle", epoch, r.steps_applied, r.uptime);
  out += "workers:\n";
  for (auto& w : r.workers)
    out += fmt::format("  worker {}  {:<5} generation {}  {} steps  {:.1f} steps/s  staleness {:.2f}\n", w.id,
                       !w.alive ? "lost" : w.busy ? "busy" : "idle", w.generation, w.steps, w.steps_per_second,
                       w.mean_staleness);
  out += "ps shards:\n";
  for (auto& s : r.shards) {
    if (!s.error.empty()) {
      out += fmt::format("  ps {}  no answer: {}\n", s.shard, s.error);
      continue;
    }
    out += fmt::format("  ps {}  {} steps in its state{}\n", s.shard, s.applied + s.base,
                       s.base > 0 ? fmt::format(" (restored at step {})", s.base) : "");
    for (auto& p : s.partitions) {
      auto bytes = static_cast<double>((p.row_end - p.row_begin) * p.cols) * 4;
      auto size = bytes < 1024 ? fmt::format("{} B", bytes) : bytes < 1 << 20 ? fmt::format("{:.1f} KiB", bytes / 1024)
                                                                               : fmt::format("{:.1f} MiB", bytes / (1 << 20));
      out += fmt::format("    {} part {}  rows [{}, {}) x {}  {}  version {}\n", p.variable, p.index, p.row_begin,
                         p.row_end, p.cols, size, p.version);
    }
  }
  if (r.checkpoint_step >= 0)
    out += fmt::format("last checkpoint: step {}, {:.1f} s ago, {}\n", r.checkpoint_step, r.checkpoint_age, r.checkpoint_dir);
  else
    out += "last checkpoint: none\n";
  out += r.recent.empty() ? "recent failures and recoveries: none\n" : "recent failures and recoveries:\n";
  for (auto& [at, what] : r.recent) out += fmt::format("  {:.2f} s  {}\n", at, what);
  return out;
}

}  // namespace actortrain
