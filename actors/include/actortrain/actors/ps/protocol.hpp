#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// What workers and the coordinator ask of a ps shard, and what it answers: the request
// and reply structs of ps_shard_actor (ps_shard.hpp). Plain values: the shard store and
// the worker's gradient slicing use them without CAF; core/wire.hpp gives them their
// wire form.

#include <actortrain/actors/core/fence.hpp>
#include <actortrain/actors/core/step_id.hpp>
#include <actortrain/actors/core/tensor.hpp>
#include <actortrain/actors/ps/ledger.hpp>
#include <actortrain/model/waiting_id.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace actortrain::model {
class parameter_store;
class placement;
}  // namespace actortrain::model

namespace actortrain {

/// Every partition's ledger of one ps shard (ledger_atom).
struct ps_ledgers {
  uint32_t shard = 0;
  std::vector<partition_ledger> partitions;
};

/// One partition of a variable: rows [row_begin, row_end) of variable `variable`.
struct partition_key {
  int32_t variable = 0;
  int32_t index = 0;
  friend bool operator==(const partition_key& a, const partition_key& b) {
    return a.variable == b.variable && a.index == b.index;
  }
  friend bool operator<(const partition_key& a, const partition_key& b) {
    return a.variable != b.variable ? a.variable < b.variable : a.index < b.index;
  }
};

/// One partition's state: what a ps shard holds of it. The one type for every copy of
/// it that travels: the coordinator sends it at start and on restore (init_request), a
/// shard answers with it for a checkpoint (ps_snapshot), and its fields without the
/// tensors head a partition written into a shared checkpoint (written_partition).
struct partition_state {
  partition_key key;
  std::string name;       ///< the variable's, for error messages and checkpoints
  int64_t row_begin = 0;  ///< the partition holds rows [row_begin, row_end) of the variable
  int64_t row_end = 0;
  bool sparse = false;    ///< embedding rows: pulled by id
  /// A table keyed by raw ids (model/dynamic_table.hpp; model::variable_placement::dynamic):
  /// it holds the ids that model::dynamic_owner(id, partitions) gives key.index, a row
  /// created from `seed` when the id's first gradient is applied. Its rows travel as `value`
  /// and `slots` (a row per element of `ids`) with `last_update` and `waiting`
  /// (model::dynamic_table::snapshot's); row_begin and row_end are key.index and
  /// key.index + 1 (its "rows" in ledgers and checkpoints) in a shard's answers.
  bool dynamic = false;
  int32_t partitions = 0;  ///< dynamic: the variable's partitions (one per shard)
  uint64_t seed = 0;       ///< dynamic: model::variable_seed of the model's seed
  /// Updates applied to the partition so far. An init takes it as the count to go on
  /// from; a restore from a checkpoint (which does not record it) starts from 0.
  uint64_t version = 0;
  int64_t iterations = 0;  ///< the optimizer's apply count on this block
  tensor value;            ///< rows x the variable's columns
  /// The optimizer's slots by name (optimizer::slot_names() order, each shaped like
  /// `value`); an init without them starts them fresh.
  std::vector<std::string> slot_names;
  std::vector<tensor> slots;
  ledger_data ledger;  ///< the steps the state holds (empty at start)
  std::vector<int64_t> ids;          ///< dynamic: the id of each row of value and slots
  std::vector<int64_t> last_update;  ///< dynamic: each row's last update
  std::vector<model::waiting_id> waiting;  ///< dynamic: ids not admitted yet, their gradients and last step
  /// dynamic, in a snapshot's answer: an increment (rows above changed since, `removed`
  /// the ids dropped since) over this partition of the checkpoint of step `base`, as
  /// snapshot_basis allowed; -1: every row. An init takes whole partitions only.
  int64_t base = -1;
  std::vector<int64_t> removed;

  /// What an epoch gate kept of the partition (keep_atom), for a later restore_atom. Not
  /// a partition_state of its own: it is the same partition (key, rows and slot names),
  /// only its tensors and apply count differ, and a type cannot hold an optional of itself.
  struct kept_state {
    tensor value;
    std::vector<tensor> slots;  ///< in the partition's slot_names order; empty: fresh slots
    int64_t iterations = 0;
    std::vector<int64_t> ids, last_update;              ///< dynamic, as the partition's
    std::vector<model::waiting_id> waiting;  ///< dynamic
  };
  /// Only an init reads it: the kept state the restored run still holds (none: nothing
  /// kept). A snapshot leaves it empty.
  std::optional<kept_state> kept;
};

/// A shard's whole state: its partitions at start, or a checkpoint's on restore. The
/// de-duplication state is part of it (every step of `run` below `watermark` is in the
/// values, none above), so it rolls back with the values; `f` carries the epochs the
/// shard enforces from now on, and `min_generations` the worker fences (worker,
/// lowest generation accepted) a freshly spawned shard must know.
struct init_request {
  fence f;
  std::vector<partition_state> partitions;
  uint64_t run = 0;
  std::vector<uint64_t> watermark;
  std::vector<std::pair<uint32_t, uint64_t>> min_generations;
  /// Steps in the restored state (the checkpoint's step; 0 at start): ps_stats::base.
  uint64_t base = 0;
};

struct pull_request {
  fence f;
  std::vector<partition_key> partitions;
  /// A training step's read: a shard with lookahead compensation answers the values
  /// extrapolated ahead (ps/compensation.hpp); evaluation and observers read the values.
  bool training = false;
};

/// A partition's values at a version: what a pull answers (and, without the values, what
/// ps_stats lists). Not a partition_state: a pull, on every step, carries only what a
/// worker computes with, not the name, slots and ledger that travel at init and checkpoint.
struct partition_value {
  partition_key key;
  uint64_t version = 0;  ///< updates applied to this partition so far
  tensor value;
};

struct pull_reply {
  std::vector<partition_value> values;
};

/// Puts a pulled partition into `store`. A variable held whole by one partition is
/// adopted without a copy when `share` (the store then only reads it); otherwise the
/// partition's rows are copied into a full matrix the store owns.
void store_partition(model::parameter_store& store, const model::placement& pl, partition_value& pv, bool share);

/// Rows `ids` (global row numbers of the variable) of the partitions this shard holds.
/// For a dynamic table, ids (>= 0) it holds; an id without a row reads its initial
/// values, and no read creates a row (dynamic_table::read: `training` only counts).
struct pull_rows_request {
  fence f;
  int32_t variable = 0;
  std::vector<int64_t> ids;
  bool training = false;
};

struct rows_reply {
  int32_t variable = 0;
  uint64_t version = 0;
  std::vector<int64_t> ids;
  tensor rows;  ///< ids.size() x row width
};

/// The gradient of one dense partition, computed on `read_version`.
struct dense_slice {
  partition_key key;
  uint64_t read_version = 0;
  tensor grad;
};

/// Row gradients of a sparse variable: ids (global rows, sorted, unique) in this shard's
/// partitions, one gradient row each.
struct sparse_slice {
  int32_t variable = 0;
  uint64_t read_version = 0;
  std::vector<int64_t> ids;
  tensor rows;
};

/// One step's gradients for one shard. Gradients are of the batch-mean loss;
/// example_count lets a synchronous round form the example-weighted mean.
struct push_request {
  fence f;
  step_id step;
  int64_t example_count = 0;
  std::vector<dense_slice> dense;
  std::vector<sparse_slice> sparse;
  /// The coordinator's watermark for step.run (see step_task): the shard forgets the
  /// step ids below it, and answers a push below it as a duplicate.
  std::vector<uint64_t> watermark;
  /// The worker's attempt at this step (with f.worker and f.worker_generation it names
  /// one computation): tells a re-run's slices from the first run's.
  uint64_t attempt = 0;
  /// push_every > 1: the other steps whose gradients this push's carry (their
  /// example-weighted mean, example_count examples in all); the shard applies them as one
  /// update and counts each step applied.
  std::vector<step_id> more_steps;
  /// The digest of each step's batch (dataset::element_digest): `step`'s, then those of
  /// more_steps in order. Each partition records them in its ledger as it applies.
  std::vector<uint64_t> digests;
  /// The partitions the worker's next training step reads (exchange_options::
  /// pull_with_push): the shard answers them in push_reply::pulled, read after this push
  /// as a training pull_request under `f` would read them then. Empty: no pull.
  std::vector<partition_key> then_pull;
};

/// Which computation of a step a shard applied (ps_shard_options::apply_log).
struct applied_by {
  step_id step;
  uint32_t worker = 0;
  uint64_t generation = 0;
  uint64_t attempt = 0;
};

enum class push_status : uint8_t {
  applied,    ///< applied now
  duplicate,  ///< this step id was applied before: acknowledged, not applied again
  held,       ///< accepted and held by the apply policy (synchronous rounds)
};

std::string to_string(push_status s);

struct push_reply {
  push_status status = push_status::applied;
  uint64_t max_staleness = 0;  ///< max over slices of (version before apply - read_version)
  /// The values of push_request::then_pull, as a pull_reply's (empty when none asked).
  std::vector<partition_value> pulled;
};

/// Closes a synchronous round (consistency "sync"): the steps of the round and their
/// example counts, sent by the coordinator to every shard once each step's pushes were
/// received (acknowledged as held). A shard applies the example-weighted mean of the
/// pushes it holds for these steps once; a shard that a (sparse) step did not touch
/// still learns that the round is complete. Held pushes of steps not listed stay held.
struct round_request {
  fence f;
  uint64_t round = 0;  ///< the round's number in the run (reports only)
  std::vector<step_id> steps;
  int64_t example_count = 0;  ///< the round's examples: the mean's denominator
};

/// A round applied (or found applied before: `applied` = 0 pushes then).
struct round_reply {
  uint64_t round = 0;
  uint64_t applied = 0;        ///< held pushes the mean was formed from
  uint64_t max_staleness = 0;  ///< over the round's slices (0 unless versions moved meanwhile)
};

struct hyperparams_request {
  fence f;
  std::vector<std::pair<std::string, double>> values;
  /// Orders changes: a shard takes a request only if (f's epochs, id) is newer than the
  /// last it took, so a retried request that arrives late, or twice, cannot undo a newer
  /// one. 0: always taken.
  uint64_t id = 0;
};

/// What a shard's partition of a dynamic table holds and did (dynamic_table_counts).
struct table_stats {
  partition_key key;
  uint64_t rows = 0;               ///< rows held now
  uint64_t created = 0;            ///< rows created since the shard was initialized
  uint64_t evicted = 0;            ///< rows dropped by eviction
  uint64_t waiting = 0;            ///< ids seen, not yet admitted, now
  uint64_t unadmitted_reads = 0;   ///< reads of ids without a row (evaluation's too)
  uint64_t dropped_gradients = 0;  ///< gradient rows of ids without a row, dropped
  uint64_t bytes = 0;              ///< the table's memory (dynamic_table::bytes)
  uint64_t payload_bytes = 0;      ///< the floats of its rows and slots alone
};

/// A shard's counters.
struct ps_stats {
  uint32_t shard = 0;
  uint64_t applied = 0;  ///< steps applied since the shard was initialized or restored
  uint64_t base = 0;     ///< steps in the state it was restored to (0: initialized)
  uint64_t duplicates = 0;
  uint64_t rejected = 0;
  uint64_t fenced = 0;
  /// Steps a restore took back: applied to this shard's state (of the same run), then
  /// replaced by an older one (a roll-back to a checkpoint). A zombie's applies end here.
  uint64_t undone = 0;
  uint64_t remembered = 0;  ///< step ids kept for de-duplication (bounded by the watermark)
  uint64_t held = 0;        ///< pushes held for a synchronous round not closed yet
  uint64_t rows_pulled = 0;  ///< embedding rows served by pull_rows
  /// Partition slices of stale gradients applied without compensation because the
  /// version they were computed on was no longer kept (ps/compensation.hpp: dc_asgd
  /// compensates up to 15 versions late); since the shard was initialized.
  uint64_t uncompensated = 0;
  std::vector<uint64_t> staleness_histogram;  ///< [k] = slices applied k versions late (last: >=)
  std::vector<partition_value> versions;      ///< keys and versions (no values)
  std::vector<table_stats> tables;            ///< its partitions of dynamic tables
  std::vector<applied_by> apply_log;          ///< with ps_shard_options::apply_log
  fence seen;                                 ///< the highest epochs it has seen
  std::vector<std::pair<uint32_t, uint64_t>> min_generations;  ///< per worker, the lowest accepted
};

/// Every partition's state of one shard, for a checkpoint (kept left empty).
/// What a checkpoint's snapshot may leave out. `step`: the checkpoint's step (the shard
/// remembers where each of its dynamic tables was at it). `base` >= 0: a committed
/// checkpoint of the same run directory at which the shard took a snapshot since its last
/// init or restore: a dynamic table may then answer with an increment over it. The shard
/// answers whole when it holds no such snapshot, so a base it cannot build on costs a
/// whole checkpoint, never a wrong one.
struct snapshot_basis {
  int64_t step = 0;
  int64_t base = -1;
  /// The run checkpoints incrementally (checkpoint_full_every > 1): the shard logs the
  /// ids its tables drop from here on, for an increment over this snapshot. Without it,
  /// it logs nothing.
  bool increments = false;
};

struct ps_snapshot {
  uint32_t shard = 0;
  std::vector<partition_state> partitions;
};

/// A shared checkpoint (the cluster file's checkpoint.shared): the shard writes its own
/// partitions into the checkpoint directory the coordinator began, and answers with
/// ps_files (model/checkpoint/checkpoint.hpp: begin_checkpoint, write_partition_arrays,
/// commit_checkpoint).
struct checkpoint_target {
  std::string dir;  ///< the begun <root>/ckpt-<step>/
};

/// A written array: its file name in the checkpoint directory, size and zlib CRC-32.
struct file_entry {
  std::string name;
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
};

/// One partition of a shared checkpoint as its shard wrote it: the partition's state
/// without its tensors, and the files that hold them. A struct of its own rather than
/// file entries on partition_state, so that each type says which it carries, tensors or
/// files: no init or snapshot holds entries it must ignore, no written partition tensors.
struct written_partition {
  partition_state header;  ///< value, slots and kept empty; the ledger goes into the manifest
  file_entry values;
  std::vector<file_entry> slots;  ///< in header.slot_names order
  /// A dynamic table's "ids", "last_update" and "waiting" files (model/checkpoint).
  std::vector<std::pair<std::string, file_entry>> tables;
};

struct ps_files {
  uint32_t shard = 0;
  std::vector<written_partition> partitions;
};

}  // namespace actortrain
