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

/// An IDX file's values as stored, after every check read_idx makes.
struct raw_idx {
  std::vector<int64_t> dims;
  const idx_type* type = nullptr;
  detail::byte_buffer bytes;  // the whole (decompressed) file
  size_t header = 0;          // where the values start in bytes
  Eigen::Index rows = 0, cols = 0;

  const unsigned char* values() const { return bytes.data() + header; }
};

/// Decodes n values of type t at p into dst, each converted to float and then, unless
/// scale is 1, multiplied by it: read_idx's floats times the scale, bit for bit (a
/// single multiply, nothing to fuse it with). A plain loop for ubyte.
void decode_values(const unsigned char* __restrict p, size_t n, const idx_type& t, float scale,
                   float* __restrict dst) {
  if (t.code == 0x08 && scale == 1.0f) {
    for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(p[i]);
  } else if (t.code == 0x08) {
    for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(p[i]) * scale;
  } else if (scale == 1.0f) {
    for (size_t i = 0; i < n; ++i) dst[i] = decode(p + i * t.size, t.code);
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = decode(p + i * t.size, t.code) * scale;
  }
}

raw_idx read_raw(const std::string& path) {
  raw_idx out;
  auto& bytes = out.bytes;
  bytes = detail::read_file_bytes(path);
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
  for (const auto& t : idx_types)
    if (t.code == bytes[2]) out.type = &t;
  if (!out.type)
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
  const unsigned __int128 expected = header + count * out.type->size;
  if (expected != bytes.size()) {
    const bool shorter = bytes.size() < expected;
    throw file_error(
        path, fmt::format("{}: expected {} bytes{} (a {}-byte header and {} {} values of {} "
                          "byte(s) each), found {}{}",
                          shorter ? "truncated" : "trailing data", static_cast<uint64_t>(expected),
                          what, header, dims_text, out.type->name, out.type->size, bytes.size(), gz_note));
  }
  if (truncated_gzip)
    throw file_error(path, "truncated gzip stream (the end-of-stream marker and checksum are "
                           "missing although the IDX data is complete)");
  out.rows = static_cast<Eigen::Index>(out.dims[0]);
  // With no rows the length says nothing of the columns: bound them before multiplying
  // (an overflow found by fuzzing).
  unsigned __int128 wide_cols = 1;
  for (size_t d = 1; d < ndims; ++d) {
    wide_cols *= static_cast<uint64_t>(out.dims[d]);
    if (wide_cols > static_cast<unsigned __int128>(std::numeric_limits<int32_t>::max()))
      throw file_error(path, fmt::format("dimensions {}: more values per element than this reader takes (at most {})",
                                         dims_text, std::numeric_limits<int32_t>::max()));
  }
  out.cols = static_cast<Eigen::Index>(wide_cols);
  out.header = header;
  return out;
}

// from_idx's images: the values as stored (a byte per ubyte pixel, a quarter of their
// size as floats), decoded and scaled in one pass, row by row, as batches gather them. A process reading
// Fashion-MNIST's 60,000 training images holds 47 MB instead of 188 MB and never converts
// the rows it does not read: a restarted worker is training sooner.
class idx_node final : public detail::node {
 public:
  idx_node(raw_idx images, float scale, matrix labels, std::string label)
      : images_(std::move(images)), scale_(scale), labels_(std::move(labels)), label_(std::move(label)) {}

  detail::node_kind kind() const override { return detail::node_kind::source; }
  cardinality_info cardinality() const override { return cardinality_info::known(images_.rows); }
  std::string label() const override { return label_; }
  std::unique_ptr<detail::accessor> access(uint64_t) const override { return std::make_unique<rows>(*this); }

 private:
  class rows final : public detail::accessor {
   public:
    explicit rows(const idx_node& n) : node_(n) {}
    uint64_t size() const override { return static_cast<uint64_t>(node_.images_.rows); }
    element get(uint64_t i) override {
      element e;
      gather({i}, e);
      return e;
    }
    void gather(const std::vector<uint64_t>& positions, element& out) override {
      const auto& im = node_.images_;
      for (uint64_t p : positions)
        if (p >= size())
          throw std::out_of_range(fmt::format("{}: position {} out of range (size {})", node_.label_, p, size()));
      const auto n = static_cast<Eigen::Index>(positions.size());
      out.features.resize(1);
      out.ids.clear();
      out.features[0].resize(n, im.cols);
      out.labels.resize(n, node_.labels_.cols());
      const auto row_bytes = static_cast<size_t>(im.cols) * im.type->size;
      for (Eigen::Index j = 0; j < n; ++j) {
        const auto from = static_cast<Eigen::Index>(positions[static_cast<size_t>(j)]);
        decode_values(im.values() + static_cast<size_t>(from) * row_bytes, static_cast<size_t>(im.cols), *im.type,
                      node_.scale_, out.features[0].row(j).data());
        if (node_.labels_.cols() > 0) out.labels.row(j) = node_.labels_.row(from);
      }
    }

   private:
    const idx_node& node_;
  };

  raw_idx images_;
  float scale_;
  matrix labels_;
  std::string label_;
};

}  // namespace

idx_array read_idx(const std::string& path) {
  auto raw = read_raw(path);
  idx_array out;
  out.dims = raw.dims;
  out.data.resize(raw.rows, raw.cols);
  decode_values(raw.values(), static_cast<size_t>(raw.rows) * static_cast<size_t>(raw.cols), *raw.type, 1.0f,
                out.data.data());
  return out;
}

dataset from_idx(const std::string& images_path, const std::string& labels_path, float scale) {
  raw_idx images = read_raw(images_path);
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
  if (labels.size() == 0) labels.resize(images.rows, 0);
  return dataset(std::make_shared<idx_node>(std::move(images), scale, std::move(labels), std::move(label)));
}

}  // namespace actortrain::dataset
