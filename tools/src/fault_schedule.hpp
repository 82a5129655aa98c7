#pragma once
// A seeded schedule of process kills for `actortrain launch --kill` and
// `actortrain bench faults`: kill -9 of a task of a role every so many seconds (a random
// one of the role's tasks, at a jittered time), or once at a given time. CAF-free, pure:
// the launcher asks it what is due and does the killing. Also the rule by which bench
// faults judges how long the cluster took to recover from one kill (recovery_seconds).

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace actortrain::tools {

/// One kill: at `at` seconds after the launch, the task `role:index` (when it runs).
struct planned_kill {
  double at = 0;
  std::string role;  ///< "chief", "ps", "worker"
  int index = 0;
};

class fault_schedule {
 public:
  /// Parses "ROLE=SECONDS,...,ROLE@SECONDS": ROLE=P kills a task of ROLE every P seconds
  /// on average (the k-th at k·P ± P/4), ROLE@T kills one once at T seconds. `tasks`
  /// counts each role's tasks; every role named must have one. Throws
  /// std::invalid_argument naming what is wrong (unknown role, bad number, a role twice).
  /// The kills up to `horizon` seconds are drawn from `seed`: the same arguments give
  /// the same schedule (with the same C++ standard library, whose distributions it uses).
  static fault_schedule parse(const std::string& spec, const std::map<std::string, int>& tasks, uint64_t seed,
                              double horizon = 24 * 3600);

  /// The kills due by `now` (seconds after the launch) not yet returned, in time order.
  std::vector<planned_kill> due(double now);

  /// The whole schedule, in time order.
  const std::vector<planned_kill>& kills() const { return kills_; }
  bool empty() const { return kills_.empty(); }

 private:
  std::vector<planned_kill> kills_;
  size_t next_ = 0;
};

/// A line of the chief's metrics file that recovery is judged by: "step" (a step applied,
/// by `worker`), "worker_joined" (`worker` admitted), "ps_restored" (every shard rolled
/// back to a checkpoint after a lost ps task), "resumed" (a restarted chief's run began
/// from a checkpoint), "run_begin" (a run began).
struct recovery_mark {
  double wall = 0;  ///< seconds since the epoch
  std::string event;
  int64_t worker = -1;
};

/// Seconds from the kill of `task` ("worker:1", "ps:0", "chief:0") at `kill_wall` until
/// the cluster trains again without that task's loss, read from `marks` (sorted by wall):
/// - a worker: its replacement was admitted and applied a step;
/// - a ps task: the first step after every shard was restored from a checkpoint, by the
///   chief's roll-back (ps_restored) or by a restarted chief's run (resumed, or run_begin
///   when it begins again from the start), whichever comes first: a ps task killed
///   while the chief restarts is restored with the rest when the chief's run resumes;
/// - the chief: the first step of the restarted chief's run.
/// NaN when the marks never get there (the run ended first).
double recovery_seconds(const std::vector<recovery_mark>& marks, const std::string& task, double kill_wall);

}  // namespace actortrain::tools
