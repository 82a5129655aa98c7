#pragma once
// Checkpoint directories: the on-disk form of a coordinated checkpoint.
//
//   <root>/ckpt-000000000042/            one directory per checkpoint, step zero-padded
//       dense.kernel.part0.npy           values of partition 0 of "dense/kernel"
//       dense.kernel.part0.slot-m.npy    its optimizer slot "m"
//       dense.kernel.part0.slot-v.npy
//       ...
//       manifest.json                    written last: the commit record
//       emb.table.part0.ids.npy          a dynamic table's partition: its rows' ids (int64),
//       emb.table.part0.last_update.npy  each row's last update (int64), and the ids
//       emb.table.part0.waiting.npy      waiting for admission: id, gradients, last step (int64, n x 3)
//
// File names: the variable name with '/' replaced by '.', then ".part<k>.npy" or
// ".part<k>.slot-<slot>.npy". Every array is a float32 .npy file (numpy.load reads it)
// of shape (row_end - row_begin, cols).
//
// Commit protocol (write_checkpoint): create the directory; write every .npy and fsync
// it; fsync the directory; write manifest.json.tmp, fsync it, rename it to manifest.json
// (atomic; the rename fsyncs the directory); fsync the root. A directory without a valid
// manifest.json is *uncommitted*: never listed, never restored, removed by prune once a
// newer checkpoint commits. A crash at any point therefore leaves either the previous
// set of committed checkpoints or that set plus the new one.
//
// manifest.json (format_version 1; keys of objects sorted):
//   { "format": "actortrain.checkpoint", "format_version": 1, "step": 42,
//     "optimizer": { "describe": "adam(...)", "hyperparameters": { "beta_1": 0.9, ... } },
//     "variables": [ { "name": "dense/kernel", "shape": [784, 300],
//        "partitions": [ { "index": 0, "row_begin": 0, "row_end": 392, "iterations": 10,
//            "file": { "name": "dense.kernel.part0.npy", "bytes": 470528, "crc32": 123 },
//            "slots": { "m": { "name": "...slot-m.npy", "bytes": ..., "crc32": ... } } } ] } ],
//     "extra": { ...caller's JSON: run, dataset positions, RNG, ... } }
// crc32 is zlib's CRC-32 of the whole file (python: zlib.crc32(open(f, 'rb').read())).
//
// A dynamic table (variable_spec::dynamic) is saved with "dynamic": true and the shape
// [0, cols]: its partition k of n holds the rows of the ids model::dynamic_owner(id, n)
// gives k, and names "rows" [k, k + 1) of [0, n), so its partitions tile [0, n). Its
// values and slots have a row per id, in the order of its "ids" file; "last_update" and
// "waiting" (files too) are model::dynamic_table::snapshot's.
//
// Incremental checkpoints (format_version 2): a dynamic table's partition k may be an
// increment, "base": B, over partition k of the committed checkpoint of step B in the
// same root (which may be an increment itself): its files then hold only the rows
// created or changed since B, with a fourth, "removed" (int64, n x 1), the ids dropped
// since B, and "waiting" lists every waiting id as in a full one. read_checkpoint
// resolves the chain (the base's rows, minus the removed ids, with the increment's rows
// over them), so every reader sees whole partitions; prune_checkpoints keeps the bases of
// the checkpoints it keeps. Fixed variables are always whole. A manifest without an
// increment is written as format_version 1, which older readers take.
//
// All I/O goes through a file_system (fault injection in tests). Functions here are
// blocking and not synchronized: one writer per root at a time (the coordinator).

#include <actortrain/model/checkpoint/checkpoint_error.hpp>
#include <actortrain/model/checkpoint/file_system.hpp>
#include <actortrain/model/dynamic_table.hpp>
#include <actortrain/model/partitioner.hpp>
#include <actortrain/model/tensor.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace actortrain::model {

/// The manifest format this code writes and the newest it reads.
constexpr int checkpoint_format_version = 2;

/// One partition: rows [row_begin, row_end) of a variable with its optimizer state.
struct partition_data {
  int64_t row_begin = 0;
  int64_t row_end = 0;
  /// (row_end - row_begin) x cols.
  matrix values;
  /// Optimizer slots by name (optimizer::slot_names()), each shaped like `values`.
  /// Empty for an optimizer without slots or a checkpoint of weights only.
  std::map<std::string, matrix> slots;
  /// slot_block::iterations of this partition.
  int64_t iterations = 0;
  /// A dynamic table's partition (variable_data::dynamic): row j of values and slots is
  /// id ids[j]'s; last_update[j] and the ids waiting for admission (their gradients and
  /// last step) as model::dynamic_table::snapshot has them.
  std::vector<int64_t> ids;
  std::vector<int64_t> last_update;
  std::vector<waiting_id> waiting;
  /// A dynamic table's increment (to write; read_checkpoint gives whole partitions):
  /// the rows above and `removed` are what changed since partition k of the checkpoint
  /// of step `base` (-1: whole).
  int64_t base = -1;
  std::vector<int64_t> removed;
};

/// A variable as saved: its full shape and its partitions in row order, which together
/// cover rows [0, shape.rows) exactly once.
struct variable_data {
  std::string name;
  shape2 shape;
  /// A table keyed by raw ids: shape.rows is 0 and partition k covers [k, k + 1) of
  /// [0, partitions) (see the layout above).
  bool dynamic = false;
  std::vector<partition_data> partitions;
};

/// Everything a checkpoint holds.
struct checkpoint_data {
  /// The watermark: every step before it is applied, none after (the directory's number).
  int64_t step = 0;
  std::vector<variable_data> variables;
  /// optimizer::describe() and optimizer::hyperparams() of the run (informational: the
  /// restorer rebuilds its optimizer from its own configuration; a schedule's current
  /// learning rate is in `hyperparams`).
  std::string optimizer;
  std::vector<std::pair<std::string, double>> hyperparams;
  /// Opaque caller state (the coordinator's run, positions, RNG); stored verbatim.
  nlohmann::json extra = nlohmann::json::object();
};

/// A committed checkpoint found under a root.
struct checkpoint_info {
  int64_t step = 0;
  std::string path;  ///< <root>/ckpt-<step>
  /// The steps of the checkpoints its increments build on (empty: it is whole).
  std::vector<int64_t> bases;
};

/// "ckpt-000000000042" (at least 12 digits).
std::string checkpoint_dir_name(int64_t step);
/// "<variable with / -> .>.part<k>.npy".
std::string partition_file_name(const std::string& variable, size_t k);
/// "<variable with / -> .>.part<k>.slot-<slot>.npy".
std::string slot_file_name(const std::string& variable, size_t k, const std::string& slot);

/// Writes and commits `data` as <root>/ckpt-<data.step>/ (creating root if needed) and
/// returns that path. A partition with a base needs that checkpoint committed in root,
/// its variable a dynamic table of as many partitions (checkpoint_error otherwise). Every file is fsynced; the manifest is written last (see the commit
/// protocol above). A leftover *uncommitted* directory of the same step is replaced.
/// Throws:
///  - std::invalid_argument, before touching the disk, for inconsistent data (partitions
///    not covering the rows exactly, a matrix of the wrong shape, an empty or clashing
///    name, a negative step);
///  - checkpoint_error if a *committed* checkpoint of that step already exists (nothing
///    is changed), or on any I/O failure: the partial directory is then removed and the
///    message names the file and the cause; earlier checkpoints are untouched.
std::string write_checkpoint(file_system& fs, const std::string& root, const checkpoint_data& data);

// -- checkpoints written by several processes -----------------------------------------
// With a directory every task can reach (a cluster file's checkpoint.shared), each ps
// task writes its own partitions' arrays and only their records travel: the coordinator
// begins the directory (begin_checkpoint), every shard writes into it
// (write_partition_arrays), and the coordinator commits it with the records
// (commit_checkpoint). Layout, manifest and commit protocol are write_checkpoint's, which
// is these three in one process.

/// A file of a checkpoint as the manifest records it.
struct file_record {
  std::string name;
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
};

/// A partition whose arrays are written: rows [row_begin, row_end), its files.
struct partition_record {
  int64_t row_begin = 0;
  int64_t row_end = 0;
  int64_t iterations = 0;
  file_record values;
  std::map<std::string, file_record> slots;
  /// A dynamic table's partition: its "ids", "last_update" and "waiting" files, and
  /// "removed" for an increment.
  std::map<std::string, file_record> tables;
  int64_t base = -1;  ///< an increment over partition k of this step's checkpoint (-1: whole)
};

struct variable_record {
  std::string name;
  shape2 shape;
  std::vector<partition_record> partitions;  ///< in row order
  bool dynamic = false;
};

/// A checkpoint whose arrays are written: what commit_checkpoint puts in the manifest.
struct checkpoint_record {
  int64_t step = 0;
  std::vector<variable_record> variables;
  std::string optimizer;
  std::vector<std::pair<std::string, double>> hyperparams;
  nlohmann::json extra = nlohmann::json::object();
};

/// Creates <root>/ckpt-<step>/ for the arrays (root too if needed; an uncommitted
/// leftover of that step is removed) and returns its path. Throws checkpoint_error when a
/// committed checkpoint of that step exists or on I/O failure; std::invalid_argument for
/// a negative step.
std::string begin_checkpoint(file_system& fs, const std::string& root, int64_t step);

/// Writes (and fsyncs) partition `k` (in row order) of `variable` into the begun
/// directory `dir`: its values and every slot, each as .npy, and a dynamic table's
/// (`dynamic`) ids, last updates and waiting ids. Throws std::invalid_argument for
/// inconsistent data (a slot of another shape, a bad slot name, negative iterations, ids
/// not one per row), checkpoint_error on I/O failure.
partition_record write_partition_arrays(file_system& fs, const std::string& dir, const std::string& variable, size_t k,
                                        const partition_data& p, bool dynamic = false);

/// Commits the begun <root>/ckpt-<r.step>/: checks the records (partitions that cover
/// each variable's rows exactly, the file names the layout gives, every file present,
/// every base committed with as many partitions of the variable),
/// fsyncs the directory and writes the manifest as write_checkpoint does. Returns the
/// path. Throws checkpoint_error for inconsistent records, a missing file or an I/O
/// failure, after removing the directory.
std::string commit_checkpoint(file_system& fs, const std::string& root, const checkpoint_record& r);

/// Committed checkpoints under `root` — directories named ckpt-<digits> holding a
/// manifest.json that parses, has a known format version and the directory's step —
/// sorted by step. Arrays are not read (read_checkpoint checks them). An absent root
/// gives an empty list; any other listing failure throws checkpoint_error.
std::vector<checkpoint_info> list_checkpoints(file_system& fs, const std::string& root);

/// The committed checkpoint with the highest step, if any.
std::optional<checkpoint_info> latest_checkpoint(file_system& fs, const std::string& root);

/// Reads and validates the manifest of checkpoint directory `dir` (no arrays). Throws
/// checkpoint_error for a missing or malformed manifest.
nlohmann::json read_manifest(file_system& fs, const std::string& dir);

/// Replaces the "extra" of the committed checkpoint `dir` (everything else of its
/// manifest stays) with the commit protocol's write-sync-rename, so a reader sees the old
/// or the new manifest, never a mix, and a crash leaves one of them. Throws
/// checkpoint_error for a missing or malformed manifest or an I/O failure.
void update_checkpoint_extra(file_system& fs, const std::string& dir, const nlohmann::json& extra);

/// Removes the committed checkpoint `dir` under `root`: uncommitted first (its manifest
/// removed and the directory synced), then deleted. Throws checkpoint_error on I/O failure.
void remove_checkpoint(file_system& fs, const std::string& root, const std::string& dir);

/// Reads a checkpoint directory completely, validating everything: the manifest's
/// structure, partitions that cover each variable's rows exactly (no overlap, no gap),
/// every file present with its recorded size and CRC, each array's shape against the
/// manifest, the same slot names in every partition of a variable. An increment is
/// resolved against its base (in dir's parent), read and checked likewise: the partitions
/// returned are whole (base -1). Throws checkpoint_error naming the file and the problem
/// (a missing base names the increment and the base).
checkpoint_data read_checkpoint(file_system& fs, const std::string& dir);

/// Deletes committed checkpoints beyond the newest `keep` (oldest first) that none of the
/// kept ones builds on (directly or through another increment), and uncommitted
/// directories older than the newest committed one (failed or interrupted writes; newer
/// uncommitted ones may be in progress and stay). A committed checkpoint is uncommitted
/// first (its manifest removed and the directory synced) and then deleted, so a crash
/// mid-delete never leaves a listed but incomplete checkpoint. Returns the removed
/// paths, oldest first. std::invalid_argument if keep < 1; checkpoint_error on I/O
/// failure (what was removed before stays removed).
std::vector<std::string> prune_checkpoints(file_system& fs, const std::string& root, size_t keep);

/// The whole variable (shape.rows x shape.cols) from its partitions. Throws
/// checkpoint_error if the partitions do not cover the rows exactly or have the wrong
/// shape.
matrix assemble_variable(const variable_data& v);

/// The whole of slot `slot` likewise (checkpoint_error if a partition lacks it).
matrix assemble_slot(const variable_data& v, const std::string& slot);

/// The same variable cut into `ranges` (which must cover [0, rows) in order, else
/// std::invalid_argument): values and every slot sliced from the assembled whole; each
/// new partition's iterations = the maximum over the old partitions it overlaps (equal
/// for dense variables; for lazily-updated sparse ones the larger count keeps Adam's
/// bias correction from going backwards). One range gives the local-model form.
variable_data repartition(const variable_data& v, const std::vector<row_range>& ranges);

/// The checkpoint cut to `target`'s partitions (a different number of ps shards, or one
/// partition each for a local model), variables in `target`'s order. Variables are
/// matched by name and must agree in shape; a variable missing on either side throws
/// checkpoint_error naming it (drop unwanted variables from `data` first). A dynamic
/// table's rows go to the partition model::dynamic_owner names for `target`'s count, its
/// waiting ids likewise, each partition's iterations the largest of the old ones.
checkpoint_data repartition(const checkpoint_data& data, const placement& target);

/// A dynamic table's rows (a dynamic_table::snapshot; an incremental one gives its rows
/// and removed ids, the caller sets `base`) as a checkpoint partition, its slots named by
/// `slot_names` (the snapshot's slot order), and back: a snapshot of every row of a
/// whole `p` (std::invalid_argument when one of `slot_names` is missing, sizes disagree,
/// or `p` is an increment).
partition_data table_partition(const dynamic_table::snapshot& s, const std::vector<std::string>& slot_names);
dynamic_table::snapshot table_snapshot(const partition_data& p, const std::vector<std::string>& slot_names);

/// Puts the increment `inc` (inc.base >= 0, same slots) over the whole partition `base`:
/// its removed ids dropped, its rows replacing or joining the base's, its waiting ids and
/// iterations taken. Rows keep the base's order, new ones after. Throws
/// std::invalid_argument for an increment of another width or other slots.
void apply_increment(partition_data& base, const partition_data& inc);

}  // namespace actortrain::model
