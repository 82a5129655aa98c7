#include "node.hpp"

#include <actortrain/dataset/error.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace actortrain::dataset {

std::string to_string(const cardinality_info& c) {
  switch (c.kind) {
    case cardinality_kind::known:
      return std::to_string(c.n);
    case cardinality_kind::infinite:
      return "infinite";
    case cardinality_kind::unknown:
      break;
  }
  return "unknown";
}

file_error::file_error(std::string path, const std::string& message, int64_t line)
    : std::runtime_error(line > 0 ? fmt::format("{}:{}: {}", path, line, message)
                                  : fmt::format("{}: {}", path, message)),
      path_(std::move(path)),
      line_(line) {}

}  // namespace actortrain::dataset

namespace actortrain::dataset::detail {

void accessor::gather(const std::vector<uint64_t>& positions, element& out) {
  std::vector<element> parts;
  parts.reserve(positions.size());
  for (uint64_t p : positions) parts.push_back(get(p));
  stack_rows(parts, out);
}

std::unique_ptr<accessor> node::access(uint64_t) const { return nullptr; }

std::unique_ptr<iterator> node::iterate(uint64_t epoch, uint64_t start) const {
  if (auto a = access(epoch)) return make_accessor_iterator(std::move(a), start);
  return stream(epoch, start);
}

std::unique_ptr<iterator> node::stream(uint64_t, uint64_t) const {
  throw std::logic_error("dataset node '" + label() + "' offers neither access() nor stream()");
}

node_ptr node::rebuild(std::vector<node_ptr>) const {
  throw std::logic_error("dataset node '" + label() + "' cannot be rebuilt");
}

std::string node::describe() const {
  auto in = inputs();
  if (in.empty()) return label();
  if (in.size() == 1) return in[0]->describe() + " -> " + label();
  std::string s = label() + "(";
  for (size_t i = 0; i < in.size(); ++i) {
    if (i > 0) s += ", ";
    s += in[i]->describe();
  }
  return s + ")";
}

std::string shape_of(const matrix& m) { return fmt::format("[{} x {}]", m.rows(), m.cols()); }

std::string base_name(const std::string& path) {
  auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

void check_stackable(const element& first, const element& e) {
  if (e.features.size() != first.features.size())
    throw shape_error(fmt::format(
        "cannot batch elements with different numbers of feature matrices: {} in one element, "
        "{} in another",
        first.features.size(), e.features.size()));
  for (size_t k = 0; k < e.features.size(); ++k) {
    if (e.is_ids(k) != first.is_ids(k))
      throw shape_error(fmt::format(
          "cannot batch elements of different types: feature {} is {} in one element and {} in another", k,
          first.is_ids(k) ? "int64 ids" : "floats", e.is_ids(k) ? "int64 ids" : "floats"));
    const auto a = first.is_ids(k) ? first.ids[k].cols() : first.features[k].cols();
    const auto b = e.is_ids(k) ? e.ids[k].cols() : e.features[k].cols();
    if (a != b)
      throw shape_error(fmt::format(
          "cannot batch elements of different shapes: feature {} has {} columns in one "
          "element and {} in another",
          k, a, b));
  }
  if (e.labels.cols() != first.labels.cols())
    throw shape_error(fmt::format(
        "cannot batch elements of different shapes: labels have {} columns in one element "
        "and {} in another",
        first.labels.cols(), e.labels.cols()));
  // Within the element, every matrix has its rows (a map may have broken that).
  const auto rows = e.rows();
  for (size_t k = 0; k < e.features.size(); ++k) {
    const auto r = e.is_ids(k) ? e.ids[k].rows() : e.features[k].rows();
    if (r != rows)
      throw shape_error(fmt::format("cannot batch an element with {} rows whose {} {} has {}", rows,
                                    e.is_ids(k) ? "id input" : "feature", k, r));
  }
  if (e.labels.cols() > 0 && e.labels.rows() != rows)
    throw shape_error(fmt::format("cannot batch an element with {} rows whose labels have {}", rows, e.labels.rows()));
}

void shape_rows(const element& like, Eigen::Index rows, element& out) {
  out.features.resize(like.features.size());
  for (size_t k = 0; k < like.features.size(); ++k) out.features[k].resize(rows, like.features[k].cols());
  out.ids.resize(like.ids.size());
  for (size_t k = 0; k < like.ids.size(); ++k) out.ids[k].resize(rows, like.ids[k].cols());
  out.labels.resize(rows, like.labels.cols());
}

void copy_element_row(const element& src, Eigen::Index from, element& dst, Eigen::Index to) {
  for (size_t k = 0; k < src.features.size(); ++k)
    if (src.features[k].cols() > 0) dst.features[k].row(to) = src.features[k].row(from);
  for (size_t k = 0; k < src.ids.size(); ++k)
    if (src.ids[k].cols() > 0) dst.ids[k].row(to) = src.ids[k].row(from);
  if (src.labels.cols() > 0) dst.labels.row(to) = src.labels.row(from);
}

void stack_rows(const std::vector<element>& parts, element& out) {
  out = element{};
  if (parts.empty()) return;
  const element& first = parts.front();
  Eigen::Index rows = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    check_stackable(first, parts[i]);
    rows += parts[i].rows();
  }
  shape_rows(first, rows, out);
  Eigen::Index r = 0;
  for (const auto& p : parts) {
    // A part's matrices without columns may still have rows.
    const auto n = static_cast<Eigen::Index>(p.rows());
    for (size_t k = 0; k < p.features.size(); ++k)
      if (p.features[k].cols() > 0) out.features[k].middleRows(r, n) = p.features[k];
    for (size_t k = 0; k < p.ids.size(); ++k)
      if (p.ids[k].cols() > 0) out.ids[k].middleRows(r, n) = p.ids[k];
    if (p.labels.cols() > 0) out.labels.middleRows(r, n) = p.labels;
    r += n;
  }
}

namespace {

class accessor_iterator final : public iterator {
 public:
  accessor_iterator(std::unique_ptr<accessor> a, uint64_t start)
      : accessor_(std::move(a)), size_(accessor_->size()), position_(start) {}

  std::optional<element> next() override {
    if (position_ >= size_) return std::nullopt;
    element e = accessor_->get(position_);
    ++position_;
    return e;
  }

  uint64_t position() const override { return position_; }

 private:
  std::unique_ptr<accessor> accessor_;
  uint64_t size_;
  uint64_t position_;
};

class empty_iterator final : public iterator {
 public:
  explicit empty_iterator(uint64_t start) : position_(start) {}
  std::optional<element> next() override { return std::nullopt; }
  uint64_t position() const override { return position_; }

 private:
  uint64_t position_;
};

}  // namespace

std::unique_ptr<iterator> make_accessor_iterator(std::unique_ptr<accessor> a, uint64_t start) {
  return std::make_unique<accessor_iterator>(std::move(a), start);
}

std::unique_ptr<iterator> make_empty_iterator(uint64_t start) {
  return std::make_unique<empty_iterator>(start);
}

}  // namespace actortrain::dataset::detail
