#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// A ps shard's decisions, without its mailbox (ps_shard.hpp has the contract): the
// partitions with their versions and optimizer slots, copy-on-write against readers,
// the fences, de-duplication by step id under the watermark, validation of a push as a
// whole, the apply through the optimizer and the apply policy, every partition's ledger,
// the kept state, snapshots and the idempotency of the coordinator's retried control
// requests. The shard actor (ps_shard.cpp) owns one store and only turns its answers
// into replies; tests/actors/shard_store_test.cpp tests it alone.
//
// Every request returns a `failure` (none: done) and fills its reply. A failed request
// changes no values, slots, versions or ledgers; what it may change is the counters
// (rejected, fenced), the highest epochs seen, the de-duplication state a rejected push
// reached before validation (a newer run, a raised watermark: the coordinator's, true
// either way), and the record of a shared snapshot whose files could not be written.

#include <actortrain/actors/core/error_code.hpp>
#include <actortrain/actors/ps/apply_policy.hpp>
#include <actortrain/actors/ps/compensation.hpp>
#include <actortrain/actors/ps/protocol.hpp>
#include <actortrain/model/checkpoint/file_system.hpp>
#include <actortrain/model/dynamic_table.hpp>
#include <actortrain/model/optim/groups.hpp>
#include <actortrain/model/optim/optimizer.hpp>
#include <actortrain/model/variable.hpp>

#include "compensator.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <vector>

namespace actortrain {

class shard_store {
 public:
  struct options {
    uint32_t index = 0;                    ///< the shard's number (stats, errors)
    std::shared_ptr<apply_policy> policy;  ///< null: apply_now()
    size_t staleness_buckets = 16;         ///< histogram size (at least 2)
    bool apply_log = false;                ///< keep which computation applied each step
    /// Variables with optimizers of their own (model/optim/groups.hpp): each partition
    /// is updated, and its slots kept, by its variable's optimizer.
    std::vector<model::variable_group> groups;
    /// What a dense partition does about stale gradients (ps/compensation.hpp); none
    /// under a policy that applies no stale gradient (apply_policy).
    staleness_compensation compensation;
    /// The model's variables: a dynamic table's partition (partition_state::dynamic) is
    /// made from its variable's spec (width, initializer, admission, eviction).
    std::vector<model::variable_spec> variables;
  };

  /// Updates with its own clones of `opt` and of the groups' optimizers.
  shard_store(const model::optimizer& opt, options opts);

  bool initialized() const { return initialized_; }
  uint32_t index() const { return index_; }

  // -- the coordinator's control requests (retried: each is idempotent) ----------------

  /// Takes every partition (init or restore); the same epochs again are a retry.
  failure init(init_request& req);
  /// Raises the worker fence of req.f.worker; answers the fences now in force.
  failure raise_fence(const fence_request& req, fence& out);
  failure set_hyperparams(const hyperparams_request& req);
  failure keep(const fence_request& req);
  failure restore(const fence_request& req);
  /// Every partition's state, shared (the next push writes into a copy); a dynamic
  /// table's as an increment over `b.base` when this shard took the snapshot of that
  /// step since its last init or restore (snapshot_basis).
  failure snapshot(const fence_request& req, const snapshot_basis& b, ps_snapshot& out);
  /// The same state written into a shared checkpoint directory through `fs`.
  failure snapshot_files(const fence_request& req, const checkpoint_target& t, const snapshot_basis& b,
                         model::file_system& fs, ps_files& out);

  // -- workers --------------------------------------------------------------------------

  /// Shares the current partitions (an observer's read, epoch 0, passes any fence).
  failure pull(const pull_request& req, pull_reply& out);
  /// The rows of req.ids (moved into the reply).
  failure pull_rows(pull_rows_request& req, rows_reply& out);
  /// Fence, de-duplication, validation, then the apply policy; then, when it names
  /// partitions (then_pull), their values as a training pull would read them now.
  failure push(push_request& req, push_reply& out);
  /// Closes a synchronous round: the policy's held pushes of its steps, applied as one.
  failure round(const round_request& req, round_reply& out);

  // -- reports --------------------------------------------------------------------------

  ps_ledgers ledgers() const;
  ps_stats stats() const;

 private:
  struct partition {
    std::string name;
    int64_t row_begin = 0;
    bool sparse = false;
    std::shared_ptr<model::matrix> value;
    std::shared_ptr<model::matrix> spare;  // an earlier version's buffer, for copy-on-write
    model::slot_block slots;
    int optimizer = -1;  // opts_.at(optimizer) updates it (optimizer_set::index_of)
    uint64_t version = 0;
    step_ledger ledger;  // every step applied to it (ledger.hpp)
    compensator comp;    // dense partitions' staleness compensation (compensator.hpp)
    // A dynamic table's partition: its rows (value has none, slots are the table's) and
    // the variable's partition count, which says which ids are this partition's.
    std::shared_ptr<model::dynamic_table> table;
    int32_t partitions = 0;
  };

  failure check_fence(const fence& f);
  failure not_ready() const;
  bool seen_before(const push_request& req);
  failure validate(const push_request& req) const;
  failure make_table(const partition_state& p, partition& q, std::optional<model::dynamic_table::snapshot>& kept) const;
  // Partition k's table saved for a checkpoint of basis b: an increment over b.base
  // (`base` takes it) when this shard snapshotted that step since its last init or
  // restore, else whole.
  model::dynamic_table::snapshot save_table(const partition_key& k, partition& p, const snapshot_basis& b,
                                            int64_t& base) const;
  // The snapshot of basis b taken: where each table was then, for increments over it
  // (without b.increments: nothing kept, nothing logged).
  void snapshot_taken(const snapshot_basis& b);
  /// The partition of `variable` on this shard that holds row (or id) `id`, or null.
  const partition* holder(int32_t variable, int64_t id) const;
  static model::matrix& writable(partition& p);
  void record_staleness(uint64_t version, uint64_t read_version);
  void apply_slices(push_request& r, uint64_t& max_lag);
  void count_applied(const applied_by& a);

  uint32_t index_ = 0;
  bool initialized_ = false;
  model::optimizer_set opts_;
  std::shared_ptr<apply_policy> policy_;
  staleness_compensation compensation_;
  std::map<partition_key, partition> parts_;
  // Highest epochs seen, and per worker the lowest generation still accepted.
  fence seen_;
  std::map<uint32_t, uint64_t> min_generation_;
  // De-duplication: the step ids of the newest run seen that were applied at or above
  // its watermark (below it, everything is known applied).
  uint64_t run_ = 0;
  std::vector<uint64_t> watermark_;  // per pipeline
  std::set<step_id> applied_steps_;
  ps_stats stats_;
  bool keep_log_ = false;
  // The state a keep copied (values and slots per partition), for restore.
  std::map<partition_key, std::pair<model::matrix, model::slot_block>> kept_;
  std::map<partition_key, model::dynamic_table::snapshot> kept_tables_;  // dynamic partitions' rows
  std::vector<model::variable_spec> variables_;
  // Idempotency of the coordinator's control requests: the epochs of the last init
  // taken, the newest (epochs, id) of keep, restore and hyperparameters taken, and the
  // last shared snapshot with the count of state changes it was written at.
  std::optional<fence> last_init_;
  std::pair<fence, uint64_t> last_keep_{}, last_restore_{}, last_hyper_{};
  std::pair<fence, uint64_t> last_snapshot_{};
  uint64_t snapshot_changes_ = 0;
  // The newest snapshots' steps (at most 4) since the last init or restore, with each
  // dynamic table's apply count then: what an increment over one of them starts after.
  std::map<int64_t, std::map<partition_key, int64_t>> table_steps_;
  uint64_t changes_ = 0;  // applies, inits and restores so far
};

}  // namespace actortrain
