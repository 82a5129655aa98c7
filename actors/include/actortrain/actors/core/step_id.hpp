#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// The identity of a step (and of an applied step's visit), shared by the messages (core/messages.hpp, which gives it its
// wire form) and the CAF-free decisions of the coordinator.

#include <cstdint>
#include <string>

namespace actortrain {

/// A step: the batch at `position` of pipeline (dataset shard) `pipeline` in run `run`.
/// Re-executing a step uses the same batch, so a step id names one computation.
struct step_id {
  uint64_t run = 0;
  uint32_t pipeline = 0;
  uint64_t position = 0;
  friend bool operator==(const step_id& a, const step_id& b) {
    return a.run == b.run && a.pipeline == b.pipeline && a.position == b.position;
  }
  friend bool operator!=(const step_id& a, const step_id& b) { return !(a == b); }
  friend bool operator<(const step_id& a, const step_id& b) {
    if (a.run != b.run) return a.run < b.run;
    if (a.pipeline != b.pipeline) return a.pipeline < b.pipeline;
    return a.position < b.position;
  }
};

/// One applied step of a run: which batch, and which worker (generation) computed it.
struct visit {
  uint64_t run = 0;
  uint32_t pipeline = 0;
  uint64_t position = 0;
  uint32_t worker = 0;
  uint64_t generation = 0;
};

/// "(run R, pipeline P, position N)".
std::string to_string(const step_id& s);

}  // namespace actortrain
