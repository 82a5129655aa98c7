#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// Who may change state: the fence every message carries (messages.hpp gives it its wire
// form). Receivers keep the highest epochs they have seen and reject older ones.

#include <cstdint>
#include <limits>

namespace actortrain {

/// Who may change state. Ordered lexicographically by (coordinator_epoch,
/// recovery_epoch); worker_generation is compared per worker.
struct fence {
  uint64_t coordinator_epoch = 0;
  uint64_t recovery_epoch = 0;
  uint64_t worker_generation = 0;
  /// The worker this message speaks for (no_worker for the coordinator's own messages).
  uint32_t worker = no_worker;
  static constexpr uint32_t no_worker = std::numeric_limits<uint32_t>::max();
};

/// True when `a`'s epochs are older than `b`'s (a must be rejected by a receiver that saw b).
inline bool epochs_older(const fence& a, const fence& b) {
  return a.coordinator_epoch != b.coordinator_epoch ? a.coordinator_epoch < b.coordinator_epoch
                                                    : a.recovery_epoch < b.recovery_epoch;
}

/// Raises the fence a shard enforces: from now on it rejects messages with older epochs,
/// and for `f.worker` (if set) any generation below f.worker_generation.
struct fence_request {
  fence f;
  /// For keep, restore and shared snapshots: the request's id under f's epochs. A keep or
  /// restore is carried out once per (epochs, id), so a retry that arrives late or twice
  /// changes nothing; a shared snapshot repeated under the same (epochs, id) writes only
  /// while the state is still the one first written. 0: no id.
  uint64_t id = 0;
};

}  // namespace actortrain
