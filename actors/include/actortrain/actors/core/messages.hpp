#pragma once
// Every message between ActorTrain's actors: atoms, identity types (fence, step id),
// tensor payloads and request/reply structs, all with inspect(), registered in one
// type-ID block by actortrain::configure(). Includes CAF: only actor translation units
// include this header.
//
// Identity. Every message carries a fence (coordinator_epoch, recovery_epoch,
// worker_generation, plus the worker it speaks for); every step message the step id
// (run, pipeline, position). Receivers keep the highest epochs they have seen and reject
// older ones (error code fenced_out), so a zombie coordinator, a pre-recovery push or a
// partitioned worker's late push cannot change state.
//
// Tensors. `tensor` shares an immutable matrix: in-process a message moves or shares it
// and nothing is copied (a ps shard hands its current partition to a pull and writes the
// next version in place only when no reader holds it any more). On the wire it is rows,
// cols and raw little-endian floats; the reader checks the announced length against the
// bytes that remain before allocating anything.

#include <actortrain/actors/core/step_id.hpp>
#include <actortrain/actors/ps/ledger.hpp>
#include <actortrain/model/tensor.hpp>

#include <caf/all.hpp>
#include <caf/binary_deserializer.hpp>

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace actortrain {

// -- atoms (0.17 style, at most 10 characters) ----------------------------------------

using pull_atom = caf::atom_constant<caf::atom("pull")>;
using pull_rows_atom = caf::atom_constant<caf::atom("pull_rows")>;
using push_atom = caf::atom_constant<caf::atom("push")>;
using hyper_atom = caf::atom_constant<caf::atom("hyper")>;
using init_atom = caf::atom_constant<caf::atom("init")>;
using stats_atom = caf::atom_constant<caf::atom("stats")>;
using fence_atom = caf::atom_constant<caf::atom("fence")>;
using batch_atom = caf::atom_constant<caf::atom("batch")>;
using step_atom = caf::atom_constant<caf::atom("step")>;
using eval_atom = caf::atom_constant<caf::atom("eval")>;
using predict_atom = caf::atom_constant<caf::atom("predict")>;
using join_atom = caf::atom_constant<caf::atom("join")>;
using fit_atom = caf::atom_constant<caf::atom("fit")>;
using done_atom = caf::atom_constant<caf::atom("done")>;
using status_atom = caf::atom_constant<caf::atom("status")>;
using stop_atom = caf::atom_constant<caf::atom("stop")>;
using read_atom = caf::atom_constant<caf::atom("read")>;
using outage_atom = caf::atom_constant<caf::atom("outage")>;
using source_atom = caf::atom_constant<caf::atom("source")>;
using slow_atom = caf::atom_constant<caf::atom("slow")>;
using snapshot_atom = caf::atom_constant<caf::atom("snapshot")>;
using replace_atom = caf::atom_constant<caf::atom("replace")>;
using ckpt_atom = caf::atom_constant<caf::atom("ckpt")>;
using recover_atom = caf::atom_constant<caf::atom("recover")>;
using round_atom = caf::atom_constant<caf::atom("round")>;
using register_atom = caf::atom_constant<caf::atom("register")>;
using ps_handle_atom = caf::atom_constant<caf::atom("ps_handle")>;
using watch_atom = caf::atom_constant<caf::atom("watch")>;
using report_atom = caf::atom_constant<caf::atom("report")>;
using gate_atom = caf::atom_constant<caf::atom("gate")>;
using keep_atom = caf::atom_constant<caf::atom("keep")>;
using restore_atom = caf::atom_constant<caf::atom("restore")>;
using ledger_atom = caf::atom_constant<caf::atom("ledger")>;

// -- identity -----------------------------------------------------------------------

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

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, fence& x) {
  return f(caf::meta::type_name("fence"), x.coordinator_epoch, x.recovery_epoch, x.worker_generation,
           x.worker);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_id& x) {
  return f(caf::meta::type_name("step_id"), x.run, x.pipeline, x.position);
}


// -- tensors ------------------------------------------------------------------------

/// A shared, immutable row-major float matrix in a message (null = absent).
struct tensor {
  std::shared_ptr<const model::matrix> value;

  tensor() = default;
  // The object itself is never const (only the handle is), so take() may move out of it.
  explicit tensor(model::matrix m) : value(std::make_shared<model::matrix>(std::move(m))) {}
  explicit tensor(std::shared_ptr<const model::matrix> p) : value(std::move(p)) {}
  int64_t rows() const { return value ? value->rows() : 0; }
  int64_t cols() const { return value ? value->cols() : 0; }
  /// The matrix, moved out when this is its only owner, else copied.
  model::matrix take();
};

/// Largest tensor a peer may announce (2^31 floats): bounds allocations from the wire.
constexpr uint64_t max_wire_floats = uint64_t{1} << 31;

namespace detail {
/// Tensors that travel beside a serialized message instead of inside it (the data plane,
/// data_plane.hpp): while a thread has one installed, inspect() writes a tensor as its
/// rows and cols only and appends its matrix to `out` (shared, not copied), and reads
/// one by taking the next matrix of `in`, which must have the announced shape. A null or
/// 0x0 tensor travels as 0x0 and takes no entry. Elsewhere (BASP) nothing changes.
struct tensor_side_channel {
  std::vector<std::shared_ptr<const model::matrix>> out;
  std::vector<std::shared_ptr<model::matrix>> in;
  size_t next = 0;
};
/// This thread's side channel (null: tensors travel inline).
tensor_side_channel*& side_channel();
}  // namespace detail

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tensor& x) {
  if constexpr (std::is_same<Inspector, caf::serializer>::value) {
    uint64_t rows = static_cast<uint64_t>(x.rows()), cols = static_cast<uint64_t>(x.cols());
    if (auto* side = detail::side_channel()) {
      if (rows == 0 && cols == 0) return f(rows, cols);
      side->out.push_back(x.value);
      return f(rows, cols);
    }
    size_t n = static_cast<size_t>(rows * cols);
    return caf::error::eval([&] { return f(rows, cols); }, [&] { return f.begin_sequence(n); },
                            [&]() -> caf::error {
                              if (n == 0) return caf::none;
                              return f.apply_raw(n * sizeof(float), const_cast<float*>(x.value->data()));
                            },
                            [&] { return f.end_sequence(); });
  } else if constexpr (std::is_same<Inspector, caf::deserializer>::value) {
    uint64_t rows = 0, cols = 0;
    size_t n = 0;
    if (auto* side = detail::side_channel()) {
      if (auto err = f(rows, cols)) return err;
      if (rows == 0 && cols == 0) {
        x.value.reset();
        return caf::none;
      }
      if (side->next >= side->in.size())
        return caf::make_error(caf::sec::invalid_argument, "tensor: more tensors than the frame announced");
      auto& m = side->in[side->next++];
      if (!m || static_cast<uint64_t>(m->rows()) != rows || static_cast<uint64_t>(m->cols()) != cols)
        return caf::make_error(caf::sec::invalid_argument, "tensor: shape differs from the frame's table");
      x.value = std::move(m);
      return caf::none;
    }
    return caf::error::eval(
      [&] { return f(rows, cols); }, [&] { return f.begin_sequence(n); },
      [&]() -> caf::error {
        // Check every announced length before allocating: a crafted header must not
        // make us reserve gigabytes.
        if (rows > max_wire_floats || cols > max_wire_floats || (cols != 0 && rows > max_wire_floats / cols) ||
            rows * cols != n)
          return caf::make_error(caf::sec::invalid_argument, "tensor: inconsistent dimensions");
        if (auto* bin = dynamic_cast<caf::binary_deserializer*>(&f))
          if (bin->remaining() < n * sizeof(float))
            return caf::make_error(caf::sec::end_of_stream, "tensor: length exceeds the message");
        if (rows == 0 && cols == 0) {
          x.value.reset();
          return caf::none;
        }
        auto m = std::make_shared<model::matrix>(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(cols));
        if (n > 0)
          if (auto err = f.apply_raw(n * sizeof(float), m->data())) return err;
        x.value = std::move(m);
        return caf::none;
      },
      [&] { return f.end_sequence(); });
  } else {
    auto r = x.rows(), c = x.cols();
    return f(caf::meta::type_name("tensor"), r, c);
  }
}

/// Row ids (a vector<int64_t> of a message) on the wire as one block of raw
/// little-endian bytes: CAF's stock vector serializer goes element by element, which
/// made a pull of 1M rows 10x slower than the same bytes over TCP. The reader checks the
/// announced count against the bytes that remain before allocating.
struct raw_ids {
  std::vector<int64_t>* v;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, raw_ids& x) {
  if constexpr (std::is_same<Inspector, caf::serializer>::value) {
    size_t n = x.v->size();
    return caf::error::eval([&] { return f.begin_sequence(n); },
                            [&]() -> caf::error {
                              return n == 0 ? caf::none : f.apply_raw(n * sizeof(int64_t), x.v->data());
                            },
                            [&] { return f.end_sequence(); });
  } else if constexpr (std::is_same<Inspector, caf::deserializer>::value) {
    size_t n = 0;
    return caf::error::eval([&] { return f.begin_sequence(n); },
                            [&]() -> caf::error {
                              if (n > max_wire_floats) return caf::make_error(caf::sec::invalid_argument, "ids: too many");
                              if (auto* bin = dynamic_cast<caf::binary_deserializer*>(&f))
                                if (bin->remaining() < n * sizeof(int64_t))
                                  return caf::make_error(caf::sec::end_of_stream, "ids: length exceeds the message");
                              x.v->resize(n);
                              return n == 0 ? caf::none : f.apply_raw(n * sizeof(int64_t), x.v->data());
                            },
                            [&] { return f.end_sequence(); });
  } else {
    return f(*x.v);
  }
}

// -- ledgers (ledger.hpp: plain data, no CAF there) -------------------------------------

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ledger_segment& x) {
  return f(caf::meta::type_name("ledger_segment"), x.run, x.pipeline, x.begin, x.end, x.checksum);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ledger_violation& x) {
  return f(caf::meta::type_name("ledger_violation"), x.run, x.pipeline, x.position, x.digest);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ledger_data& x) {
  return f(caf::meta::type_name("ledger_data"), x.segments, x.violations);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, partition_ledger& x) {
  return f(caf::meta::type_name("partition_ledger"), x.shard, x.variable, x.row_begin, x.row_end, x.ledger);
}

/// Every partition's ledger of one ps shard (ledger_atom).
struct ps_ledgers {
  uint32_t shard = 0;
  std::vector<partition_ledger> partitions;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ps_ledgers& x) {
  return f(caf::meta::type_name("ps_ledgers"), x.shard, x.partitions);
}

// -- parameter servers --------------------------------------------------------------

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

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, partition_key& x) {
  return f(caf::meta::type_name("partition_key"), x.variable, x.index);
}

/// What a ps shard holds of one partition, sent once at start (and on restore).
struct partition_init {
  partition_key key;
  std::string name;     ///< variable name, for error messages
  int64_t row_begin = 0;
  bool sparse = false;  ///< embedding rows: pulled by id
  tensor value;
  /// On restore: the optimizer's slots (optimizer::slot_names() order, each shaped like
  /// `value`) and apply count; empty slots start fresh.
  std::vector<std::string> slot_names;
  std::vector<tensor> slots;
  int64_t iterations = 0;
  /// The partition's ledger in that state (empty at start).
  ledger_data ledger;
  /// The state kept at an epoch gate (keep_atom) that the restored run still holds
  /// (null: none): its values, slots (slot_names' order) and apply count.
  tensor kept;
  std::vector<tensor> kept_slots;
  int64_t kept_iterations = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, partition_init& x) {
  return f(caf::meta::type_name("partition_init"), x.key, x.name, x.row_begin, x.sparse, x.value, x.slot_names,
           x.slots, x.iterations, x.ledger, x.kept, x.kept_slots, x.kept_iterations);
}

/// A shard's whole state: its partitions at start, or a checkpoint's on restore. The
/// de-duplication state is part of it (every step of `run` below `watermark` is in the
/// values, none above), so it rolls back with the values; `f` carries the epochs the
/// shard enforces from now on, and `min_generations` the worker fences (worker,
/// lowest generation accepted) a freshly spawned shard must know.
struct init_request {
  fence f;
  std::vector<partition_init> partitions;
  uint64_t run = 0;
  std::vector<uint64_t> watermark;
  std::vector<std::pair<uint32_t, uint64_t>> min_generations;
  /// Steps in the restored state (the checkpoint's step; 0 at start): ps_stats::base.
  uint64_t base = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, init_request& x) {
  return f(caf::meta::type_name("init_request"), x.f, x.partitions, x.run, x.watermark, x.min_generations, x.base);
}

struct pull_request {
  fence f;
  std::vector<partition_key> partitions;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, pull_request& x) {
  return f(caf::meta::type_name("pull_request"), x.f, x.partitions);
}

struct partition_value {
  partition_key key;
  uint64_t version = 0;  ///< updates applied to this partition so far
  tensor value;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, partition_value& x) {
  return f(caf::meta::type_name("partition_value"), x.key, x.version, x.value);
}

struct pull_reply {
  std::vector<partition_value> values;
};

}  // namespace actortrain

namespace actortrain::model {
class parameter_store;
class placement;
}  // namespace actortrain::model

namespace actortrain {

/// Puts a pulled partition into `store`. A variable held whole by one partition is
/// adopted without a copy when `share` (the store then only reads it); otherwise the
/// partition's rows are copied into a full matrix the store owns.
void store_partition(model::parameter_store& store, const model::placement& pl, partition_value& pv, bool share);

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, pull_reply& x) {
  return f(caf::meta::type_name("pull_reply"), x.values);
}

/// Rows `ids` (global row numbers of the variable) of the partitions this shard holds.
struct pull_rows_request {
  fence f;
  int32_t variable = 0;
  std::vector<int64_t> ids;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, pull_rows_request& x) {
  raw_ids ids{&x.ids};
  return f(caf::meta::type_name("pull_rows_request"), x.f, x.variable, ids);
}

struct rows_reply {
  int32_t variable = 0;
  uint64_t version = 0;
  std::vector<int64_t> ids;
  tensor rows;  ///< ids.size() x row width
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rows_reply& x) {
  raw_ids ids{&x.ids};
  return f(caf::meta::type_name("rows_reply"), x.variable, x.version, ids, x.rows);
}

/// The gradient of one dense partition, computed on `read_version`.
struct dense_slice {
  partition_key key;
  uint64_t read_version = 0;
  tensor grad;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, dense_slice& x) {
  return f(caf::meta::type_name("dense_slice"), x.key, x.read_version, x.grad);
}

/// Row gradients of a sparse variable: ids (global rows, sorted, unique) in this shard's
/// partitions, one gradient row each.
struct sparse_slice {
  int32_t variable = 0;
  uint64_t read_version = 0;
  std::vector<int64_t> ids;
  tensor rows;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sparse_slice& x) {
  raw_ids ids{&x.ids};
  return f(caf::meta::type_name("sparse_slice"), x.variable, x.read_version, ids, x.rows);
}

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
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, push_request& x) {
  return f(caf::meta::type_name("push_request"), x.f, x.step, x.example_count, x.dense, x.sparse, x.watermark,
           x.attempt, x.more_steps, x.digests);
}

/// Which computation of a step a shard applied (ps_shard_options::apply_log).
struct applied_by {
  step_id step;
  uint32_t worker = 0;
  uint64_t generation = 0;
  uint64_t attempt = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, applied_by& x) {
  return f(caf::meta::type_name("applied_by"), x.step, x.worker, x.generation, x.attempt);
}

enum class push_status : uint8_t {
  applied,    ///< applied now
  duplicate,  ///< this step id was applied before: acknowledged, not applied again
  held,       ///< accepted and held by the apply policy (synchronous rounds)
};

std::string to_string(push_status s);

struct push_reply {
  push_status status = push_status::applied;
  uint64_t max_staleness = 0;  ///< max over slices of (version before apply - read_version)
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, push_reply& x) {
  auto s = static_cast<uint8_t>(x.status);
  auto restore = [&]() -> caf::error {
    if (s > static_cast<uint8_t>(push_status::held))
      return caf::make_error(caf::sec::invalid_argument, "push_reply: bad status");
    x.status = static_cast<push_status>(s);
    return caf::none;
  };
  return f(caf::meta::type_name("push_reply"), s, x.max_staleness, caf::meta::load_callback(restore));
}

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

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, round_request& x) {
  return f(caf::meta::type_name("round_request"), x.f, x.round, x.steps, x.example_count);
}

/// A round applied (or found applied before: `applied` = 0 pushes then).
struct round_reply {
  uint64_t round = 0;
  uint64_t applied = 0;        ///< held pushes the mean was formed from
  uint64_t max_staleness = 0;  ///< over the round's slices (0 unless versions moved meanwhile)
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, round_reply& x) {
  return f(caf::meta::type_name("round_reply"), x.round, x.applied, x.max_staleness);
}

struct hyperparams_request {
  fence f;
  std::vector<std::pair<std::string, double>> values;
  /// Orders changes: a shard takes a request only if (f's epochs, id) is newer than the
  /// last it took, so a retried request that arrives late, or twice, cannot undo a newer
  /// one. 0: always taken.
  uint64_t id = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, hyperparams_request& x) {
  return f(caf::meta::type_name("hyperparams_request"), x.f, x.values, x.id);
}

/// A shard's counters.
struct ps_stats {
  uint32_t shard = 0;
  uint64_t applied = 0;  ///< steps applied since the shard was initialized or restored
  uint64_t base = 0;     ///< steps in the state it was restored to (0: initialized)
  uint64_t duplicates = 0;
  uint64_t rejected = 0;
  uint64_t fenced = 0;
  uint64_t remembered = 0;  ///< step ids kept for de-duplication (bounded by the watermark)
  uint64_t held = 0;        ///< pushes held for a synchronous round not closed yet
  uint64_t rows_pulled = 0;  ///< embedding rows served by pull_rows
  std::vector<uint64_t> staleness_histogram;  ///< [k] = slices applied k versions late (last: >=)
  std::vector<partition_value> versions;      ///< keys and versions (no values)
  std::vector<applied_by> apply_log;          ///< with ps_shard_options::apply_log
  fence seen;                                 ///< the highest epochs it has seen
  std::vector<std::pair<uint32_t, uint64_t>> min_generations;  ///< per worker, the lowest accepted
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ps_stats& x) {
  return f(caf::meta::type_name("ps_stats"), x.shard, x.applied, x.base, x.duplicates, x.rejected, x.fenced, x.remembered,
           x.held, x.rows_pulled, x.staleness_histogram, x.versions, x.apply_log, x.seen, x.min_generations);
}

/// A partition's state for a checkpoint: values, optimizer slots (same shape), counters.
struct partition_snapshot {
  partition_key key;
  std::string name;  ///< the variable's
  int64_t row_begin = 0;
  uint64_t version = 0;
  int64_t iterations = 0;  ///< the optimizer's apply count on this block
  tensor value;
  std::vector<std::string> slot_names;
  std::vector<tensor> slots;
  ledger_data ledger;  ///< what the state holds
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, partition_snapshot& x) {
  return f(caf::meta::type_name("partition_snapshot"), x.key, x.name, x.row_begin, x.version, x.iterations, x.value,
           x.slot_names, x.slots, x.ledger);
}

struct ps_snapshot {
  uint32_t shard = 0;
  std::vector<partition_snapshot> partitions;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ps_snapshot& x) {
  return f(caf::meta::type_name("ps_snapshot"), x.shard, x.partitions);
}

/// A shared checkpoint (the cluster file's checkpoint.shared): the shard writes its own
/// partitions into the checkpoint directory the coordinator began, and answers with
/// ps_files (model/checkpoint/checkpoint.hpp: begin_checkpoint, write_partition_arrays,
/// commit_checkpoint).
struct checkpoint_target {
  std::string dir;  ///< the begun <root>/ckpt-<step>/
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, checkpoint_target& x) {
  return f(caf::meta::type_name("checkpoint_target"), x.dir);
}

/// A written array: its file name in the checkpoint directory, size and zlib CRC-32.
struct file_entry {
  std::string name;
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, file_entry& x) {
  return f(caf::meta::type_name("file_entry"), x.name, x.bytes, x.crc32);
}

/// One partition of a shared checkpoint as its shard wrote it.
struct partition_files {
  partition_key key;
  std::string name;  ///< the variable's
  int64_t row_begin = 0;
  int64_t row_end = 0;
  int64_t iterations = 0;
  file_entry values;
  std::vector<std::string> slot_names;
  std::vector<file_entry> slots;
  ledger_data ledger;  ///< what the written state holds (goes into the manifest)
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, partition_files& x) {
  return f(caf::meta::type_name("partition_files"), x.key, x.name, x.row_begin, x.row_end, x.iterations, x.values,
           x.slot_names, x.slots, x.ledger);
}

struct ps_files {
  uint32_t shard = 0;
  std::vector<partition_files> partitions;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ps_files& x) {
  return f(caf::meta::type_name("ps_files"), x.shard, x.partitions);
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

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, fence_request& x) {
  return f(caf::meta::type_name("fence_request"), x.f, x.id);
}

// -- dataset shards -----------------------------------------------------------------

/// A batch as it travels: features (one per model input) and labels.
struct batch_data {
  std::vector<tensor> features;
  tensor labels;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, batch_data& x) {
  return f(caf::meta::type_name("batch_data"), x.features, x.labels);
}

/// The batch of step `step`: element step.position - epoch_begin of the pipeline's pass
/// over epoch `epoch` (positions count on across epochs within a run).
struct batch_request {
  fence f;
  step_id step;
  uint64_t epoch = 0;
  uint64_t epoch_begin = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, batch_request& x) {
  return f(caf::meta::type_name("batch_request"), x.f, x.step, x.epoch, x.epoch_begin);
}

/// The batch at step.position, or end_of_data (a reply, not an error).
struct batch_reply {
  step_id step;
  bool end_of_data = false;
  batch_data batch;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, batch_reply& x) {
  return f(caf::meta::type_name("batch_reply"), x.step, x.end_of_data, x.batch);
}

// -- workers ------------------------------------------------------------------------

/// k consecutive steps of one pipeline to run (steps_per_execution = k), with the
/// dataset shard that serves them.
struct step_task {
  fence f;
  caf::actor source;           ///< the dataset shard serving these steps' batches
  std::vector<step_id> steps;  ///< consecutive positions of one pipeline, one epoch
  uint64_t epoch = 0;
  uint64_t epoch_begin = 0;    ///< position where that epoch starts
  bool training = true;        ///< false: evaluation (forward only, no push)
  bool outputs = false;        ///< evaluation for predict: return the model's outputs, skip loss and metrics
  /// Per pipeline of the run: every position below is applied on every shard (the
  /// coordinator's watermark; workers pass it on in their pushes).
  std::vector<uint64_t> watermark;
  /// The ps shards by index as the coordinator knows them (a lost shard is respawned
  /// under a new handle); the worker pulls from and pushes to these from this task on.
  std::vector<caf::actor> ps;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_task& x) {
  return f(caf::meta::type_name("step_task"), x.f, x.source, x.steps, x.epoch, x.epoch_begin, x.training,
           x.outputs, x.watermark, x.ps);
}

/// Microseconds spent per phase of a step.
struct phase_timings {
  uint64_t batch_us = 0;
  uint64_t pull_us = 0;
  uint64_t compute_us = 0;
  uint64_t push_us = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, phase_timings& x) {
  return f(caf::meta::type_name("phase_timings"), x.batch_us, x.pull_us, x.compute_us, x.push_us);
}

struct step_result {
  step_id step;
  uint32_t worker = 0;
  uint64_t generation = 0;
  bool end_of_data = false;  ///< the pipeline had no batch at this position
  double loss = 0;           ///< batch-mean loss
  int64_t example_count = 0;
  std::vector<std::vector<double>> metric_states;  ///< metric::state() per compiled metric
  uint64_t max_staleness = 0;
  phase_timings timings;
  tensor outputs;  ///< the model's outputs for the batch, when the task asked for them
  uint64_t digest = 0;  ///< of the batch (dataset::element_digest), for the ledgers
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_result& x) {
  return f(caf::meta::type_name("step_result"), x.step, x.worker, x.generation, x.end_of_data, x.loss,
           x.example_count, x.metric_states, x.max_staleness, x.timings, x.outputs, x.digest);
}

struct task_result {
  std::vector<step_result> steps;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, task_result& x) {
  return f(caf::meta::type_name("task_result"), x.steps);
}

// -- coordinator --------------------------------------------------------------------

/// One fit call: train on `pipelines` (dataset shards, one per input pipeline) for
/// `epochs`; evaluate on `eval_pipelines` after every epoch when there are any.
struct run_spec {
  std::vector<caf::actor> pipelines;
  std::vector<caf::actor> eval_pipelines;
  int32_t epochs = 1;
  int64_t steps_per_epoch = 0;  ///< 0: an epoch ends with the data of every pipeline
  bool visitation_log = false;  ///< return a visit per applied step in run_summary
  /// Continue the run saved in the newest committed checkpoint under this directory.
  std::string resume_from;
  /// The epoch gate: after each epoch_done event the coordinator waits (at most its
  /// request timeout) for the application's gate_decision before the next epoch begins
  /// or the run ends: Keras's synchronous epoch-end callbacks.
  bool epoch_gate = false;
  /// Set on every shard before the run's first step (what the callbacks' on_epoch_begin
  /// of the first epoch asked for: a learning-rate schedule's first rate).
  std::vector<std::pair<std::string, double>> hyperparams;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, run_spec& x) {
  return f(caf::meta::type_name("run_spec"), x.pipelines, x.eval_pipelines, x.epochs, x.steps_per_epoch,
           x.visitation_log, x.resume_from, x.epoch_gate, x.hyperparams);
}

/// What the application decided at an epoch gate (gate_atom, run, epoch, decision),
/// carried out in this order: keep, hyperparameters, then the next epoch or, when
/// stopping or after the last epoch, the restore and the end of the run. (A checkpoint
/// asked for at the gate is a ckpt_atom request sent just before: it is written before
/// the next epoch's first step, or before the run ends.)
struct gate_decision {
  uint64_t gate = 0;  ///< the gate decided for (event::gate of its epoch_done)
  bool stop = false;  ///< end the run now (Keras's stop_training)
  bool keep = false;  ///< every shard keeps a copy of its state as this epoch left it
  bool restore_at_end = false;  ///< the run ends with the shards back at the kept state
  std::vector<std::pair<std::string, double>> hyperparams;  ///< set on every shard before the next epoch
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, gate_decision& x) {
  return f(caf::meta::type_name("gate_decision"), x.gate, x.stop, x.keep, x.restore_at_end, x.hyperparams);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, visit& x) {
  return f(caf::meta::type_name("visit"), x.run, x.pipeline, x.position, x.worker, x.generation);
}

/// Values per epoch (Keras's History) as parallel vectors.
struct run_summary {
  uint64_t run = 0;
  std::vector<std::string> keys;
  std::vector<std::vector<double>> values;
  int64_t steps = 0;
  bool ran_out = false;  ///< steps_per_epoch outlasted the data
  std::vector<visit> visits;  ///< with run_spec::visitation_log, in the order applied
  int64_t stopped_epoch = -1;  ///< the epoch after which a gate decision stopped the run
  int64_t restored_epoch = -1;  ///< the epoch whose kept state the shards were restored to
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, run_summary& x) {
  return f(caf::meta::type_name("run_summary"), x.run, x.keys, x.values, x.steps, x.ran_out, x.visits, x.stopped_epoch,
           x.restored_epoch);
}

/// Evaluate once over `pipelines` (every batch once); with `outputs` (predict), collect
/// the model's outputs instead of loss and metrics.
struct eval_spec {
  std::vector<caf::actor> pipelines;
  bool outputs = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, eval_spec& x) {
  return f(caf::meta::type_name("eval_spec"), x.pipelines, x.outputs);
}

struct eval_summary {
  std::vector<std::string> keys;
  std::vector<double> values;
  /// With eval_spec::outputs: one per batch, by pipeline, then position.
  std::vector<tensor> outputs;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, eval_summary& x) {
  return f(caf::meta::type_name("eval_summary"), x.keys, x.values, x.outputs);
}

/// What `actortrain status` and the embedding app see.
struct worker_status {
  uint32_t id = 0;
  uint64_t generation = 0;
  bool alive = true;
  bool busy = false;
  uint64_t steps = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, worker_status& x) {
  return f(caf::meta::type_name("worker_status"), x.id, x.generation, x.alive, x.busy, x.steps);
}

struct cluster_status {
  uint64_t run = 0;
  bool training = false;
  int64_t epoch = -1;
  uint64_t steps_applied = 0;
  std::vector<worker_status> workers;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, cluster_status& x) {
  return f(caf::meta::type_name("cluster_status"), x.run, x.training, x.epoch, x.steps_applied, x.workers);
}

// -- live status (cluster::status, actortrain status) -------------------------------

struct worker_report {
  uint32_t id = 0;
  uint64_t generation = 0;
  bool alive = true;
  bool busy = false;
  uint64_t steps = 0;             ///< steps it computed that were applied, this run
  double steps_per_second = 0;    ///< over its last applied steps (up to 64, within 10 s)
  double mean_staleness = 0;      ///< of those steps
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, worker_report& x) {
  return f(caf::meta::type_name("worker_report"), x.id, x.generation, x.alive, x.busy, x.steps, x.steps_per_second,
           x.mean_staleness);
}

struct partition_report {
  std::string variable;
  int32_t index = 0;
  int64_t row_begin = 0;
  int64_t row_end = 0;
  int64_t cols = 0;
  uint64_t version = 0;  ///< updates applied to it
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, partition_report& x) {
  return f(caf::meta::type_name("partition_report"), x.variable, x.index, x.row_begin, x.row_end, x.cols, x.version);
}

struct shard_report {
  uint32_t shard = 0;
  std::string error;  ///< why it did not answer ("" = it did)
  uint64_t applied = 0;  ///< steps in its state
  uint64_t base = 0;     ///< the checkpoint step it was restored to (0: none)
  std::vector<partition_report> partitions;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, shard_report& x) {
  return f(caf::meta::type_name("shard_report"), x.shard, x.error, x.applied, x.base, x.partitions);
}

/// What the coordinator says of a running cluster (report_atom): workers, ps shards, the
/// last checkpoint and the recent failures and recoveries. describe() renders it.
struct status_report {
  uint64_t run = 0;
  bool training = false;
  int64_t epoch = -1;
  uint64_t steps_applied = 0;
  double uptime = 0;  ///< seconds since the coordinator started
  std::vector<worker_report> workers;
  std::vector<shard_report> shards;
  int64_t checkpoint_step = -1;  ///< the last committed (-1: none)
  std::string checkpoint_dir;
  double checkpoint_age = 0;  ///< seconds since it committed
  std::vector<std::pair<double, std::string>> recent;  ///< (seconds since start, what), oldest first
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, status_report& x) {
  return f(caf::meta::type_name("status_report"), x.run, x.training, x.epoch, x.steps_applied, x.uptime, x.workers,
           x.shards, x.checkpoint_step, x.checkpoint_dir, x.checkpoint_age, x.recent);
}

/// The report as text, one line per worker, shard and recent event.
std::string describe(const status_report& r);

// -- processes (actortrain/actors/net/process.hpp) ------------------------------------------

/// A worker task asks the coordinator's task to admit its model replica.
struct node_registration {
  uint32_t worker = 0;  ///< the task's index: the worker id
  std::vector<std::pair<std::string, std::string>> fingerprint;
  caf::actor replica;  ///< the worker actor
  caf::actor node;     ///< the task's node actor (told when the job ends)
  std::string task;    ///< "worker:1 at 127.0.0.1:7004", for messages
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_registration& x) {
  return f(caf::meta::type_name("node_registration"), x.worker, x.fingerprint, x.replica, x.node, x.task);
}

/// What a task answers (ps_handle_atom, index) with: ps shard `index` and, when its
/// process serves one, the shard's data plane (data_plane.hpp; port 0 = none: TLS mode,
/// or turned off), where a client presents `data_token`.
struct shard_contact {
  caf::actor shard;
  uint16_t data_port = 0;
  std::string data_token;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, shard_contact& x) {
  return f(caf::meta::type_name("shard_contact"), x.shard, x.data_port, x.data_token);
}

/// The end of a job, sent by the coordinator's task to every other task: the run's
/// summary, or what ended it.
struct job_outcome {
  run_summary summary;
  std::string error;  ///< "" = the run succeeded
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_outcome& x) {
  return f(caf::meta::type_name("job_outcome"), x.summary, x.error);
}

}  // namespace actortrain

// One type-ID block for every ActorTrain message type, starting at CAF's first custom
// id. An application that adds its own block starts it at
// caf::id_block::actortrain::end (see actortrain/actors/core/configure.hpp).
CAF_BEGIN_TYPE_ID_BLOCK(actortrain, caf::first_custom_type_id)
CAF_ADD_TYPE_ID(actortrain, (actortrain::fence))
CAF_ADD_TYPE_ID(actortrain, (actortrain::step_id))
CAF_ADD_TYPE_ID(actortrain, (actortrain::tensor))
CAF_ADD_TYPE_ID(actortrain, (actortrain::partition_key))
CAF_ADD_TYPE_ID(actortrain, (actortrain::partition_init))
CAF_ADD_TYPE_ID(actortrain, (actortrain::init_request))
CAF_ADD_TYPE_ID(actortrain, (actortrain::pull_request))
CAF_ADD_TYPE_ID(actortrain, (actortrain::partition_value))
CAF_ADD_TYPE_ID(actortrain, (actortrain::pull_reply))
CAF_ADD_TYPE_ID(actortrain, (actortrain::pull_rows_request))
CAF_ADD_TYPE_ID(actortrain, (actortrain::rows_reply))
CAF_ADD_TYPE_ID(actortrain, (actortrain::dense_slice))
CAF_ADD_TYPE_ID(actortrain, (actortrain::sparse_slice))
CAF_ADD_TYPE_ID(actortrain, (actortrain::push_request))
CAF_ADD_TYPE_ID(actortrain, (actortrain::push_reply))
CAF_ADD_TYPE_ID(actortrain, (actortrain::applied_by))
CAF_ADD_TYPE_ID(actortrain, (actortrain::hyperparams_request))
CAF_ADD_TYPE_ID(actortrain, (actortrain::round_request))
CAF_ADD_TYPE_ID(actortrain, (actortrain::round_reply))
CAF_ADD_TYPE_ID(actortrain, (actortrain::ps_stats))
CAF_ADD_TYPE_ID(actortrain, (actortrain::fence_request))
CAF_ADD_TYPE_ID(actortrain, (actortrain::partition_snapshot))
CAF_ADD_TYPE_ID(actortrain, (actortrain::ps_snapshot))
CAF_ADD_TYPE_ID(actortrain, (actortrain::batch_data))
CAF_ADD_TYPE_ID(actortrain, (actortrain::batch_request))
CAF_ADD_TYPE_ID(actortrain, (actortrain::batch_reply))
CAF_ADD_TYPE_ID(actortrain, (actortrain::step_task))
CAF_ADD_TYPE_ID(actortrain, (actortrain::phase_timings))
CAF_ADD_TYPE_ID(actortrain, (actortrain::step_result))
CAF_ADD_TYPE_ID(actortrain, (actortrain::task_result))
CAF_ADD_TYPE_ID(actortrain, (actortrain::run_spec))
CAF_ADD_TYPE_ID(actortrain, (actortrain::visit))
CAF_ADD_TYPE_ID(actortrain, (actortrain::run_summary))
CAF_ADD_TYPE_ID(actortrain, (actortrain::eval_spec))
CAF_ADD_TYPE_ID(actortrain, (actortrain::eval_summary))
CAF_ADD_TYPE_ID(actortrain, (actortrain::worker_status))
CAF_ADD_TYPE_ID(actortrain, (actortrain::cluster_status))
CAF_ADD_TYPE_ID(actortrain, (actortrain::node_registration))
CAF_ADD_TYPE_ID(actortrain, (actortrain::job_outcome))
CAF_ADD_TYPE_ID(actortrain, (actortrain::shard_contact))
CAF_ADD_TYPE_ID(actortrain, (actortrain::checkpoint_target))
CAF_ADD_TYPE_ID(actortrain, (actortrain::ps_files))
CAF_ADD_TYPE_ID(actortrain, (actortrain::status_report))
CAF_ADD_TYPE_ID(actortrain, (actortrain::gate_decision))
CAF_ADD_TYPE_ID(actortrain, (actortrain::ps_ledgers))
CAF_END_TYPE_ID_BLOCK(actortrain)

namespace actortrain {
/// Where an embedding application's own type-ID block may start.
constexpr caf::type_id_t first_app_type_id = caf::id_block::actortrain::end;
}  // namespace actortrain
