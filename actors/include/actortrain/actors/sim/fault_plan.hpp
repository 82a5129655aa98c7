#pragma once
// A fault plan: a fault policy for the send seam made of rules, written by hand or drawn
// from a seed. A rule picks messages by sender and receiver role (and index), message
// kind and occurrence — "the 3rd push worker 1 sends to ps 0" — and does something to
// them: drop, duplicate, delay (reordering them behind later messages), crash the sender
// before the message leaves, or crash it at its next message after this one is delivered.
//
// Worker crashes at each phase of a step, as rules:
//   before pull                     {worker w, pull, crash}
//   after pull (computed, no push)  {worker w, push, crash}
//   after pushing to some shards    {worker w -> ps 0, push, crash_after}   (2+ shards)
//   after pushing, before reporting {worker w -> ps last, push, crash_after}
// A partitioned worker that comes back: {worker w, any kind, count = m, drop}. A slow
// worker: {worker w, push, count = m, delay}. A dataset shard that dies:
// {worker, -> dataset p, batch, kill_receiver}. A ps shard that dies with pushes in
// flight: {worker, -> ps p, push, kill_receiver}. A poison record: plant_poison.
//
// Thread-safe (one mutex); deterministic for a deterministic message order, as on CAF's
// test coordinator. Matching uses the roles the cluster reports through on_spawn.

#include <actortrain/actors/core/send_seam.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace actortrain {

struct fault_rule {
  delivery::kind what = delivery::kind::drop;
  actor_role from = actor_role::any;
  int32_t from_index = -1;  ///< -1: any index
  actor_role to = actor_role::any;
  int32_t to_index = -1;
  /// Message kind ("pull", "push", "batch", "step", "fence", "init", ...); empty: any.
  std::string message;
  uint64_t first = 1;  ///< the first matching message it applies to (1-based)
  uint64_t count = 1;  ///< consecutive matching messages it applies to
  caf::timespan delay{0};
};

/// "crash worker 1 at its 3rd push", for reports and reproduction.
std::string to_string(const fault_rule& r);

/// What a random plan is drawn for.
struct random_plan_options {
  int num_workers = 3;
  int num_ps = 2;
  int64_t steps = 100;  ///< about how many steps the cluster runs (occurrences are drawn below it)
  int faults = 4;       ///< rules
  /// A ps shard may die with pushes in flight (the cluster needs checkpoints to survive it).
  bool ps_crashes = true;
  /// Control messages may be lost, duplicated or delayed too: fences, round manifests,
  /// snapshots, inits, stats, keep and restore, hyperparameters (coordinator to ps) and
  /// the application's gate decisions (to the coordinator).
  bool control = false;
  /// The cluster's request timeout: some delays of control messages exceed it, so the
  /// original arrives after its retry.
  caf::timespan timeout = std::chrono::seconds(5);
};

class fault_plan : public fault_policy {
 public:
  explicit fault_plan(std::vector<fault_rule> rules = {});

  /// `o.faults` rules drawn from `seed`: worker crashes at every phase, lost, duplicated
  /// and delayed messages, a slow worker, a partitioned worker, a dataset shard that
  /// dies, with o.ps_crashes a ps shard that dies with pushes in flight, and with
  /// o.control faults on control messages. Meant for clusters that restart lost workers.
  static std::shared_ptr<fault_plan> random(uint64_t seed, const random_plan_options& o);
  /// The same with o.control off.
  static std::shared_ptr<fault_plan> random(uint64_t seed, int num_workers, int num_ps, int64_t steps, int faults,
                                            bool ps_crashes = true);

  /// Plants a poison record: the batch at `position` of input pipeline `pipeline` kills
  /// every worker it is sent to (each attempt of the step), as a record that crashes the
  /// process computing it would. The run must end with poison_step naming it.
  void plant_poison(uint32_t pipeline, uint64_t position);
  /// Adds a rule while the plan is in use; its occurrences count from now.
  void add(const fault_rule& r);

  delivery decide(const message_info& m) override;
  void on_spawn(const caf::actor_addr& a, actor_role role, uint32_t index) override;

  const std::vector<fault_rule>& rules() const { return rules_; }
  /// One line per injected fault, in order ("push worker 1 -> ps 0 #3: crash").
  std::vector<std::string> injected() const;

 private:
  struct who {
    actor_role role = actor_role::any;
    uint32_t index = 0;
  };
  bool matches(const fault_rule& r, const who& from, const who& to, const std::string& kind) const;

  std::vector<fault_rule> rules_;
  std::vector<std::pair<uint32_t, uint64_t>> poison_;
  std::vector<uint64_t> seen_;  // per rule: matching messages so far
  std::map<caf::actor_addr, who> roles_;
  std::vector<std::string> log_;
  mutable std::mutex mtx_;
};

}  // namespace actortrain
