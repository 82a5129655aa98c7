#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// The ledger: independent evidence of exactly-once training, kept where the updates
// happen and checked against the dataset's own definition.
//
// Every ps partition (a variable's row range) keeps a step_ledger of every step whose
// gradient it applied: the step id (run, pipeline, position) and the digest of the batch
// the step computed on (dataset::element_digest, made by the worker that used the batch
// and carried in its push; a push_every group carries one per step). A second apply of a
// step the partition holds is not absorbed: it is recorded as a violation, and
// violations are never forgotten (not even by a restore). The ledger travels with the
// partition's state: it is written into every checkpoint, restored with it (so a
// roll-back cuts it back exactly as it cuts back the values), reported on request
// (cluster::ledgers) and at a ps task's exit. It is compacted from its own contiguous
// positions only: consecutive positions of one (run, pipeline) fold into a segment
// [begin, end) that keeps the sum of mix(position, digest) over its positions — never
// from the coordinator's watermark, so nothing the coordinator believes enters it.
//
// Every step registers at every partition: a worker sends each partition a slice in
// every push (embedding tables included: a slice with no rows when its batch touches
// none of that partition's rows), so "applied exactly once on every partition it
// touches" means "on every partition".
//
// check_ledgers decides, from the ledgers and from the runs' dataset_fn alone (never the
// coordinator's events or counters): each step applied exactly once on every partition,
// and each position of each pipeline visited exactly once, with the batch the dataset
// defines there. A run that did not complete (it failed, or stopped early) must leave a
// valid prefix: no position twice, every batch the right one.
//
// This header does not include CAF.

#include <actortrain/dataset/dataset.hpp>
#include <actortrain/dataset/input_context.hpp>

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace actortrain {

/// Positions [begin, end) of one pipeline of one run, each applied once; `checksum` is
/// the sum (mod 2^64) of ledger_mix(position, digest) over them.
struct ledger_segment {
  uint64_t run = 0;
  uint32_t pipeline = 0;
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t checksum = 0;
};

/// A step applied to a partition that held it already.
struct ledger_violation {
  uint64_t run = 0;
  uint32_t pipeline = 0;
  uint64_t position = 0;
  uint64_t digest = 0;
};

/// A ledger as plain data (messages, files): its segments in (run, pipeline, begin)
/// order and its violations in the order they happened.
struct ledger_data {
  std::vector<ledger_segment> segments;
  std::vector<ledger_violation> violations;
};

/// What one position contributes to its segment's checksum.
uint64_t ledger_mix(uint64_t position, uint64_t digest);

/// One partition's ledger. Not thread-safe (its ps shard owns it).
class step_ledger {
 public:
  step_ledger() = default;
  explicit step_ledger(const ledger_data& d);

  /// Records that the step (run, pipeline, position) with batch `digest` was applied.
  /// Returns false, and records a violation, when the ledger held that step already.
  bool record(uint64_t run, uint32_t pipeline, uint64_t position, uint64_t digest);
  /// True when the step is held.
  bool holds(uint64_t run, uint32_t pipeline, uint64_t position) const;
  /// Steps held of run `run` (of every run: total()).
  uint64_t steps(uint64_t run) const;
  uint64_t total() const;
  /// Adds `other`'s violations that this one lacks (a restore keeps what was seen).
  void keep_violations(const std::vector<ledger_violation>& other);
  const std::vector<ledger_violation>& violations() const { return violations_; }
  /// Segments held (after compaction: as many as the gaps between applied positions).
  size_t segments() const;

  ledger_data data() const;

 private:
  struct seg {
    uint64_t end = 0;
    uint64_t checksum = 0;
  };
  // (run, pipeline) -> begin -> segment; adjacent segments are always merged.
  std::map<std::pair<uint64_t, uint32_t>, std::map<uint64_t, seg>> runs_;
  std::vector<ledger_violation> violations_;
};

/// ledger_data as JSON ({"segments": [[run, pipeline, begin, end, checksum], ...],
/// "violations": [[run, pipeline, position, digest], ...]}) and back; from_json throws
/// std::invalid_argument naming what is malformed (overlapping or unordered segments, a
/// segment with begin >= end, a field that is not an unsigned integer).
nlohmann::json to_json(const ledger_data& d);
ledger_data ledger_from_json(const nlohmann::json& j);

/// partition_ledger::shard of a ledger read from a checkpoint (no shard reported it).
constexpr uint32_t no_shard = UINT32_MAX;

/// A partition's ledger with what it is the ledger of. A dynamic table's partition k (of
/// one per shard) names "rows" [k, k + 1): it holds the ids model::dynamic_owner gives k.
struct partition_ledger {
  uint32_t shard = 0;  ///< the ps shard that reported it (no_shard: read from a checkpoint)
  std::string variable;
  int64_t row_begin = 0;
  int64_t row_end = 0;
  ledger_data ledger;
};

/// A ps task's ledgers as one JSON document ({"format": "actortrain.ledgers",
/// "partitions": [{"shard", "variable", "row_begin", "row_end", "ledger"}, ...]}), and
/// back (std::invalid_argument naming what is wrong).
nlohmann::json ledgers_to_json(const std::vector<partition_ledger>& ls);
std::vector<partition_ledger> ledgers_from_json(const nlohmann::json& j);

/// The runs that `ls` record steps of, in order.
std::set<uint64_t> ledger_runs(const std::vector<partition_ledger>& ls);
/// Steps of run `run` that every partition of `ls` holds (0 without partitions).
uint64_t steps_on_every_partition(const std::vector<partition_ledger>& ls, uint64_t run);
/// Second applies recorded by all of `ls`.
size_t applied_twice(const std::vector<partition_ledger>& ls);

/// What a run was, as the application defined it: the checker enumerates `fn` itself.
struct ledger_run {
  uint64_t run = 1;  ///< its id (fit_result::run)
  dataset::dataset_fn fn;
  int num_pipelines = 1;          ///< cluster_spec's input pipelines
  int64_t replicas_in_sync = 1;   ///< input_context::num_replicas_in_sync (sync: workers)
  int epochs = 1;                 ///< epochs that must be complete (early stop: the epochs run)
  int64_t steps_per_epoch = 0;    ///< fit_options::steps_per_epoch
  /// true: every position the run's epochs define is applied on every partition; false
  /// (a run that failed): a valid prefix — no position twice, each the right batch.
  bool complete = true;
};

/// The verdict.
struct ledger_verdict {
  std::vector<std::string> violations;  ///< one line each; empty: exactly once
  /// Per run, steps applied on every partition.
  std::map<uint64_t, uint64_t> steps;
  bool ok() const { return violations.empty(); }
};

/// Checks `ledgers` (every partition of the model) against `runs`. A run in the ledgers
/// that `runs` does not name is a violation unless `other_runs` (earlier runs the caller
/// does not check). Throws what the dataset_fn or its iteration throws.
ledger_verdict check_ledgers(const std::vector<partition_ledger>& ledgers, const std::vector<ledger_run>& runs,
                             bool other_runs = false);

/// A variable of the model: its name and rows (what its partitions must cover).
struct ledger_variable {
  std::string name;
  int64_t rows = 0;
};

/// That `ledgers` are those of every partition of `variables` and nothing else: each
/// variable's rows tiled by its partitions, without a gap or an overlap (a ledger missing
/// — a ps task's file forgotten — would otherwise pass check_ledgers unseen). One line
/// per problem; empty: complete.
std::vector<std::string> check_coverage(const std::vector<partition_ledger>& ledgers,
                                        const std::vector<ledger_variable>& variables);

}  // namespace actortrain
