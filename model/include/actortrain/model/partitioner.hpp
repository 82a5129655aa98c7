#pragma once
// Partitioners and placement: how variables are split into row ranges and spread over
// parameter-server shards, as TensorFlow's tf.distribute.experimental.partitioners with
// ParameterServerStrategy.
//
// A partitioner decides only *how many* partitions a variable gets (along rows, never
// more than it has rows). Where the rows go is fixed by TF's "div" convention: with n
// partitions of R rows, partition k holds R / n rows and the first R % n partitions one
// extra (10 rows into 3 -> 4, 3, 3), in row order. `place` then assigns every partition
// of every variable to a ps shard round-robin (see `place`).
//
// Sizes are computed for float32 values (4 bytes each): ActorTrain variables are always
// float32 and two-dimensional {rows, cols}.

#include <actortrain/model/tensor.hpp>
#include <actortrain/model/variable.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace actortrain::model {

/// Bytes of one value; partitioners size shards with it.
constexpr int64_t bytes_per_value = 4;

/// Decides the number of row partitions of a variable. Implementations are immutable
/// values (safe to share between threads).
class partitioner {
 public:
  virtual ~partitioner() = default;
  /// Partitions for a float32 variable of `shape`, in [1, shape.rows]. Requires
  /// shape.rows >= 1 and shape.cols >= 1 (std::invalid_argument otherwise).
  virtual int64_t num_partitions(const shape2& shape) const = 0;
  /// "fixed_shards(num_shards=3)"; make_partitioner(describe()) rebuilds it.
  virtual std::string describe() const = 0;
  virtual std::unique_ptr<partitioner> clone() const = 0;
};

using partitioner_ptr = std::unique_ptr<partitioner>;

/// tf.distribute.experimental.partitioners.FixedShardsPartitioner: min(num_shards, rows)
/// partitions. Throws std::invalid_argument if num_shards < 1.
class fixed_shards final : public partitioner {
 public:
  explicit fixed_shards(int64_t num_shards);
  int64_t num_partitions(const shape2& shape) const override;
  std::string describe() const override;
  partitioner_ptr clone() const override;
  int64_t num_shards() const { return num_shards_; }

 private:
  int64_t num_shards_;
};

/// tf.distribute.experimental.partitioners.MinSizePartitioner: as many partitions as keep
/// each at about min_shard_bytes, i.e.
///   max(1, min(rows, max_shards, ceil(rows * cols * 4 / min_shard_bytes))).
/// (TF's rounding: a 300 KiB variable with the 256 KiB default and max_shards >= 2 gets
/// two 150 KiB partitions.) Defaults as TF: 256 KiB, at most 1 shard. Throws
/// std::invalid_argument if min_shard_bytes < 1 or max_shards < 1.
class min_size final : public partitioner {
 public:
  explicit min_size(int64_t min_shard_bytes = 256 << 10, int64_t max_shards = 1);
  int64_t num_partitions(const shape2& shape) const override;
  std::string describe() const override;
  partitioner_ptr clone() const override;

 private:
  int64_t min_shard_bytes_;
  int64_t max_shards_;
};

/// tf.distribute.experimental.partitioners.MaxSizePartitioner: partitions of at most
/// max_shard_bytes where possible, i.e. rows_per_shard = max(1, floor(max_shard_bytes /
/// (cols * 4))) and ceil(rows / rows_per_shard) partitions, capped at max_shards when
/// max_shards > 0 (0 = unbounded, TF's None). A single row larger than max_shard_bytes
/// still makes a partition of one row. Throws std::invalid_argument if
/// max_shard_bytes < 1 or max_shards < 0.
class max_size final : public partitioner {
 public:
  explicit max_size(int64_t max_shard_bytes, int64_t max_shards = 0);
  int64_t num_partitions(const shape2& shape) const override;
  std::string describe() const override;
  partitioner_ptr clone() const override;

 private:
  int64_t max_shard_bytes_;
  int64_t max_shards_;
};

/// Builds a partitioner from a command-line spec: "none" (returns nullptr: no
/// partitioning), "fixed_shards(3)", "min_size(min_shard_bytes=262144, max_shards=4)",
/// "max_size(1048576)"; arguments positional or by keyword, integers only. Throws
/// std::invalid_argument naming the bad token.
partitioner_ptr make_partitioner(const std::string& spec);

/// Rows [begin, end) of a variable.
struct row_range {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t rows() const { return end - begin; }
  friend bool operator==(const row_range& a, const row_range& b) {
    return a.begin == b.begin && a.end == b.end;
  }
};

/// TF's "div" split of `rows` into `num_partitions` contiguous ranges, in order, the first
/// rows % num_partitions one row longer. Throws std::invalid_argument unless
/// 1 <= num_partitions <= rows.
std::vector<row_range> split_rows(int64_t rows, int64_t num_partitions);

/// One partition of one variable and the ps shard that owns it.
struct partition {
  variable_id variable = 0;  ///< index into the spec list given to `place`
  int index = 0;             ///< partition k of that variable, in row order
  int64_t row_begin = 0;
  int64_t row_end = 0;       ///< exclusive
  int ps = 0;                ///< owning ps shard, 0 .. num_ps-1
  int64_t rows() const { return row_end - row_begin; }
};

/// Every partition of one variable, in row order; they cover [0, shape.rows) exactly.
struct variable_placement {
  variable_id variable = 0;
  std::string name;
  shape2 shape;
  bool sparse = false;
  /// A table keyed by raw ids (variable_spec::dynamic, shape.rows 0): one partition per
  /// shard, partition k on shard k holding the ids that dynamic_owner gives k, each with
  /// row_begin = row_end = 0. Its "rows" are ids: any id >= 0.
  bool dynamic = false;
  std::vector<partition> partitions;
};

/// The partition, of `num_partitions`, of a dynamic table that holds `id`: a hash of the
/// id, so that consecutive ids spread over the shards. Requires num_partitions >= 1.
int dynamic_owner(int64_t id, int num_partitions);

/// Where a row of a variable lives.
struct row_location {
  int partition = 0;      ///< index into variable_placement::partitions
  int64_t local_row = 0;  ///< row within that partition's block
  int ps = 0;
};

/// Rows of one lookup or sparse update that fall in one partition.
struct row_group {
  int partition = 0;
  int ps = 0;
  std::vector<int64_t> local_rows;  ///< in input order
  std::vector<size_t> positions;    ///< where each came from in the input
};

/// The result of `place`: immutable, cheap to copy, shared by coordinator and workers.
class placement {
 public:
  placement() = default;

  int num_ps() const { return num_ps_; }
  const std::vector<variable_placement>& variables() const { return variables_; }
  /// std::out_of_range for an unknown id.
  const variable_placement& variable(variable_id id) const;
  /// nullptr when no variable has that name.
  const variable_placement* find(const std::string& name) const;
  /// Total partitions over all variables.
  size_t num_partitions() const;

  /// The partitions owned by shard `ps`, in placement order (variables in declaration
  /// order, partitions in row order). std::out_of_range for ps outside [0, num_ps).
  std::vector<partition> partitions_on(int ps) const;

  /// The partition, local row and shard of `row` (an embedding lookup). O(log partitions).
  /// For a dynamic table `row` is an id (any id >= 0), its own local row. std::out_of_range
  /// for an unknown variable or a row outside [0, rows).
  row_location locate_row(variable_id id, int64_t row) const;

  /// Splits `ids` (any order, repeats kept) by partition; groups in partition order.
  /// std::out_of_range as locate_row.
  std::vector<row_group> group_rows(variable_id id, const std::vector<int64_t>& ids) const;

 private:
  friend placement place(const std::vector<variable_spec>&, const partitioner*, int);
  int num_ps_ = 0;
  std::vector<variable_placement> variables_;
};

/// Partitions every variable with `p` (nullptr = one partition per variable) and places
/// the partitions on `num_ps` shards round-robin by one counter that starts at 0 and
/// continues across variables in declaration order — partition k of variable i goes to
/// shard (partitions of variables 0..i-1 + k) % num_ps — as TF's ParameterServerStrategy
/// does (its `_variable_count`), so small variables do not all land on shard 0. A dynamic
/// table (variable_spec::dynamic) is not partitioned by `p` and takes no turn of the
/// counter: it gets a partition on every shard (variable_placement::dynamic). Throws
/// std::invalid_argument for num_ps < 1, an empty shape, a duplicate name (names key
/// checkpoint files), and std::logic_error if `p` returns a count outside [1, rows].
placement place(const std::vector<variable_spec>& vars, const partitioner* p, int num_ps);

}  // namespace actortrain::model
