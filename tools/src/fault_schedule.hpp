#pragma once
// A seeded schedule of process kills for `actortrain launch --kill` and
// `actortrain bench faults`: kill -9 of a task of a role every so many seconds (a random
// one of the role's tasks, at a jittered time), or once at a given time. CAF-free, pure:
// the launcher asks it what is due and does the killing.

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

}  // namespace actortrain::tools
