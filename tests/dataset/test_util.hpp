#pragma once
// Helpers shared by the dataset tests: small numbered datasets, collecting a pass,
// temporary files.

#include <actortrain/dataset/all.hpp>

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace actortrain::dataset {

// Printing for Boost.Test messages.
inline std::ostream& operator<<(std::ostream& os, const cardinality_info& c) {
  return os << to_string(c);
}
inline std::ostream& operator<<(std::ostream& os, cardinality_kind k) {
  return os << (k == cardinality_kind::known ? "known" : to_string(cardinality_info{k, -1}));
}

}  // namespace actortrain::dataset

namespace actortrain::dataset::test {

/// n examples; example i has features [i, i + 0.5] and label [10 i].
inline dataset numbers(int64_t n) {
  matrix x(n, 2);
  matrix y(n, 1);
  for (int64_t i = 0; i < n; ++i) {
    x(i, 0) = static_cast<float>(i);
    x(i, 1) = static_cast<float>(i) + 0.5f;
    y(i, 0) = 10.0f * static_cast<float>(i);
  }
  return from_tensor_slices({x}, y);
}

/// Up to `limit` elements of epoch `epoch` from `start`.
inline std::vector<element> collect(const dataset& ds, uint64_t epoch = 0, uint64_t start = 0,
                                    size_t limit = std::numeric_limits<size_t>::max()) {
  std::vector<element> out;
  auto it = ds.iterate(epoch, start);
  while (out.size() < limit) {
    auto e = it->next();
    if (!e) break;
    out.push_back(std::move(*e));
  }
  return out;
}

/// Column 0 of features[0] of every row of every element, in order: the example numbers.
inline std::vector<float> ids(const std::vector<element>& elements) {
  std::vector<float> out;
  for (const auto& e : elements)
    for (Eigen::Index r = 0; r < e.features.at(0).rows(); ++r) out.push_back(e.features[0](r, 0));
  return out;
}

inline std::vector<float> ids(const dataset& ds, uint64_t epoch = 0, uint64_t start = 0,
                              size_t limit = std::numeric_limits<size_t>::max()) {
  return ids(collect(ds, epoch, start, limit));
}

/// Row counts of every element.
inline std::vector<int64_t> row_counts(const std::vector<element>& elements) {
  std::vector<int64_t> out;
  for (const auto& e : elements) out.push_back(e.rows());
  return out;
}

/// Exact equality of two elements (shapes and values).
inline bool same(const element& a, const element& b) {
  if (a.features.size() != b.features.size()) return false;
  for (size_t k = 0; k < a.features.size(); ++k)
    if (a.features[k].rows() != b.features[k].rows() ||
        a.features[k].cols() != b.features[k].cols() || a.features[k] != b.features[k])
      return false;
  for (size_t k = 0; k < std::max(a.ids.size(), b.ids.size()); ++k) {
    if (a.is_ids(k) != b.is_ids(k)) return false;
    if (a.is_ids(k) && (a.ids[k].rows() != b.ids[k].rows() || a.ids[k].cols() != b.ids[k].cols() || a.ids[k] != b.ids[k]))
      return false;
  }
  return a.labels.rows() == b.labels.rows() && a.labels.cols() == b.labels.cols() &&
         a.labels == b.labels;
}

inline bool same(const std::vector<element>& a, const std::vector<element>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!same(a[i], b[i])) return false;
  return true;
}

/// A fresh directory under the build tree (or /tmp), removed with its contents.
class temp_dir {
 public:
  temp_dir() {
    std::string base = std::filesystem::temp_directory_path().string();
#ifdef ACTORTRAIN_BINARY_DIR
    base = ACTORTRAIN_BINARY_DIR;
#endif
    std::string tmpl = base + "/dataset_test_XXXXXX";
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("cannot create a temporary directory");
    path_ = tmpl;
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;

  /// The path of `name` inside the directory.
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void write_file(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + path);
}

inline void write_file(const std::string& path, const std::string& text) {
  write_file(path, std::vector<unsigned char>(text.begin(), text.end()));
}

/// `bytes` as a gzip stream.
inline std::vector<unsigned char> gzip(const std::vector<unsigned char>& bytes) {
  z_stream zs{};
  if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8,
                   Z_DEFAULT_STRATEGY) != Z_OK)
    throw std::runtime_error("deflateInit2");
  std::vector<unsigned char> out(deflateBound(&zs, static_cast<uLong>(bytes.size())) + 64);
  zs.next_in = const_cast<Bytef*>(bytes.data());
  zs.avail_in = static_cast<uInt>(bytes.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  deflateEnd(&zs);
  if (rc != Z_STREAM_END) throw std::runtime_error("deflate");
  out.resize(zs.total_out);
  return out;
}

/// what() of the exception `f` throws, or "(no exception)".
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

}  // namespace actortrain::dataset::test
