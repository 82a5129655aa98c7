#include "test_util.hpp"

#include <boost/test/unit_test.hpp>

#include <cstring>

using namespace actortrain::dataset;
using namespace actortrain::dataset::test;

namespace {

void put_be32(std::vector<unsigned char>& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<unsigned char>(v >> shift));
}

/// An IDX file of ubytes with the given dimensions; value i is (i * 7) % 256.
std::vector<unsigned char> idx_ubyte(const std::vector<uint32_t>& dims) {
  std::vector<unsigned char> out = {0, 0, 0x08, static_cast<unsigned char>(dims.size())};
  size_t n = 1;
  for (auto d : dims) {
    put_be32(out, d);
    n *= d;
  }
  for (size_t i = 0; i < n; ++i) out.push_back(static_cast<unsigned char>((i * 7) % 256));
  return out;
}

/// A 1-D IDX file of ubyte labels.
std::vector<unsigned char> idx_labels(const std::vector<unsigned char>& labels) {
  std::vector<unsigned char> out = {0, 0, 0x08, 1};
  put_be32(out, static_cast<uint32_t>(labels.size()));
  out.insert(out.end(), labels.begin(), labels.end());
  return out;
}

bool mentions(const std::string& msg, const std::string& part) {
  return msg.find(part) != std::string::npos;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(idx)

BOOST_AUTO_TEST_CASE(raw_and_gzipped_files_round_trip) {
  temp_dir dir;
  const auto bytes = idx_ubyte({5, 3, 4});
  write_file(dir.file("raw.idx"), bytes);
  write_file(dir.file("packed.idx.gz"), gzip(bytes));
  for (const auto* name : {"raw.idx", "packed.idx.gz"}) {
    auto a = read_idx(dir.file(name));
    BOOST_TEST(a.dims == (std::vector<int64_t>{5, 3, 4}));
    BOOST_REQUIRE_EQUAL(a.data.rows(), 5);
    BOOST_REQUIRE_EQUAL(a.data.cols(), 12);
    for (Eigen::Index i = 0; i < 60; ++i)
      BOOST_TEST(a.data.data()[i] == static_cast<float>((i * 7) % 256));
  }
}

BOOST_AUTO_TEST_CASE(float32_big_endian_values_are_read) {
  temp_dir dir;
  std::vector<unsigned char> bytes = {0, 0, 0x0D, 2};
  put_be32(bytes, 1);
  put_be32(bytes, 2);
  for (float f : {1.5f, -2.25f}) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    put_be32(bytes, bits);
  }
  write_file(dir.file("f.idx"), bytes);
  auto a = read_idx(dir.file("f.idx"));
  BOOST_TEST(a.data(0, 0) == 1.5f);
  BOOST_TEST(a.data(0, 1) == -2.25f);
}

BOOST_AUTO_TEST_CASE(from_idx_scales_images_and_pairs_labels) {
  temp_dir dir;
  write_file(dir.file("images.gz"), gzip(idx_ubyte({4, 2, 2})));
  write_file(dir.file("labels"), idx_labels({3, 1, 4, 1}));
  auto d = from_idx(dir.file("images.gz"), dir.file("labels"), 0.5f);
  BOOST_TEST(d.cardinality() == cardinality_info::known(4));
  BOOST_TEST(d.describe() == "idx(images.gz, labels)");
  auto all = collect(d.batch(4));
  BOOST_REQUIRE_EQUAL(all.size(), 1u);
  BOOST_TEST(all[0].features[0].cols() == 4);
  BOOST_TEST(all[0].features[0](1, 0) == 0.5f * 28.0f);  // value 4 = (4 * 7) % 256 = 28
  BOOST_TEST(all[0].labels(2, 0) == 4.0f);
  auto unlabeled = collect(from_idx(dir.file("images.gz"), ""));
  BOOST_TEST(unlabeled.size() == 4u);
  BOOST_TEST(unlabeled[0].labels.cols() == 0);
}

BOOST_AUTO_TEST_CASE(truncated_file_names_expected_and_actual_bytes) {
  temp_dir dir;
  auto bytes = idx_ubyte({10, 2, 2});  // 16 + 40 = 56 bytes
  bytes.resize(50);
  write_file(dir.file("short.idx"), bytes);
  auto msg = error_of([&] { read_idx(dir.file("short.idx")); });
  BOOST_TEST(mentions(msg, dir.file("short.idx") + ": truncated"), msg);
  BOOST_TEST(mentions(msg, "expected 56 bytes"), msg);
  BOOST_TEST(mentions(msg, "found 50"), msg);
  BOOST_CHECK_THROW(read_idx(dir.file("short.idx")), file_error);
  // Trailing bytes are an error too.
  bytes = idx_ubyte({10, 2, 2});
  bytes.push_back(0);
  write_file(dir.file("long.idx"), bytes);
  msg = error_of([&] { read_idx(dir.file("long.idx")); });
  BOOST_TEST(mentions(msg, "trailing data: expected 56 bytes"), msg);
}

BOOST_AUTO_TEST_CASE(truncated_gzip_stream_is_an_error) {
  temp_dir dir;
  auto packed = gzip(idx_ubyte({50, 8, 8}));
  packed.resize(packed.size() / 2);
  write_file(dir.file("cut.gz"), packed);
  auto msg = error_of([&] { read_idx(dir.file("cut.gz")); });
  BOOST_TEST(mentions(msg, dir.file("cut.gz")), msg);
  BOOST_TEST(mentions(msg, "truncated"), msg);
  BOOST_TEST(mentions(msg, "expected 3216 bytes"), msg);
  // Only the gzip trailer missing: the data is complete but the file is still cut.
  packed = gzip(idx_ubyte({50, 8, 8}));
  packed.resize(packed.size() - 4);
  write_file(dir.file("no_trailer.gz"), packed);
  msg = error_of([&] { read_idx(dir.file("no_trailer.gz")); });
  BOOST_TEST(mentions(msg, "truncated gzip stream"), msg);
}

BOOST_AUTO_TEST_CASE(corrupt_gzip_is_an_error) {
  temp_dir dir;
  auto packed = gzip(idx_ubyte({50, 8, 8}));
  for (size_t i = 12; i < 40 && i < packed.size(); ++i) packed[i] ^= 0x5a;
  write_file(dir.file("bad.gz"), packed);
  auto msg = error_of([&] { read_idx(dir.file("bad.gz")); });
  BOOST_TEST(mentions(msg, dir.file("bad.gz") + ": "), msg);
  BOOST_TEST((mentions(msg, "corrupt gzip") || mentions(msg, "truncated")), msg);
  BOOST_CHECK_THROW(read_idx(dir.file("bad.gz")), file_error);
}

BOOST_AUTO_TEST_CASE(wrong_magic_is_an_error) {
  temp_dir dir;
  auto bytes = idx_ubyte({2, 2});
  bytes[0] = 0x50;
  bytes[1] = 0x4b;
  write_file(dir.file("zip.idx"), bytes);
  auto msg = error_of([&] { read_idx(dir.file("zip.idx")); });
  BOOST_TEST(mentions(msg, dir.file("zip.idx") + ": not an IDX file: magic bytes are 50 4b"), msg);
  bytes = idx_ubyte({2, 2});
  bytes[2] = 0x07;
  write_file(dir.file("type.idx"), bytes);
  msg = error_of([&] { read_idx(dir.file("type.idx")); });
  BOOST_TEST(mentions(msg, "unsupported IDX element type 0x07"), msg);
}

BOOST_AUTO_TEST_CASE(label_count_must_match_image_count) {
  temp_dir dir;
  write_file(dir.file("images"), idx_ubyte({4, 2, 2}));
  write_file(dir.file("labels"), idx_labels({1, 2, 3}));
  auto msg = error_of([&] { from_idx(dir.file("images"), dir.file("labels")); });
  BOOST_TEST(mentions(msg, dir.file("labels") + ": holds 3 labels but " + dir.file("images") +
                               " holds 4 images"),
             msg);
}

BOOST_AUTO_TEST_CASE(missing_file_is_an_error_naming_it) {
  auto msg = error_of([] { read_idx("/nonexistent/dir/train.idx"); });
  BOOST_TEST(mentions(msg, "/nonexistent/dir/train.idx: cannot open"), msg);
}

BOOST_AUTO_TEST_SUITE_END()

// Found by tools/fuzz (idx): with no rows, the length says nothing of the columns, and
// their product overflowed (4 dimensions 0 x 2^33+... ).
BOOST_AUTO_TEST_CASE(absurd_columns_with_no_rows_are_refused) {
  temp_dir dir;
  std::vector<unsigned char> bytes = {0, 0, 8, 4, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 2};
  write_file(dir.file("wide.idx"), bytes);
  auto msg = error_of([&] { read_idx(dir.file("wide.idx")); });
  BOOST_TEST(mentions(msg, "more values per element than this reader takes"), msg);
}
