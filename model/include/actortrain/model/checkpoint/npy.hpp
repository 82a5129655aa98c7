#pragma once
// NumPy .npy files (format 1.0) for float32 matrices, so a checkpoint's arrays load with
// `numpy.load(path)` and numpy-made arrays load here.
//
// Written layout (numpy's own for this case):
//   "\x93NUMPY" 0x01 0x00 <uint16 LE header_len> "{'descr': '<f4', 'fortran_order': False,
//   'shape': (rows, cols), }" <spaces> "\n" <rows*cols float32 little-endian, row-major>
// padded with spaces so that the data starts at a multiple of 64 bytes (numpy's
// ARRAY_ALIGN: 10 + header_len is divisible by 64, and the header ends with '\n').
//
// The reader accepts format 1.0 and 2.0 (4-byte header length), requires a dict with
// exactly the keys descr, fortran_order and shape, descr '<f4', fortran_order False, a
// two-dimensional shape, and exactly rows*cols*4 data bytes. Every problem throws
// checkpoint_error naming the file and what is wrong.

#include <actortrain/model/checkpoint/checkpoint_error.hpp>
#include <actortrain/model/checkpoint/file_system.hpp>
#include <actortrain/model/tensor.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace actortrain::model {

/// The complete header (magic through '\n') for a C-order float32 array of `shape`; its
/// length is a multiple of 64. The data follows it directly.
std::string npy_header(const shape2& shape);

/// The whole file as bytes: npy_header(shape) followed by the data.
std::string encode_npy(const float* data, const shape2& shape);
std::string encode_npy(const matrix& m);

/// Decodes a whole .npy file. `name` (usually the path) only labels error messages.
/// Throws checkpoint_error.
matrix decode_npy(std::string_view bytes, const std::string& name);

/// A column of int64 ids as a (n, 1) '<i8' .npy file (a dynamic table's ids), and back:
/// decode_npy_ids requires '<i8', C order and a shape (n, cols); values are row-major.
/// Throws checkpoint_error as decode_npy.
std::string npy_ids_header(int64_t rows, int64_t cols);
std::vector<int64_t> decode_npy_ids(std::string_view bytes, const std::string& name, int64_t& cols);

/// Writes `m` to `path` through `fs` (not synced: call fs.sync_file for durability).
/// Throws checkpoint_error with the file system's message on failure.
void write_npy(file_system& fs, const std::string& path, const matrix& m);

/// Reads and decodes `path`. Throws checkpoint_error (missing file, I/O error, or any
/// format problem).
matrix read_npy(file_system& fs, const std::string& path);

}  // namespace actortrain::model
