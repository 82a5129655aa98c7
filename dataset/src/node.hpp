#pragma once
// Internal: the node graph behind `dataset` handles. Not installed.
//
// A node is immutable and shared by every dataset handle and iterator that reaches it; it
// never holds per-iteration state. Per-iteration state lives in two kinds of objects a
// node creates:
//
//   accessor  random access by index within one epoch (`get(i)`, `gather(positions)`),
//             offered by nodes that can compute element i without producing elements
//             0..i-1 and know their length (or are infinite). Seeking is free.
//   iterator  sequential access from a start position (the public interface). Every node
//             can make one: by default an index loop over its accessor, else the node's
//             own `stream()`, which seeks by translating the start position to its
//             upstream's, or by replaying.
//
// Lifetime: accessors and iterators refer to their nodes by reference; the public
// dataset::iterate() returns an iterator that owns a reference to the root, which owns
// every node below it.

#include <actortrain/dataset/dataset.hpp>
#include <actortrain/dataset/element.hpp>
#include <actortrain/dataset/iterator.hpp>
#include <actortrain/dataset/sources.hpp>

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace actortrain::dataset::detail {

class node;
using node_ptr = std::shared_ptr<const node>;

/// Size of an accessor over an infinite dataset.
inline constexpr uint64_t infinite_size = std::numeric_limits<uint64_t>::max();

/// Random access to the elements of one epoch. Not thread-safe (one per iterator).
class accessor {
 public:
  virtual ~accessor() = default;

  /// Number of elements, or infinite_size.
  virtual uint64_t size() const = 0;

  /// Element i (i < size()).
  virtual element get(uint64_t i) = 0;

  /// The rows of the elements at `positions` (each < size()), stacked in that order,
  /// into `out` (whose previous contents are replaced). The default stacks get(i);
  /// nodes override it to copy rows without building per-element matrices.
  virtual void gather(const std::vector<uint64_t>& positions, element& out);
};

/// What a node is, for graph rewrites (auto_shard).
enum class node_kind {
  source,
  files,
  map,
  filter,
  batch,
  shuffle,
  repeat,
  shard,
  take,
  skip,
  cache,
  prefetch,
  concatenate,
};

class node {
 public:
  virtual ~node() = default;

  virtual node_kind kind() const = 0;

  virtual cardinality_info cardinality() const = 0;

  /// Random access to epoch `epoch`, or nullptr when this node cannot offer it (then
  /// iterate() uses stream()).
  virtual std::unique_ptr<accessor> access(uint64_t epoch) const;

  /// Sequential access from `start`: an index loop over access(epoch) when there is one,
  /// else stream(epoch, start).
  std::unique_ptr<iterator> iterate(uint64_t epoch, uint64_t start) const;

  /// This node's own part of describe(), e.g. "batch(128)".
  virtual std::string label() const = 0;

  /// The whole pipeline up to this node: "a -> b -> c"; nodes with several inputs
  /// describe them in parentheses.
  std::string describe() const;

  /// The upstream nodes (empty for sources).
  virtual std::vector<node_ptr> inputs() const { return {}; }

  /// The same transformation over other inputs (one per inputs() entry). Only called on
  /// nodes that have inputs.
  virtual node_ptr rebuild(std::vector<node_ptr> inputs) const;

 protected:
  /// Sequential access for nodes without random access. The default throws
  /// std::logic_error (a node must offer one of access() and stream()).
  virtual std::unique_ptr<iterator> stream(uint64_t epoch, uint64_t start) const;
};

// -- helpers shared by the nodes ------------------------------------------------------

/// a * b, saturating at UINT64_MAX.
inline uint64_t mul_sat(uint64_t a, uint64_t b) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a)
    return std::numeric_limits<uint64_t>::max();
  return a * b;
}

/// a + b, saturating at UINT64_MAX.
inline uint64_t add_sat(uint64_t a, uint64_t b) {
  return a > std::numeric_limits<uint64_t>::max() - b ? std::numeric_limits<uint64_t>::max()
                                                       : a + b;
}

/// Elements that cannot be stacked into one batch.
class shape_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Throws shape_error unless `e` can be stacked under `first` (same number of feature
/// matrices, same column counts).
void check_stackable(const element& first, const element& e);

/// Makes `out` `rows` rows of `like`'s columns (features, ids and labels), values unset.
void shape_rows(const element& like, Eigen::Index rows, element& out);

/// Row `from` of `src` (features, ids and labels) into row `to` of `dst`, which has
/// src's columns.
void copy_element_row(const element& src, Eigen::Index from, element& dst, Eigen::Index to);

/// Stacks the rows of `parts` in order into `out`. Throws shape_error naming the column
/// counts when the parts cannot be stacked. Empty `parts` gives an empty element.
void stack_rows(const std::vector<element>& parts, element& out);

/// "[r x c]".
std::string shape_of(const matrix& m);

/// The file name without its directory ("a/b/c.gz" -> "c.gz").
std::string base_name(const std::string& path);

/// An iterator over an accessor, from `start`.
std::unique_ptr<iterator> make_accessor_iterator(std::unique_ptr<accessor> a, uint64_t start);

/// An iterator that is at its end, with position `start`.
std::unique_ptr<iterator> make_empty_iterator(uint64_t start);

/// Seeks a sequential iterator by replay: calls next() until `it` reaches `start` or the
/// end, then makes it report `start` (It needs position(), next() and rebase()).
template <class It>
std::unique_ptr<iterator> replay_to(std::unique_ptr<It> it, uint64_t start) {
  while (it->position() < start && it->next()) {
  }
  it->rebase(start);
  return it;
}

/// Gathers `positions` from several parts (repetitions of a repeat, datasets of a
/// concatenation). `locate(pos)` gives {part, position within the part}; `gather_part(
/// part, local_positions, out)` gathers from one part. Gathers each part once and
/// scatters rows into place when every element is one row; else stacks per run of
/// consecutive positions in the same part.
template <class Locate, class GatherPart>
void gather_partitioned(const std::vector<uint64_t>& positions, element& out, Locate locate,
                        GatherPart gather_part) {
  std::vector<std::pair<uint64_t, uint64_t>> where(positions.size());
  bool single = true;
  for (size_t j = 0; j < positions.size(); ++j) {
    where[j] = locate(positions[j]);
    if (where[j].first != where[0].first) single = false;
  }
  std::vector<uint64_t> local;
  if (single) {
    local.reserve(positions.size());
    for (const auto& w : where) local.push_back(w.second);
    if (local.empty()) {
      out = element{};
      return;
    }
    gather_part(where[0].first, local, out);
    return;
  }
  // Group by part (ordered by part id, so the order of calls is deterministic).
  std::map<uint64_t, std::vector<size_t>> groups;
  for (size_t j = 0; j < where.size(); ++j) groups[where[j].first].push_back(j);
  std::vector<std::pair<std::vector<size_t>, element>> gathered;
  gathered.reserve(groups.size());
  bool one_row_each = true;
  for (auto& [part, slots] : groups) {
    local.clear();
    for (size_t j : slots) local.push_back(where[j].second);
    element e;
    gather_part(part, local, e);
    if (e.rows() != static_cast<int64_t>(slots.size())) one_row_each = false;
    gathered.emplace_back(std::move(slots), std::move(e));
  }
  if (one_row_each) {
    const element& first = gathered.front().second;
    for (size_t g = 1; g < gathered.size(); ++g) check_stackable(first, gathered[g].second);
    shape_rows(first, static_cast<Eigen::Index>(positions.size()), out);
    for (const auto& [slots, e] : gathered)
      for (size_t r = 0; r < slots.size(); ++r)
        copy_element_row(e, static_cast<Eigen::Index>(r), out, static_cast<Eigen::Index>(slots[r]));
    return;
  }
  // Elements of several rows: gather runs of consecutive positions in the same part.
  std::vector<element> runs;
  size_t j = 0;
  while (j < where.size()) {
    size_t end = j;
    local.clear();
    while (end < where.size() && where[end].first == where[j].first)
      local.push_back(where[end++].second);
    element e;
    gather_part(where[j].first, local, e);
    runs.push_back(std::move(e));
    j = end;
  }
  stack_rows(runs, out);
}

// -- node factories (one file each) ---------------------------------------------------

/// Rows of in-memory matrices (from_tensor_slices, from_idx, from_csv, cache).
/// Preconditions (checked by callers): every matrix of `all` has all.rows() rows.
node_ptr make_slices_node(element all, std::string label);

/// A list of whole elements (from_tensors, cache of multi-row elements).
node_ptr make_elements_node(std::vector<element> elements, std::string label);

node_ptr make_map_node(node_ptr upstream, map_fn fn);
node_ptr make_seeded_map_node(node_ptr upstream, seeded_map_fn fn, uint64_t seed);
node_ptr make_filter_node(node_ptr upstream, predicate_fn pred);
node_ptr make_batch_node(node_ptr upstream, uint64_t batch_size, bool drop_remainder);
node_ptr make_shuffle_node(node_ptr upstream, uint64_t buffer_size, uint64_t seed,
                           bool reshuffle_each_iteration);
/// count < 0: forever.
node_ptr make_repeat_node(node_ptr upstream, int64_t count);
node_ptr make_shard_node(node_ptr upstream, uint64_t num_shards, uint64_t index);
node_ptr make_take_node(node_ptr upstream, uint64_t count);
node_ptr make_skip_node(node_ptr upstream, uint64_t count);
node_ptr make_cache_node(node_ptr upstream);
node_ptr make_prefetch_node(node_ptr upstream, uint64_t buffer_size);
node_ptr make_concat_node(std::vector<node_ptr> parts);
node_ptr make_files_node(std::vector<std::string> files, file_reader_fn reader);

/// Number of files of a node of kind files.
size_t file_count(const node& files);

/// The files node `files` restricted to file i with i % num_shards == index (reusing the
/// files it has already read).
node_ptr shard_files(const node& files, uint64_t num_shards, uint64_t index);

}  // namespace actortrain::dataset::detail
