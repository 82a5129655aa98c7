#pragma once
// In-memory sources and the file-list source. File formats: idx.hpp, csv.hpp.

#include <actortrain/dataset/dataset.hpp>
#include <actortrain/dataset/element.hpp>

#include <functional>
#include <string>
#include <vector>

namespace actortrain::dataset {

/// A dataset of exactly one element (tf.data's from_tensors). The element is copied into
/// the dataset and yielded as is, whatever its number of rows.
dataset from_tensors(element e);

/// A dataset whose element i is row i of every feature matrix and of `labels` (tf.data's
/// from_tensor_slices). Pass an empty `labels` matrix (0 x 0) for data without labels.
/// Throws std::invalid_argument naming the shapes when the row counts disagree, or when
/// there are neither features nor labels. The matrices are moved into the dataset and
/// shared by all its copies.
dataset from_tensor_slices(std::vector<matrix> features, matrix labels = matrix());

/// As above for a whole element: element i is row i of every matrix of `all`, its
/// inputs given as 64-bit ids (element::ids, all.ids[k] with features[k] of 0 columns)
/// included. Throws std::invalid_argument as above, and when an input is given both as
/// ids and as floats.
dataset from_tensor_slices(element all);

/// A dataset of `count` elements whose element i is fn(i), made when it is read: data
/// too large to hold, drawn from a seed (e.g. 20M examples of 64-bit ids). Random
/// access, so shard, skip and shuffle cost nothing per skipped element. `fn` must depend
/// on i alone (every epoch, shard and re-read gets the same element) and may be called
/// from several threads at once (prefetch). Throws std::invalid_argument for count < 0
/// or an empty `fn`; what fn throws surfaces where the element is read, and so does an
/// element whose matrices disagree on their rows (std::invalid_argument naming it).
dataset generate(int64_t count, std::function<element(uint64_t index)> fn, std::string name = "fn");

/// Builds one dataset per file with `reader`.
using file_reader_fn = std::function<dataset(const std::string& path)>;

/// The concatenation of reader(files[0]), reader(files[1]), ... . Remembered as a
/// file-based source, so auto_shard's FILE policy can give each input pipeline its own
/// files. Files are read lazily, once each, on first use (iteration or cardinality()) and
/// then kept in memory for the life of the dataset's nodes; a failing reader's exception
/// surfaces there. `reader` may be called concurrently for different files. Throws
/// std::invalid_argument if `files` is empty or `reader` is empty.
dataset from_files(std::vector<std::string> files, file_reader_fn reader);

}  // namespace actortrain::dataset
