#pragma once
// One pass over a pipeline, from `dataset::iterate(epoch, start_position)`.

#include <actortrain/dataset/element.hpp>
#include <actortrain/model/batch_source.hpp>

#include <cstdint>
#include <optional>

namespace actortrain::dataset {

/// Yields the elements of one epoch of a pipeline, in order, from a start position.
///
/// Thread safety: one iterator is used by one thread at a time; separate iterators over
/// the same dataset may be used concurrently. An iterator keeps its dataset's nodes alive,
/// so it may outlive the `dataset` handle it came from.
///
/// Errors: next() rethrows what the pipeline throws (a failing map function, a file that
/// cannot be read, elements that cannot be batched). position() then still names the
/// element that could not be produced; the iterator itself is in a valid but unspecified
/// state and should be destroyed (resume with `iterate(epoch, position())`, which yields
/// the same elements a successful iteration would have).
///
/// It is the trainer's batch_iterator (model/batch_source.hpp) with a position.
class iterator : public model::batch_iterator {
 public:
  /// The next element, or nullopt at the end of the data (end of data is not an error;
  /// after it every further call returns nullopt).
  std::optional<element> next() override = 0;

  /// The position of the element the next call to next() yields: the start position
  /// plus the number of elements returned so far.
  virtual uint64_t position() const = 0;
};

}  // namespace actortrain::dataset
