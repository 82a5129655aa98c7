#pragma once
// A defect planted on purpose (sim_options::plant), to show that the simulator's checks
// catch what they exist for. Test-only: the framework's actors consult it at the one
// place each defect lives, and count each time it takes effect. Not installed; no CAF.

#include <actortrain/actors/sim/simulator.hpp>

#include <atomic>
#include <mutex>
#include <set>

namespace actortrain::detail {

struct defect_switch {
  planted_defect which = planted_defect::none;
  /// The fit in progress (the simulator sets it before each): a firing is counted
  /// against it, since a defect that took effect in a run that failed afterwards may
  /// not be visible in the ledgers of a run that only has to be a valid prefix.
  std::atomic<int> fit{0};
  /// The defect took effect during the current fit.
  void fired() {
    std::lock_guard<std::mutex> g{mtx};
    fits.insert(fit.load());
  }
  std::set<int> fired_in() const {
    std::lock_guard<std::mutex> g{mtx};
    return fits;
  }

 private:
  mutable std::mutex mtx;
  std::set<int> fits;
};

}  // namespace actortrain::detail
