#pragma once
// An id a dynamic table (dynamic_table.hpp) has not admitted yet, as its snapshots,
// checkpoints and the ps shards' states carry it. Its own header so that the messages
// that carry it need not include the table.

#include <cstdint>

namespace actortrain::model {

/// An id waiting for admission (layers::dynamic_rows::admit_after): how many applied
/// steps had a gradient for it, and the table's step count at the last of them (from
/// which its eviction counts, as a row's from its last update).
struct waiting_id {
  int64_t id = 0;
  uint64_t count = 0;
  int64_t last = 0;

  friend bool operator==(const waiting_id& a, const waiting_id& b) {
    return a.id == b.id && a.count == b.count && a.last == b.last;
  }
  friend bool operator!=(const waiting_id& a, const waiting_id& b) { return !(a == b); }
  /// By id (the order snapshots keep).
  friend bool operator<(const waiting_id& a, const waiting_id& b) { return a.id < b.id; }
};

}  // namespace actortrain::model
