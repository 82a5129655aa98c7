// .npy files: header layout, round trip, the reader's errors, and numpy itself reading
// our files and writing files we read (when python3 with numpy is available).
#include <actortrain/model/checkpoint/npy.hpp>

#include "optim/temp_dir.hpp"

#include <boost/test/unit_test.hpp>

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

using namespace actortrain::model;
using actortrain::test::temp_dir;

namespace {

matrix sample(int64_t rows, int64_t cols) {
  matrix m(rows, cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) m(r, c) = 0.25f * static_cast<float>(r * cols + c) - 1.0f / 3.0f;
  return m;
}

std::string error_of(std::string_view bytes) {
  try {
    decode_npy(bytes, "test.npy");
  } catch (const checkpoint_error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

/// A python3 that has numpy ("" if none). Debian's numpy lives in /usr/bin/python3, which
/// a pyenv or venv python3 earlier in PATH may not see.
std::string python_with_numpy() {
  for (const char* py : {"python3", "/usr/bin/python3"}) {
    const std::string cmd = std::string(py) + " -c \"import numpy\" >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return py;
  }
  return "";
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(npy)

BOOST_AUTO_TEST_CASE(header_is_padded_to_64_bytes_and_ends_with_newline) {
  for (const shape2 s : {shape2{1, 1}, shape2{784, 300}, shape2{123456789, 7}}) {
    const std::string h = npy_header(s);
    BOOST_TEST(h.size() % 64 == 0u);
    BOOST_TEST(h.back() == '\n');
    BOOST_TEST(h.substr(0, 6) == "\x93NUMPY");
    BOOST_TEST(h[6] == '\x01');
    BOOST_TEST(h[7] == '\x00');
    const size_t len = static_cast<unsigned char>(h[8]) | (static_cast<unsigned char>(h[9]) << 8);
    BOOST_TEST(len + 10 == h.size());
    BOOST_TEST(contains(h, fmt::format("'shape': ({}, {}), }}", s.rows, s.cols)));
    BOOST_TEST(contains(h, "{'descr': '<f4', 'fortran_order': False, "));
  }
}

BOOST_AUTO_TEST_CASE(round_trips_through_the_file_system) {
  temp_dir dir;
  const matrix m = sample(3, 4);
  write_npy(posix_file_system(), dir / "a.npy", m);
  const matrix back = read_npy(posix_file_system(), dir / "a.npy");
  BOOST_TEST(back.rows() == 3);
  BOOST_TEST(back.cols() == 4);
  BOOST_TEST((back == m));
  const std::string bytes = encode_npy(m);
  BOOST_TEST(bytes.size() == 128u + 48u);  // numpy also needs 128 header bytes here
}

BOOST_AUTO_TEST_CASE(rejects_bad_magic) {
  std::string bytes = encode_npy(sample(2, 2));
  bytes[1] = 'X';
  const auto e = error_of(bytes);
  BOOST_TEST(contains(e, "test.npy"));
  BOOST_TEST(contains(e, "magic"));
  BOOST_TEST(contains(error_of("short"), "magic"));
}

BOOST_AUTO_TEST_CASE(rejects_truncated_data_and_header) {
  const std::string bytes = encode_npy(sample(2, 3));
  const auto e = error_of(std::string_view(bytes).substr(0, bytes.size() - 1));
  BOOST_TEST(contains(e, "truncated"));
  BOOST_TEST(contains(e, "(2, 3)"));
  BOOST_TEST(contains(error_of(std::string_view(bytes).substr(0, 40)), "truncated"));
  BOOST_TEST(contains(error_of(bytes + "x"), "trailing"));
}

BOOST_AUTO_TEST_CASE(rejects_wrong_dtype_order_shape_and_version) {
  auto with = [](const std::string& from, const std::string& to) {
    std::string bytes = encode_npy(sample(2, 2));
    bytes.replace(bytes.find(from), from.size(), to);
    return bytes;
  };
  const auto dtype = error_of(with("'<f4'", "'<f8'"));
  BOOST_TEST(contains(dtype, "'<f8'"));
  BOOST_TEST(contains(dtype, "not supported"));
  BOOST_TEST(contains(error_of(with("False", "True ")), "fortran_order"));
  BOOST_TEST(contains(error_of(with("(2, 2)", "(4,)  ")), "two-dimensional"));
  BOOST_TEST(contains(error_of(with("'descr'", "'dtype'")), "'dtype'"));
  BOOST_TEST(contains(error_of(with("'shape': (2, 2)", "'shape': [2, 2]")), "header"));
  std::string v3 = encode_npy(sample(2, 2));
  v3[6] = '\x03';
  BOOST_TEST(contains(error_of(v3), "version 3.0"));
}

BOOST_AUTO_TEST_CASE(read_of_a_missing_file_names_it) {
  temp_dir dir;
  try {
    read_npy(posix_file_system(), dir / "missing.npy");
    BOOST_FAIL("no throw");
  } catch (const checkpoint_error& e) {
    BOOST_TEST(contains(e.what(), "missing.npy"));
  }
}

BOOST_AUTO_TEST_CASE(numpy_reads_our_files_and_we_read_numpys) {
  const std::string py = python_with_numpy();
  if (py.empty()) {
    BOOST_TEST_MESSAGE("numpy is absent (no python3 with numpy): skipping the numpy checks");
    return;
  }
  temp_dir dir;
  const matrix m = sample(5, 3);
  write_npy(posix_file_system(), dir / "ours.npy", m);
  {
    std::ofstream script(dir / "check.py");
    script << "import sys, numpy as np\n"
              "a = np.load(sys.argv[1])\n"
              "with open(sys.argv[2], 'w') as out:\n"
              "    out.write('%s %s %d %d\\n' % (a.dtype.str, a.flags['C_CONTIGUOUS'], a.shape[0], a.shape[1]))\n"
              "    out.write(' '.join(repr(float(x)) for x in a.ravel()) + '\\n')\n"
              "b = (np.arange(12, dtype=np.float32).reshape(4, 3) / 7).astype(np.float32)\n"
              "np.save(sys.argv[3], b)\n";
  }
  const std::string cmd = py + " " + dir / "check.py" + " " + dir / "ours.npy" + " " +
                          dir / "result.txt" + " " + dir / "theirs.npy";
  BOOST_TEST_REQUIRE(std::system(cmd.c_str()) == 0);
  std::istringstream result(slurp(dir / "result.txt"));
  std::string dtype, contiguous;
  int64_t rows = 0, cols = 0;
  result >> dtype >> contiguous >> rows >> cols;
  BOOST_TEST(dtype == "<f4");
  BOOST_TEST(contiguous == "True");
  BOOST_TEST(rows == 5);
  BOOST_TEST(cols == 3);
  for (int64_t i = 0; i < rows * cols; ++i) {
    double v = 0;
    result >> v;
    BOOST_TEST(static_cast<float>(v) == m.data()[i]);  // exact: float -> repr -> float
  }
  const matrix theirs = read_npy(posix_file_system(), dir / "theirs.npy");
  BOOST_TEST(theirs.rows() == 4);
  BOOST_TEST(theirs.cols() == 3);
  for (int64_t i = 0; i < 12; ++i)
    BOOST_TEST(theirs.data()[i] == static_cast<float>(i) / 7.0f, boost::test_tools::tolerance(1e-6f));
}

BOOST_AUTO_TEST_SUITE_END()
