#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// The consistency modes as the coordinator's dispatch gate: whether a new step may be
// dispatched now, and how many. Plain values, tested alone
// (tests/actors/dispatch_gate_test.cpp); the coordinator asks its gate before every new
// step, and a cluster makes its gate from cluster_spec::consistency (make_gate).

#include <actortrain/actors/core/consistency.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace actortrain {

/// What the coordinator may dispatch now (the consistency modes plug in here). Every
/// training step gets a dispatch index when it is first sent (a re-run keeps it).
struct gate_view {
  uint64_t dispatched = 0;        ///< dispatch indices handed out in this run
  uint64_t applied = 0;           ///< steps applied in this run
  uint64_t oldest_unapplied = 0;  ///< lowest index not applied yet (= dispatched: none)
  size_t in_flight = 0;
  uint64_t round_members = 0;     ///< steps in the open synchronous round
};

/// Decides whether a new step may be dispatched (re-runs of dispatched steps always
/// may). Consistency modes:
///  - dispatch_when_free(): asynchronous (TensorFlow's ParameterServerStrategy).
///  - bounded_staleness(s): a new step (index d) waits while d - oldest_unapplied > s,
///    where a step is applied once every push of it is acknowledged. Bound: a step reads
///    its parameters after it is dispatched, when every step below d - s is applied, and
///    no step above d + s can be dispatched before it is applied, so at most 2s other
///    steps are applied between its read and its own application: version staleness
///    (a partition's version when the step is applied minus the version it read) <= 2s
///    for every partition. s = 0 is sequential SGD.
///  - sync_rounds(R): rounds of R steps (R = replicas, fixed at start). Every step of a
///    round reads the same parameter version: the next round is dispatched only after
///    every shard applied this one. Shards hold pushes (hold_for_round) until the
///    coordinator closes the round with its manifest (round_request) and then apply the
///    example-weighted mean once (a manifest that times out is sent again: a shard
///    applies a round once). A lost worker's step is re-run within its round.
///    A round of an epoch's last steps may be short.
class dispatch_gate {
 public:
  virtual ~dispatch_gate() = default;
  virtual std::string describe() const = 0;
  /// True when one more new step may be dispatched.
  virtual bool may_dispatch(const gate_view& v) const = 0;
  /// How many new steps may be dispatched now (a task of steps_per_execution steps is
  /// cut to it); by default unbounded when may_dispatch.
  virtual uint64_t room(const gate_view& v) const { return may_dispatch(v) ? UINT64_MAX : 0; }
  /// Steps per synchronous round; 0: no rounds (pushes are applied on arrival).
  virtual uint64_t round_size() const { return 0; }
  /// True when the order of batches must not depend on timing (bounded staleness and
  /// sync: their results are a function of that order): pipelines are then taken strictly
  /// in turn, and one whose dataset shard is lost is waited for, not skipped.
  virtual bool ordered() const { return false; }
};

/// Asynchronous training: dispatch whenever a worker is free.
std::unique_ptr<dispatch_gate> dispatch_when_free();
/// Stale synchronous parallel with bound s (see dispatch_gate).
std::unique_ptr<dispatch_gate> bounded_staleness(uint64_t s);
/// Synchronous rounds of `replicas` steps; throws std::invalid_argument for 0.
std::unique_ptr<dispatch_gate> sync_rounds(uint64_t replicas);

/// The gate of consistency mode `mode` (sync: rounds of `replicas` steps, the workers at
/// start).
std::unique_ptr<dispatch_gate> make_gate(const consistency_mode& mode, int replicas);

}  // namespace actortrain
