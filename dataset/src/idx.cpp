// IDX files: header checks, length checks before allocation, big-endian conversion.

#include "file_bytes.hpp"
#include "node.hpp"

#include <actortrain/dataset/error.hpp>
#include <actortrain/dataset/idx.hpp>

#include <fmt/format.h>

#include <cstring>
#include <limits>

namespace actortrain::dataset {
namespace {

struct idx_type {
  unsigned char code;
  const char* name;
  size_t size;
};

constexpr idx_type idx_types[] = {
    {0x08, "ubyte", 1}, {0x09, "byte", 1},  {0x0B, "int16", 2},
    {0x0C, "int32", 4}, {0x0D, "float32", 4}, {0x0E, "float64", 8},
};

uint64_t big_endian(const unsigned char* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v = (v << 8) | p[i];
  return v;
}

float decode(const unsigned char* p, unsigned char code) {
  switch (code) {
    case 0x08:
      return static_cast<float>(p[0]);
    case 0x09:
      return static_cast<float>(static_cast<int8_t>(p[0]));
    case 0x0B:
      return static_cast<float>(static_cast<int16_t>(big_endian(p, 2)));
    case 0x0C:
      return static_cast<float>(static_cast<int32_t>(big_endian(p, 4)));
    case 0x0D: {
      const auto bits = static_cast<uint32_t>(big_endian(p, 4));
      float f;
      std::memcpy(&f, &bits, sizeof f);
      return f;
    }
    default: {
      const uint64_t bits = big_endian(p, 8);
      double d;
      std::memcpy(&d, &bits, sizeof d);
      return static_cast<float>(d);
    }
  }
}

}  // namespace

idx_array read_idx(const std::string& path) {
  auto bytes = detail::read_file_bytes(path);
  const bool gz = detail::is_gzip(bytes);
  bool truncated_gzip = false;
  if (gz) {
    auto r = detail::gunzip(bytes, path);
    bytes = std::move(r.bytes);
    truncated_gzip = r.truncated;
  }
  const char* what = gz ? " after gunzip" : "";
  const std::string gz_note = truncated_gzip ? "; the gzip stream is truncated" : "";
  if (bytes.size() < 4)
    throw file_error(path, fmt::format("truncated: {} bytes{}, too short for an IDX header{}",
                                       bytes.size(), what, gz_note));
  if (bytes[0] != 0 || bytes[1] != 0)
    throw file_error(path, fmt::format("not an IDX file: magic bytes are {:02x} {:02x} {:02x} "
                                       "{:02x}, expected 00 00 <type> <dimensions>",
                                       bytes[0], bytes[1], bytes[2], bytes[3]));
  const idx_type* type = nullptr;
  for (const auto& t : idx_types)
    if (t.code == bytes[2]) type = &t;
  if (!type)
    throw file_error(path, fmt::format("unsupported IDX element type 0x{:02x} (supported: 08 "
                                       "ubyte, 09 byte, 0B int16, 0C int32, 0D float32, 0E "
                                       "float64)",
                                       bytes[2]));
  const size_t ndims = bytes[3];
  if (ndims == 0) throw file_error(path, "IDX file with 0 dimensions");
  const size_t header = 4 + 4 * ndims;
  if (bytes.size() < header)
    throw file_error(path, fmt::format("truncated: expected a {}-byte header for {} dimensions, "
                                       "found {} bytes{}{}",
                                       header, ndims, bytes.size(), what, gz_note));
  idx_array out;
  std::string dims_text;
  unsigned __int128 count = 1;
  for (size_t d = 0; d < ndims; ++d) {
    const auto dim = big_endian(bytes.data() + 4 + 4 * d, 4);
    out.dims.push_back(static_cast<int64_t>(dim));
    count *= dim;
    dims_text += fmt::format("{}{}", d == 0 ? "" : "x", dim);
    if (count > (static_cast<unsigned __int128>(1) << 56))
      throw file_error(path, fmt::format("IDX dimensions {}... describe more values than a file "
                                         "can hold (corrupt header)",
                                         dims_text));
  }
  const unsigned __int128 expected = header + count * type->size;
  if (expected != bytes.size()) {
    const bool shorter = bytes.size() < expected;
    throw file_error(
        path, fmt::format("{}: expected {} bytes{} (a {}-byte header and {} {} values of {} "
                          "byte(s) each), found {}{}",
                          shorter ? "truncated" : "trailing data", static_cast<uint64_t>(expected),
                          what, header, dims_text, type->name, type->size, bytes.size(), gz_note));
  }
  if (truncated_gzip)
    throw file_error(path, "truncated gzip stream (the end-of-stream marker and checksum are "
                           "missing although the IDX data is complete)");
  const auto rows = static_cast<Eigen::Index>(out.dims[0]);
  // With no rows the length says nothing of the columns: bound them before multiplying
  // (an overflow found by fuzzing).
  unsigned __int128 wide_cols = 1;
  for (size_t d = 1; d < ndims; ++d) {
    wide_cols *= static_cast<uint64_t>(out.dims[d]);
    if (wide_cols > static_cast<unsigned __int128>(std::numeric_limits<int32_t>::max()))
      throw file_error(path, fmt::format("dimensions {}: more values per element than this reader takes (at most {})",
                                         dims_text, std::numeric_limits<int32_t>::max()));
  }
  const auto cols = static_cast<Eigen::Index>(wide_cols);
  out.data.resize(rows, cols);
  const unsigned char* p = bytes.data() + header;
  float* dst = out.data.data();
  const auto n = static_cast<size_t>(count);
  if (type->code == 0x08) {
    for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(p[i]);
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = decode(p + i * type->size, type->code);
  }
  return out;
}

dataset from_idx(const std::string& images_path, const std::string& labels_path, float scale) {
  idx_array images = read_idx(images_path);
  if (scale != 1.0f) images.data *= scale;
  std::vector<matrix> features;
  features.push_back(std::move(images.data));
  matrix labels;
  std::string label = "idx(" + detail::base_name(images_path);
  if (!labels_path.empty()) {
    idx_array l = read_idx(labels_path);
    if (l.dims[0] != images.dims[0])
      throw file_error(labels_path, fmt::format("holds {} labels but {} holds {} images",
                                                l.dims[0], images_path, images.dims[0]));
    labels = std::move(l.data);
    label += ", " + detail::base_name(labels_path);
  }
  label += ")";
  if (labels.size() == 0) labels.resize(features[0].rows(), 0);
  element all;
  all.features = std::move(features);
  all.labels = std::move(labels);
  return dataset(detail::make_slices_node(std::move(all), std::move(label)));
}

}  // namespace actortrain::dataset
