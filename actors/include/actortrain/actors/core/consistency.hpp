#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// How a cluster orders its steps (cluster_spec::consistency), as a typed value: text
// becomes one only where it enters — a command-line flag, a cluster file, TF_CONFIG —
// through consistency_mode::parse, which names what is wrong.

#include <cstdint>
#include <string>

namespace actortrain {

class consistency_mode {
 public:
  enum class kind { async, bounded_staleness, sync };

  /// A step is dispatched whenever a worker is free and applied on arrival
  /// (TensorFlow's ParameterServerStrategy); staleness is unbounded.
  static consistency_mode async() { return consistency_mode{kind::async, 0}; }
  /// No new step while the oldest step not yet applied is more than `s` steps older:
  /// stale synchronous parallel (Petuum); s = 0 is sequential.
  static consistency_mode bounded_staleness(uint64_t s) { return consistency_mode{kind::bounded_staleness, s}; }
  /// Rounds of one batch per worker on the same parameters, applied as one mean
  /// (TensorFlow's MultiWorkerMirroredStrategy).
  static consistency_mode sync() { return consistency_mode{kind::sync, 0}; }

  /// "async", "bounded_staleness(s)" (s a whole number of steps, at most 9 digits) or
  /// "sync". Throws std::invalid_argument naming the text and what is allowed.
  static consistency_mode parse(const std::string& text);

  consistency_mode() = default;  ///< async
  kind mode() const { return kind_; }
  /// bounded_staleness's s (0 otherwise).
  uint64_t bound() const { return bound_; }
  bool is_async() const { return kind_ == kind::async; }
  /// The text parse reads back: "async", "bounded_staleness(2)", "sync".
  std::string to_string() const;

  friend bool operator==(const consistency_mode& a, const consistency_mode& b) {
    return a.kind_ == b.kind_ && a.bound_ == b.bound_;
  }
  friend bool operator!=(const consistency_mode& a, const consistency_mode& b) { return !(a == b); }

 private:
  consistency_mode(kind k, uint64_t s) : kind_(k), bound_(s) {}
  kind kind_ = kind::async;
  uint64_t bound_ = 0;
};

}  // namespace actortrain
