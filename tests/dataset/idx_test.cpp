#include "test_util.hpp"

#include "../../dataset/src/file_bytes.hpp"

#include <boost/test/unit_test.hpp>

#include <cstring>
#include <functional>

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

/// An IDX file of `code` values `width` bytes wide with the given dimensions; value i is
/// raw(i), written big-endian.
std::vector<unsigned char> idx_of(unsigned char code, size_t width, const std::vector<uint32_t>& dims,
                                  const std::function<uint64_t(size_t)>& raw) {
  std::vector<unsigned char> out = {0, 0, code, static_cast<unsigned char>(dims.size())};
  size_t n = 1;
  for (auto d : dims) {
    put_be32(out, d);
    n *= d;
  }
  for (size_t i = 0; i < n; ++i)
    for (size_t b = width; b-- > 0;) out.push_back(static_cast<unsigned char>(raw(i) >> (8 * b)));
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

// from_idx keeps the values as stored and decodes the rows a batch gathers: they must be
// the file's values as floats times the scale, bit for bit (worked out here, and what
// read_idx gives), for every element type, in any order.
BOOST_AUTO_TEST_CASE(from_idx_rows_are_read_idx_values_times_scale_for_every_type) {
  temp_dir dir;
  auto float_bits = [](float f) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return uint64_t{b};
  };
  auto double_bits = [](double d) {
    uint64_t b;
    std::memcpy(&b, &d, 8);
    return b;
  };
  const std::vector<uint32_t> dims = {7, 3, 5};
  // Each kind's file, and value i as a float worked out here, apart from the reader.
  struct kind {
    const char* name;
    std::vector<unsigned char> bytes;
    std::function<float(size_t)> value;
  };
  const std::vector<kind> kinds = {
      {"ubyte", idx_of(0x08, 1, dims, [](size_t i) { return (i * 37) % 256; }),
       [](size_t i) { return static_cast<float>((i * 37) % 256); }},
      {"byte", idx_of(0x09, 1, dims, [](size_t i) { return (i * 53) % 256; }),
       [](size_t i) { return static_cast<float>(static_cast<int8_t>((i * 53) % 256)); }},
      {"int16", idx_of(0x0B, 2, dims, [](size_t i) { return static_cast<uint16_t>(i * 911 - 20000); }),
       [](size_t i) { return static_cast<float>(static_cast<int16_t>(static_cast<uint16_t>(i * 911 - 20000))); }},
      {"int32", idx_of(0x0C, 4, dims, [](size_t i) { return static_cast<uint32_t>(i * 104729 - 3000000); }),
       [](size_t i) { return static_cast<float>(static_cast<int32_t>(static_cast<uint32_t>(i * 104729 - 3000000))); }},
      {"float32", idx_of(0x0D, 4, dims, [&](size_t i) { return float_bits(0.37f * static_cast<float>(i) - 9.1f); }),
       [](size_t i) { return 0.37f * static_cast<float>(i) - 9.1f; }},
      {"float64", idx_of(0x0E, 8, dims, [&](size_t i) { return double_bits(1.0 / (static_cast<double>(i) + 0.3)); }),
       [](size_t i) { return static_cast<float>(1.0 / (static_cast<double>(i) + 0.3)); }},
  };
  // Row i's label is 10 + i: a row gathered out of order must bring its own.
  write_file(dir.file("labels"), idx_labels({10, 11, 12, 13, 14, 15, 16}));
  for (const auto& k : kinds) {
    BOOST_TEST_CONTEXT(k.name) {
      write_file(dir.file(k.name), gzip(k.bytes));
      for (float scale : {1.0f, 1.0f / 255.0f, 0.3f}) {
        // Every value times the scale, one float multiply each (what read_idx and a
        // scaling pass over its floats give).
        matrix expected(7, 15);
        for (Eigen::Index i = 0; i < expected.size(); ++i) {
          expected.data()[i] = k.value(static_cast<size_t>(i));
          if (scale != 1.0f) expected.data()[i] *= scale;
        }
        auto whole = read_idx(dir.file(k.name)).data;
        whole *= scale;
        BOOST_TEST(std::memcmp(whole.data(), expected.data(), sizeof(float) * 105) == 0);
        // Shuffled, so that a batch gathers rows out of order; element by element too.
        auto batches = collect(from_idx(dir.file(k.name), dir.file("labels"), scale).shuffle(7, 3).batch(3));
        auto one_by_one = collect(from_idx(dir.file(k.name), dir.file("labels"), scale));
        BOOST_REQUIRE_EQUAL(one_by_one.size(), 7u);
        std::vector<bool> seen(7, false);
        for (const auto& b : batches)
          for (Eigen::Index r = 0; r < b.rows(); ++r) {
            BOOST_REQUIRE_EQUAL(b.features.at(0).cols(), 15);
            // Which row is it? The one whose values match bit for bit (each row differs).
            int found = -1;
            for (Eigen::Index i = 0; i < 7; ++i)
              if (std::memcmp(b.features[0].row(r).data(), expected.row(i).data(), 15 * sizeof(float)) == 0)
                found = static_cast<int>(i);
            BOOST_REQUIRE_MESSAGE(found >= 0, "scale " << scale << ": a gathered row matches no expected row");
            BOOST_TEST(b.labels(r, 0) == static_cast<float>(10 + found));
            seen[static_cast<size_t>(found)] = true;
          }
        BOOST_TEST(std::count(seen.begin(), seen.end(), true) == 7);
        for (Eigen::Index i = 0; i < 7; ++i) {
          BOOST_TEST(std::memcmp(one_by_one[static_cast<size_t>(i)].features.at(0).data(), expected.row(i).data(),
                                 15 * sizeof(float)) == 0);
          BOOST_TEST(one_by_one[static_cast<size_t>(i)].labels(0, 0) == static_cast<float>(10 + i));
        }
      }
    }
  }
}

// The gzip trailer's length sizes the output once; when it is not the whole (several
// members) or lies, the data decides.
BOOST_AUTO_TEST_CASE(gzip_length_trailer_is_only_a_hint) {
  temp_dir dir;
  const auto bytes = idx_ubyte({400, 30, 30});
  const std::vector<unsigned char> head(bytes.begin(), bytes.begin() + 5000);
  const std::vector<unsigned char> tail(bytes.begin() + 5000, bytes.end());
  auto two = gzip(head);
  auto second = gzip(tail);  // its trailer tells 355,016 bytes of 360,016
  two.insert(two.end(), second.begin(), second.end());
  write_file(dir.file("two.gz"), two);
  auto a = read_idx(dir.file("two.gz"));
  BOOST_REQUIRE_EQUAL(a.data.size(), 360000);
  for (Eigen::Index i = 0; i < a.data.size(); ++i)
    if (a.data.data()[i] != static_cast<float>((i * 7) % 256)) BOOST_FAIL("value " << i << " differs");
  // The size hint: the trailer's length when honest, at most 1032 times the compressed
  // bytes when not, nothing without a trailer.
  const auto one = gzip(bytes);
  BOOST_TEST(actortrain::dataset::detail::gunzip_size_hint(one.data(), one.size()) == bytes.size());
  BOOST_TEST(actortrain::dataset::detail::gunzip_size_hint(second.data(), second.size()) == tail.size());
  BOOST_TEST(actortrain::dataset::detail::gunzip_size_hint(one.data(), 17) == 0u);
  // A trailer claiming 4 GiB: zlib's length check refuses it, the file is named, and the
  // output is sized by the compressed length, not by the claim.
  auto lying = gzip(bytes);
  for (size_t b = lying.size() - 4; b < lying.size(); ++b) lying[b] = 0xff;
  BOOST_TEST(actortrain::dataset::detail::gunzip_size_hint(lying.data(), lying.size()) == lying.size() * 1032);
  write_file(dir.file("lying.gz"), lying);
  auto msg = error_of([&] { read_idx(dir.file("lying.gz")); });
  BOOST_TEST(mentions(msg, dir.file("lying.gz") + ": corrupt gzip data"), msg);
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
