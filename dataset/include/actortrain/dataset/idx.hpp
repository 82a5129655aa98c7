#pragma once
// IDX files (the MNIST / Fashion-MNIST format), raw or gzipped.
//
// Layout: magic 0x00 0x00 <type> <ndims>, then ndims big-endian uint32 dimensions, then
// the values, big-endian, row-major. Types: 0x08 uint8, 0x09 int8, 0x0B int16,
// 0x0C int32, 0x0D float32, 0x0E float64. A file starting with 1f 8b is gunzipped first.

#include <actortrain/dataset/dataset.hpp>
#include <actortrain/dataset/element.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace actortrain::dataset {

/// The contents of one IDX file.
struct idx_array {
  /// The dimensions as stored, e.g. {60000, 28, 28}.
  std::vector<int64_t> dims;
  /// dims[0] rows of product(dims[1..]) columns (1 column for a 1-D file), converted to
  /// float without scaling.
  matrix data;
};

/// Reads an IDX file. Throws file_error naming the file when it cannot be read, is not
/// IDX (wrong magic, unknown type), is corrupt gzip, or its length disagrees with its
/// dimensions (truncated or with trailing bytes; the message gives expected and actual
/// byte counts). The declared dimensions are checked against the file's (decompressed)
/// length before the matrix is allocated.
idx_array read_idx(const std::string& path);

/// Images and labels, e.g. Fashion-MNIST's train-images-idx3-ubyte.gz and
/// train-labels-idx1-ubyte.gz: element i is image i flattened to one row with every pixel
/// multiplied by `scale` (1 / 255.f gives [0, 1]), and its label as one float column.
/// `labels_path` may be empty for unlabeled data. Reads both files now; throws what
/// read_idx throws, and file_error when the label and image counts differ. The images
/// stay in memory as stored (a byte per ubyte pixel) and each row is converted when a
/// batch reads it, to the floats read_idx would give times `scale`, bit for bit.
dataset from_idx(const std::string& images_path, const std::string& labels_path,
                 float scale = 1.0f);

}  // namespace actortrain::dataset
