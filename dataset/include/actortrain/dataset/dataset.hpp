#pragma once
// The input pipeline: a `dataset` is a cheap, copyable handle to an immutable graph of
// small view nodes (sources at the leaves, transformations above them), in the manner of
// tf.data and of flashlight's dataset views.
//
// example[in_dataset]:
//   auto train = from_idx(images, labels, 1 / 255.f)
//                    .shuffle(60000, /*seed=*/1)
//                    .batch(128)
//                    .prefetch(2);
//   for (auto it = train.iterate(epoch); auto b = it->next();) std::printf("%d rows\n", static_cast<int>(b->rows()));
//
// Determinism. Every pipeline is a pure function of (seeds, epoch, position):
// `iterate(e, p)` yields exactly the elements that `iterate(e, 0)` yields from position p
// on, on every platform (randomness comes from model/random.hpp's counter-based draws,
// never from std:: distributions). So a dataset shard replays any position after a crash
// instead of keeping batches.
//
// Seeking. Nodes that can compute their elements by index (sources, cache, and map,
// batch, shuffle, shard, take, skip, repeat and concatenate over such nodes) seek with
// index arithmetic, without producing the skipped elements. Over nodes without random
// access (filter, prefetch), map, batch, shard, take, skip, prefetch and repeat of known
// length still translate the start position to their upstream's; filter, shuffle, and
// repeat or concatenate of unknown length replay from the start of the epoch.
//
// Thread safety. Datasets are immutable; copies share their nodes. Any number of
// iterators over the same dataset may run concurrently on different threads. User
// functions (map, filter, from_files readers) may therefore be called concurrently and
// must be thread-safe, and must be deterministic for replay to hold.
//
// Errors. Bad arguments to a transformation throw std::invalid_argument naming the value
// when the transformation is built. Errors met while producing data (user functions,
// elements that cannot be batched, files read lazily by from_files) are thrown by
// iterator::next() or, where a node needs it, by iterate() and cardinality().

#include <actortrain/dataset/element.hpp>
#include <actortrain/dataset/iterator.hpp>
#include <actortrain/model/batch_source.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace actortrain::dataset {

namespace detail {
class node;
}  // namespace detail

/// A function applied to every element by map(). Called concurrently by separate
/// iterators; must be deterministic.
using map_fn = std::function<element(element)>;

/// A map function that also receives a per-element seed,
/// `model::draw(seed, position, epoch)`: random augmentation that replays exactly.
using seeded_map_fn = std::function<element(element, uint64_t element_seed)>;

/// A predicate for filter(). Called concurrently by separate iterators; deterministic.
using predicate_fn = std::function<bool(const element&)>;

class dataset {
 public:
  /// An empty dataset (no elements).
  dataset();

  /// Wraps a node. For the dataset layer's own sources; users never need it.
  explicit dataset(std::shared_ptr<const detail::node> root);

  // -- iteration -------------------------------------------------------------------

  /// Starts a pass over epoch `epoch` at position `start_position` (positions past the end
  /// give an iterator that is at the end). `epoch` selects reshuffles and the per-element
  /// seeds of seeded maps. Cheap for index-computable pipelines; a pipeline with a filter
  /// replays up to the start position before returning (under a prefetch, on its thread).
  /// May throw what the pipeline throws while starting.
  std::unique_ptr<iterator> iterate(uint64_t epoch = 0, uint64_t start_position = 0) const;

  /// Number of elements if known without iterating (tf.data's rules). A from_files source
  /// reads its files to answer.
  cardinality_info cardinality() const;

  /// One line naming the pipeline, e.g.
  /// "idx(train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz) -> shuffle(60000, seed=1)
  /// -> batch(128)". File names appear without their directory, so the same pipeline
  /// describes itself the same way on every machine (job fingerprints use it).
  std::string describe() const;

  // -- transformations (each returns a new dataset; this one is unchanged) ------------

  /// Applies `fn` to every element, in order. Keeps cardinality and random access.
  dataset map(map_fn fn) const;

  /// Applies `fn(element, element_seed)` with element_seed = model::draw(seed, position,
  /// epoch): a different, reproducible seed for every element of every epoch.
  dataset map(seeded_map_fn fn, uint64_t seed) const;

  /// Keeps the elements for which `pred` is true. Cardinality becomes unknown; seeking
  /// replays the upstream from the start of the epoch.
  dataset filter(predicate_fn pred) const;

  /// Stacks the rows of `batch_size` consecutive elements (the last batch is smaller
  /// unless drop_remainder). Unlike tf.data, which adds a leading dimension, batching an
  /// already batched dataset concatenates rows: batch(4) of batch(32) gives 128-row
  /// elements. Over an index-computable upstream, rows are gathered straight into the
  /// batch matrices (no per-example allocation). Elements of one batch must agree on the
  /// number of feature matrices and on every column count, else next() throws
  /// std::runtime_error naming the batch and both column counts. Throws
  /// std::invalid_argument if batch_size < 1.
  dataset batch(int64_t batch_size, bool drop_remainder = false) const;

  /// tf.data's shuffle: fills a buffer with the first `buffer_size` elements, then
  /// repeatedly yields a random slot and refills it with the next upstream element.
  /// buffer_size >= cardinality gives a uniform permutation; buffer_size 1 keeps the
  /// order. The draws are model::draw(seed, k, epoch) for the k-th element, so the order
  /// is the same on every platform. Epoch e > 0 reshuffles only when
  /// reshuffle_each_iteration (otherwise every epoch uses epoch 0's order). Over an
  /// index-computable upstream of known cardinality n <= 2^26, each iterator computes the
  /// order on indices (4 bytes per element, O(n) when it starts), then seeks in O(1) and
  /// batches by gathering rows; over a larger or infinite one, the buffer holds indices
  /// and seeking replays indices only; otherwise the buffer holds elements (like tf.data)
  /// and seeking replays them. Throws std::invalid_argument if buffer_size < 1.
  dataset shuffle(int64_t buffer_size, uint64_t seed, bool reshuffle_each_iteration = true) const;

  /// Repeats the upstream `count` times (-1: forever). Repetition k of epoch e iterates
  /// the upstream at epoch e * count + k (forever: e * 2^32 + k), so reshuffles differ
  /// between repetitions yet replay exactly; repeat(1) is the identity. A repetition that
  /// yields nothing ends the data (repeating an empty dataset does not hang). Throws
  /// std::invalid_argument if count < -1.
  dataset repeat(int64_t count = -1) const;

  /// Keeps element i iff i % num_shards == index. Throws std::invalid_argument unless
  /// num_shards >= 1 and 0 <= index < num_shards.
  dataset shard(int64_t num_shards, int64_t index) const;

  /// The first `count` elements. Throws std::invalid_argument if count < 0.
  dataset take(int64_t count) const;

  /// All but the first `count` elements. Throws std::invalid_argument if count < 0.
  dataset skip(int64_t count) const;

  /// Materializes the upstream once, in memory, on first use (a blocking full pass at
  /// epoch 0, shared by every later iterator and epoch). To stay a function of (epoch,
  /// position), the cache always holds the upstream's epoch-0 pass: as in tf.data, caching
  /// after a reshuffling shuffle (or a seeded map) freezes its first order; put shuffle
  /// after cache to reshuffle every epoch. Iterating a cache of an infinite upstream
  /// throws std::invalid_argument. The cached elements live as long as the dataset's nodes.
  dataset cache() const;

  /// Runs the upstream on a background thread per iterator that keeps up to
  /// `buffer_size` elements ready. Keeps order and position; an exception thrown upstream
  /// is rethrown by next() after the elements before it. The thread sets flush-to-zero;
  /// the iterator's destructor stops and joins it (waiting at most for the element being
  /// produced, or for a replaying seek to finish), also when the consumer stops early. Throws std::invalid_argument if
  /// buffer_size < 1.
  dataset prefetch(int64_t buffer_size) const;

  /// The elements of this dataset, then those of `other`.
  dataset concatenate(const dataset& other) const;

  /// The node graph. For the dataset layer's own code (auto_shard); users never need it.
  const std::shared_ptr<const detail::node>& root() const { return root_; }

  // -- as the trainer's data ----------------------------------------------------------

  /// This dataset as a model::batch_source (model/batch_source.hpp): its epoch e is
  /// iterate(e), its count cardinality(). Implicit, so trainer::fit / evaluate / predict
  /// and fit_options::validation take a dataset; as_dataset() gives it back.
  operator model::batch_source() const;

 private:
  std::shared_ptr<const detail::node> root_;
};

/// The dataset a batch source was converted from, or nullopt for a batch source of
/// another kind (cluster::fit needs validation data as a dataset, to split it by shard).
std::optional<dataset> as_dataset(const model::batch_source& source);

}  // namespace actortrain::dataset
