#pragma once
// What the local trainer needs from its data: the batches of each epoch, in order, and
// whether an epoch's length is known or never ends. model/ declares it so that the
// trainer does not depend on dataset/ (the layers are model/ < dataset/ < actors/, and
// tests/tools/layers.sh checks that no include runs up).
//
// A `batch` holds rows() examples: one matrix per model input (features) plus a label
// matrix, every one with the same number of rows (dataset::element is this type). A
// `batch_source` is a cheap, copyable handle to something that yields the batches of
// epoch e through iterate(e); `count()` says how many there are per epoch, as far as that
// is known without iterating.
//
// dataset::dataset converts to a batch_source implicitly (epoch e is its iterate(e), the
// count is its cardinality()), so datasets are passed to the trainer as they always were:
//
// example[trainer]:
//   t.fit(train.shuffle(60000, 1).batch(128), opts);   // fit(const batch_source&, ...)
//   opts.validation = test.batch(1000);                // std::optional<batch_source>
//   t.evaluate(test.batch(1000));  t.predict(test.batch(1000));
//
// and dataset::as_dataset(source) gives the dataset back (cluster::fit splits validation
// data over its shards, which needs the pipeline, not only its batches). Other data
// implements batch_source::impl and wraps it: batch_source{std::make_shared<my_impl>(...)}.
//
// Thread safety: a source is immutable; each iterate() call gives an independent iterator,
// used by one thread at a time.

#include <actortrain/model/tensor.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

namespace actortrain::model {

/// One batch: rows() examples, one matrix per model input plus labels.
struct batch {
  /// One matrix per model input; each has rows() == number of examples.
  std::vector<matrix> features;
  /// rows() examples; 0 columns when the data has no labels.
  matrix labels;
  /// Inputs given as 64-bit integer ids, for embeddings: when k < ids.size() and
  /// ids[k].cols() > 0, input k is ids[k] (rows() x its width) and features[k] is
  /// rows() x 0. Empty when no input is. A step renumbers an embedding's ids to rows of
  /// the table it computes on (batch_rows.hpp), so a dynamic table takes any id >= 0;
  /// anywhere else the model sees them as floats, exact below 2^24 (ids_as_floats).
  std::vector<id_matrix> ids;

  /// Whether input k is given as ids.
  bool is_ids(size_t k) const { return k < ids.size() && ids[k].cols() > 0; }
  /// Whether any input is given as ids.
  bool has_ids() const {
    for (size_t k = 0; k < ids.size(); ++k)
      if (is_ids(k)) return true;
    return false;
  }

  /// Number of examples: features[0].rows(), or labels.rows() when there are no features.
  int64_t rows() const {
    return features.empty() ? static_cast<int64_t>(labels.rows())
                            : static_cast<int64_t>(features[0].rows());
  }
};

/// One pass over an epoch of a batch_source (dataset::iterator is one).
class batch_iterator {
 public:
  virtual ~batch_iterator() = default;
  /// The next batch, or nullopt at the end of the epoch (and on every later call).
  /// Rethrows what producing the batch throws.
  virtual std::optional<batch> next() = 0;
};

/// How many batches one epoch holds, as far as it is known without iterating.
struct batch_count {
  /// The number of batches when known; -1 otherwise.
  int64_t n = -1;
  /// The epoch never ends (dataset::repeat()): fit needs steps_per_epoch, evaluate and
  /// predict refuse it.
  bool infinite = false;
};

class batch_source {
 public:
  /// What a kind of data implements.
  class impl {
   public:
    virtual ~impl() = default;
    /// A pass over epoch `epoch` (epochs select reshuffles); may throw.
    virtual std::unique_ptr<batch_iterator> iterate(uint64_t epoch) const = 0;
    virtual batch_count count() const = 0;
  };

  /// Wraps `source`; throws std::invalid_argument when it is null.
  explicit batch_source(std::shared_ptr<const impl> source) : impl_(std::move(source)) {
    if (!impl_) throw std::invalid_argument("batch_source: null impl");
  }

  std::unique_ptr<batch_iterator> iterate(uint64_t epoch) const { return impl_->iterate(epoch); }
  batch_count count() const { return impl_->count(); }

  /// The implementation, for code that knows its kind (dataset::as_dataset).
  const impl& get() const { return *impl_; }

 private:
  std::shared_ptr<const impl> impl_;
};

}  // namespace actortrain::model
