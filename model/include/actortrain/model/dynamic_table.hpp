#pragma once
// An embedding table keyed by the raw 64-bit id, as DeepRec's EmbeddingVariable and
// Monolith's collisionless tables keep them: no fixed range, no hashing of ids into
// buckets (which makes different ids share a row).
//
//  - A row exists once a gradient for its id was applied. Until then the id reads its
//    initial values: the table's initializer seeded by (seed, id) alone, so an id gets
//    the same initial row on any shard, whatever the number of shards. The row starts
//    there, with fresh optimizer slots, and takes that first gradient. Reads change
//    nothing (but a counter): a read retried, or a step computed twice, cannot make a
//    row exist, or an id be admitted, sooner than in a run without them.
//  - Admission (`admit_after` = N > 1): an id gets a row only at the N-th apply that
//    has a gradient for it (one per step: applies are what exactly-once counts); the
//    N - 1 gradients before are dropped, and counted.
//  - Eviction (`evict_after` = N > 0): a row not updated during the last N applies is
//    dropped, and counted. The table looks for such rows every max(1, N / 4) applies, so
//    a row goes between N and N + max(1, N / 4) - 1 applies after its last update. Ids
//    waiting for admission without a gradient for as long are forgotten too (a snapshot
//    keeps their counts and last steps, so a restore forgets them when the run without
//    it would).
//  - Checkpoints: save() gives every row (full), or the rows changed after a given apply
//    and the ids dropped after it (incremental: a row's last update says whether it
//    changed, and ids dropped are logged with their apply once log_removed_after() asked
//    for it); merge() takes the rows a filter accepts, so the snapshots of n shards
//    restore into m shards. Saving changes nothing: a checkpoint that never commits
//    costs the next one nothing.
//
// Rows live in chunks of `chunk_rows` rows (one array for the values and one per slot):
// the table grows a chunk at a time, without copying, except the first chunk, which
// starts at 64 rows and doubles up to `chunk_rows`, so a small table pays for its rows. Besides the floats of its rows and
// slots it holds 16 bytes a row (id, last update), 21 to 32 bytes a row
// of index while the table grows (an entry holds an id and its row, so a lookup reads
// the entry and then the row's values: two cache misses in a large table; the index
// grows by half, not by doubling; up to 36 bytes a row after evictions, 16 entries at
// least), the unused part of its last chunk, and the ids waiting for admission
// (bytes() counts it all): 1.2x the floats at width 16 with Adam's two slots, more for
// narrow rows without slots. The optimizer's step count (Adam's
// t) is the table's: every apply() counts once, touched rows or not, as a fixed table's
// partition counts every step.
//
// Not thread-safe: one owner (a ps shard, a local trainer) calls it.

#include <actortrain/model/initializer.hpp>
#include <actortrain/model/optim/optimizer.hpp>
#include <actortrain/model/waiting_id.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace actortrain::model {

struct dynamic_table_options {
  /// Row width (> 0).
  int64_t dim = 0;
  /// Fills each new row (a 1 x dim matrix), seeded by dynamic_table::row_seed(seed, id).
  /// A read split over threads calls it from each at once: it must depend on its
  /// arguments alone (the built-in initializers do).
  initializer init;
  uint64_t seed = 0;
  /// An id gets a row at the admit_after-th apply with a gradient for it (0 and 1: at the first).
  uint64_t admit_after = 0;
  /// Rows not updated during this many applies are dropped (0: never).
  uint64_t evict_after = 0;
  /// Rows per chunk (> 0).
  int64_t chunk_rows = 1 << 14;
};

/// What a table did so far.
struct dynamic_table_counts {
  uint64_t rows = 0;            ///< rows held now
  uint64_t created = 0;         ///< rows created (an evicted id trained again is created again)
  uint64_t evicted = 0;         ///< rows dropped by eviction
  uint64_t waiting = 0;         ///< ids seen but not yet admitted, now
  uint64_t unadmitted_reads = 0;    ///< training reads of an id without a row (its initial values)
  uint64_t dropped_gradients = 0;   ///< gradient rows of ids without a row, dropped
};

class dynamic_table {
 public:
  /// `slot_init`: the initial value of each optimizer slot (optimizer::slot_names()
  /// order); a new row's slots start there. Throws std::invalid_argument for a dim or
  /// chunk_rows <= 0 or an empty initializer.
  dynamic_table(dynamic_table_options o, std::vector<float> slot_init);
  /// With the slots of `opt`, at their initial values (optimizer::make_slots).
  dynamic_table(dynamic_table_options o, const optimizer& opt);
  ~dynamic_table();
  dynamic_table(dynamic_table&&) noexcept;
  dynamic_table& operator=(dynamic_table&&) noexcept;

  /// The seed of id's initial row.
  static uint64_t row_seed(uint64_t seed, int64_t id);

  int64_t dim() const;
  size_t num_slots() const;

  /// Writes the rows of ids[0..n) (any order, repeats allowed) into `out` (n x dim,
  /// row-major); an id without a row reads its initial values. Changes nothing but
  /// counts().unadmitted_reads, which counts `training` reads of ids without a row.
  /// `threads` > 1 splits a read of many ids (parts of at least 32,768) over that many
  /// threads: the caller's and threads started for the call, joined before it returns
  /// (a large table's reads wait on memory, and parts wait in parallel). Same result.
  void read(const int64_t* ids, size_t n, float* out, bool training, unsigned threads = 1);

  /// One optimizer step: gradient row j (of `grads`, n x dim, row-major) for ids[j]
  /// (unique). An id without a row gets one, or with admit_after, counts towards it and
  /// its gradient is dropped (counted) until admitted. Counts one step
  /// (the optimizer's and eviction's) even when n == 0. Throws what
  /// optimizer::apply_rows throws, std::invalid_argument for a repeated id.
  void apply(const optimizer& opt, const int64_t* ids, size_t n, const float* grads, double lr_scale = 1.0);

  /// Whether id has a row; if so its values (dim floats) are copied to `out` (may be null).
  bool find(int64_t id, float* out = nullptr) const;
  /// Applies so far (the optimizer's step count).
  int64_t iterations() const;
  dynamic_table_counts counts() const;
  /// Bytes the table holds: chunks, index, per-row bookkeeping, waiting ids.
  size_t bytes() const;
  /// The bytes of the floats of its rows and slots alone (rows x dim x (1 + slots) x 4).
  size_t payload_bytes() const;

  /// A table's rows, as a checkpoint keeps them.
  struct snapshot {
    bool full = true;
    int64_t dim = 0;
    int64_t iterations = 0;
    std::vector<int64_t> ids;                ///< one per row
    std::vector<float> values;               ///< ids.size() x dim
    std::vector<std::vector<float>> slots;   ///< per slot, ids.size() x dim
    std::vector<int64_t> last_update;        ///< per row: the apply that last changed it
    std::vector<int64_t> removed;            ///< incremental: ids dropped after `since`
    std::vector<waiting_id> waiting;  ///< every id not yet admitted (by id)
  };
  /// since < 0: every row (full). Otherwise the rows created or changed after apply
  /// `since` (iterations() then; last_update > since) and the ids dropped after it, to be
  /// merged over a full snapshot taken at that apply. Every waiting id either way.
  /// Throws std::logic_error when the ids dropped after `since` are not known:
  /// log_removed_after(s) was not called with an s <= since since the last merge.
  snapshot save(int64_t since = -1) const;
  /// Logs the ids dropped from now on, with their apply, and forgets those dropped at or
  /// before apply `since`: save(x) works for x >= since from here on. A negative since
  /// stops logging (and forgets the log). A table logs nothing until asked, so one never
  /// checkpointed incrementally keeps no log.
  void log_removed_after(int64_t since);
  /// Takes the rows and waiting ids of `s` that `mine` accepts (all without a filter),
  /// replacing rows of the same ids and the waiting ids `mine` accepts, drops its
  /// removed ids that `mine` accepts, and makes
  /// s.iterations the step count. A restore merges into an empty table the full
  /// snapshots of every shard, then their incremental ones in order. Throws
  /// std::invalid_argument for a snapshot of another width or slot count, or of
  /// inconsistent sizes (nothing changes then). A removed id is no longer waiting for
  /// admission either; a waiting id keeps its count and last step.
  void merge(const snapshot& s, const std::function<bool(int64_t)>& mine = {});
  /// Drops every row and waiting id (counts stay).
  void clear();

 private:
  struct impl;
  std::unique_ptr<impl> p_;
};

}  // namespace actortrain::model
