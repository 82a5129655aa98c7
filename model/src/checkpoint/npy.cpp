#include <actortrain/model/checkpoint/npy.hpp>

#include "../optim/join.hpp"

#include <cctype>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include <fmt/format.h>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              ".npy '<f4' data is written by memcpy: a big-endian host needs a byte swap");

namespace actortrain::model {

namespace {

constexpr std::string_view magic = "\x93NUMPY";
constexpr size_t array_align = 64;

[[noreturn]] void fail(const std::string& name, const std::string& problem) {
  throw checkpoint_error(fmt::format("{}: {}", name, problem));
}

/// A parser for the Python literal dict of a .npy header: strings, True/False, tuples of
/// non-negative integers. Nothing else appears in a valid header.
class header_parser {
 public:
  header_parser(std::string_view text, const std::string& name) : text_(text), name_(name) {}

  struct value {
    enum kind_t { string, boolean, tuple } kind;
    std::string str;
    bool flag = false;
    std::vector<int64_t> ints;
  };

  std::vector<std::pair<std::string, value>> dict() {
    std::vector<std::pair<std::string, value>> out;
    expect('{');
    for (;;) {
      skip();
      if (peek() == '}') {
        ++pos_;
        break;
      }
      std::string key = string_literal();
      expect(':');
      value v = parse_value();
      for (const auto& [k, ignored] : out)
        if (k == key) bad(fmt::format("key '{}' appears twice", key));
      out.emplace_back(std::move(key), std::move(v));
      skip();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != '}') bad(fmt::format("expected ',' or '}}' at header offset {}", pos_));
    }
    skip();
    if (pos_ != text_.size()) bad(fmt::format("unexpected text after the dict at header offset {}", pos_));
    return out;
  }

 private:
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }

  void skip() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }

  void expect(char c) {
    skip();
    if (peek() != c) bad(fmt::format("expected '{}' at header offset {}", c, pos_));
    ++pos_;
  }

  [[noreturn]] void bad(const std::string& what) const {
    fail(name_, fmt::format("malformed header ({}): {}", what, std::string(text_)));
  }

  std::string string_literal() {
    skip();
    const char quote = peek();
    if (quote != '\'' && quote != '"') bad(fmt::format("expected a quoted key at header offset {}", pos_));
    const size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string_view::npos) bad("unterminated string");
    std::string s(text_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return s;
  }

  int64_t integer() {
    skip();
    const size_t begin = pos_;
    int64_t v = 0;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      const int d = text_[pos_] - '0';
      if (v > (std::numeric_limits<int64_t>::max() - d) / 10) bad("dimension too large");
      v = v * 10 + d;
      ++pos_;
    }
    if (pos_ == begin) bad(fmt::format("expected a non-negative integer at header offset {}", pos_));
    if (peek() == 'L') ++pos_;  // Python 2's long suffix
    return v;
  }

  value parse_value() {
    skip();
    value v{};
    const char c = peek();
    if (c == '\'' || c == '"') {
      v.kind = value::string;
      v.str = string_literal();
    } else if (text_.substr(pos_, 4) == "True") {
      v.kind = value::boolean;
      v.flag = true;
      pos_ += 4;
    } else if (text_.substr(pos_, 5) == "False") {
      v.kind = value::boolean;
      pos_ += 5;
    } else if (c == '(') {
      v.kind = value::tuple;
      ++pos_;
      for (;;) {
        skip();
        if (peek() == ')') {
          ++pos_;
          break;
        }
        v.ints.push_back(integer());
        skip();
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        if (peek() != ')') bad(fmt::format("expected ',' or ')' in the shape at header offset {}", pos_));
      }
    } else {
      bad(fmt::format("unexpected value at header offset {}", pos_));
    }
    return v;
  }

  std::string_view text_;
  const std::string& name_;
  size_t pos_ = 0;
};

std::string shape_tuple(const std::vector<int64_t>& dims) {
  if (dims.size() == 1) return fmt::format("({},)", dims[0]);
  return fmt::format("({})", detail::join(dims));
}

}  // namespace

namespace {

// numpy's header for a C-order array of `descr` and `shape`, padded as numpy pads it.
std::string header_for(const char* descr, int64_t rows, int64_t cols) {
  // numpy writes the keys sorted, each as "'key': repr(value), ".
  std::string dict =
    fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}, {}), }}", descr, rows, cols);
  const size_t unpadded = magic.size() + 2 + 2 + dict.size() + 1;  // + '\n'
  const size_t pad = (array_align - unpadded % array_align) % array_align;
  dict.append(pad, ' ');
  dict.push_back('\n');
  std::string out;
  out.reserve(unpadded + pad);
  out.append(magic);
  out.push_back('\x01');
  out.push_back('\x00');
  const auto len = static_cast<uint16_t>(dict.size());
  out.push_back(static_cast<char>(len & 0xFF));
  out.push_back(static_cast<char>(len >> 8));
  out += dict;
  return out;
}

}  // namespace

std::string npy_header(const shape2& shape) { return header_for("<f4", shape.rows, shape.cols); }

std::string npy_ids_header(int64_t rows, int64_t cols) { return header_for("<i8", rows, cols); }

std::string encode_npy(const float* data, const shape2& shape) {
  std::string out = npy_header(shape);
  const size_t header = out.size();
  const size_t bytes = static_cast<size_t>(shape.size()) * sizeof(float);
  out.resize(header + bytes);
  if (bytes > 0) std::memcpy(out.data() + header, data, bytes);
  return out;
}

std::string encode_npy(const matrix& m) {
  return encode_npy(m.data(), shape2{m.rows(), m.cols()});
}

namespace {

// The data of a C-order 2-d .npy of `descr` (elements of `size` bytes): where it starts,
// and the shape. Throws checkpoint_error naming `name`.
std::string_view npy_data(std::string_view bytes, const std::string& name, const char* descr_want, size_t size,
                          int64_t& rows, int64_t& cols) {
  if (bytes.size() < magic.size() + 2 || bytes.substr(0, magic.size()) != magic)
    fail(name, "not a .npy file (bad magic: expected \"\\x93NUMPY\")");
  const auto major = static_cast<unsigned char>(bytes[6]);
  const auto minor = static_cast<unsigned char>(bytes[7]);
  size_t prefix = 0;
  size_t header_len = 0;
  auto byte = [&](size_t i) { return static_cast<size_t>(static_cast<unsigned char>(bytes[i])); };
  if (major == 1 && minor == 0) {
    prefix = 10;
    if (bytes.size() < prefix) fail(name, "truncated: file ends inside the header length");
    header_len = byte(8) | (byte(9) << 8);
  } else if (major == 2 && minor == 0) {
    prefix = 12;
    if (bytes.size() < prefix) fail(name, "truncated: file ends inside the header length");
    header_len = byte(8) | (byte(9) << 8) | (byte(10) << 16) | (byte(11) << 24);
  } else {
    fail(name, fmt::format("unsupported .npy format version {}.{} (expected 1.0 or 2.0)", major, minor));
  }
  if (bytes.size() - prefix < header_len)
    fail(name, fmt::format("truncated: header says {} bytes but the file has {} after the prefix",
                           header_len, bytes.size() - prefix));
  const std::string_view header = bytes.substr(prefix, header_len);

  header_parser parser(header, name);
  std::optional<std::string> descr;
  std::optional<bool> fortran_order;
  std::optional<std::vector<int64_t>> dims;
  for (auto& [key, v] : parser.dict()) {
    if (key == "descr") {
      if (v.kind != header_parser::value::string) fail(name, "header: descr is not a string");
      descr = v.str;
    } else if (key == "fortran_order") {
      if (v.kind != header_parser::value::boolean) fail(name, "header: fortran_order is not True/False");
      fortran_order = v.flag;
    } else if (key == "shape") {
      if (v.kind != header_parser::value::tuple) fail(name, "header: shape is not a tuple");
      dims = v.ints;
    } else {
      fail(name, fmt::format("header: unexpected key '{}' (expected descr, fortran_order, shape)", key));
    }
  }
  if (!descr) fail(name, "header: missing 'descr'");
  if (!fortran_order) fail(name, "header: missing 'fortran_order'");
  if (!dims) fail(name, "header: missing 'shape'");
  if (*descr != descr_want)
    fail(name, fmt::format("dtype '{}' is not supported (expected '{}', little-endian {})", *descr, descr_want,
                           size == 4 ? "float32" : "int64"));
  if (*fortran_order)
    fail(name, "fortran_order True is not supported (expected C order, row-major)");
  if (dims->size() != 2)
    fail(name, fmt::format("shape {} is not two-dimensional (expected (rows, cols))",
                           shape_tuple(*dims)));
  rows = (*dims)[0];
  cols = (*dims)[1];
  if (rows > 0 && cols > std::numeric_limits<int64_t>::max() / 8 / rows)
    fail(name, fmt::format("shape {} is too large", shape_tuple(*dims)));
  const auto want = static_cast<size_t>(rows * cols) * size;
  const size_t have = bytes.size() - prefix - header_len;
  if (have != want)
    fail(name, fmt::format("{}: data is {} bytes but shape {} of {} needs {}",
                           have < want ? "truncated" : "trailing bytes", have,
                           shape_tuple(*dims), size == 4 ? "float32" : "int64", want));
  return bytes.substr(prefix + header_len, want);
}

}  // namespace

matrix decode_npy(std::string_view bytes, const std::string& name) {
  int64_t rows = 0, cols = 0;
  auto data = npy_data(bytes, name, "<f4", sizeof(float), rows, cols);
  matrix m(rows, cols);
  if (!data.empty()) std::memcpy(m.data(), data.data(), data.size());
  return m;
}

std::vector<int64_t> decode_npy_ids(std::string_view bytes, const std::string& name, int64_t& cols) {
  int64_t rows = 0;
  auto data = npy_data(bytes, name, "<i8", sizeof(int64_t), rows, cols);
  std::vector<int64_t> out(static_cast<size_t>(rows * cols));
  if (!data.empty()) std::memcpy(out.data(), data.data(), data.size());
  return out;
}



void write_npy(file_system& fs, const std::string& path, const matrix& m) {
  const std::string header = npy_header(shape2{m.rows(), m.cols()});
  const std::string_view data(reinterpret_cast<const char*>(m.data()),
                              static_cast<size_t>(m.size()) * sizeof(float));
  if (auto st = fs.write_file(path, {header, data}); !st.ok()) throw checkpoint_error(st.message());
}

matrix read_npy(file_system& fs, const std::string& path) {
  std::string bytes;
  if (auto st = fs.read_file(path, bytes); !st.ok()) throw checkpoint_error(st.message());
  return decode_npy(bytes, path);
}

}  // namespace actortrain::model
