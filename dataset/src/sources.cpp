// In-memory sources: rows of matrices (from_tensor_slices, and the file readers and cache
// built on it) and lists of whole elements (from_tensors).

#include "node.hpp"

#include <actortrain/dataset/sources.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace actortrain::dataset {
namespace detail {
namespace {

/// Copies row `src_row` of `src` into row `dst_row` of `dst` (same column count).
inline void copy_row(const matrix& src, uint64_t src_row, matrix& dst, Eigen::Index dst_row) {
  const auto cols = src.cols();
  if (cols == 0) return;
  std::memcpy(dst.data() + dst_row * cols, src.data() + static_cast<Eigen::Index>(src_row) * cols,
              static_cast<size_t>(cols) * sizeof(float));
}

class slices_node final : public node {
 public:
  slices_node(std::vector<matrix> features, matrix labels, std::string label)
      : features_(std::move(features)), labels_(std::move(labels)), label_(std::move(label)) {
    rows_ = static_cast<uint64_t>(features_.empty() ? labels_.rows() : features_[0].rows());
  }

  node_kind kind() const override { return node_kind::source; }
  cardinality_info cardinality() const override {
    return cardinality_info::known(static_cast<int64_t>(rows_));
  }
  std::string label() const override { return label_; }

  std::unique_ptr<accessor> access(uint64_t) const override {
    return std::make_unique<slices_accessor>(*this);
  }

 private:
  class slices_accessor final : public accessor {
   public:
    explicit slices_accessor(const slices_node& n) : node_(n) {}

    uint64_t size() const override { return node_.rows_; }

    element get(uint64_t i) override { return gather_one({i}); }

    void gather(const std::vector<uint64_t>& positions, element& out) override {
      for (uint64_t p : positions)
        if (p >= node_.rows_)
          throw std::out_of_range(fmt::format("{}: position {} out of range (size {})",
                                              node_.label_, p, node_.rows_));
      const auto n = static_cast<Eigen::Index>(positions.size());
      out.features.resize(node_.features_.size());
      for (size_t k = 0; k < node_.features_.size(); ++k) {
        const matrix& src = node_.features_[k];
        matrix& dst = out.features[k];
        dst.resize(n, src.cols());
        for (Eigen::Index j = 0; j < n; ++j) copy_row(src, positions[j], dst, j);
      }
      out.labels.resize(n, node_.labels_.cols());
      for (Eigen::Index j = 0; j < n; ++j) copy_row(node_.labels_, positions[j], out.labels, j);
    }

   private:
    element gather_one(const std::vector<uint64_t>& positions) {
      element e;
      gather(positions, e);
      return e;
    }

    const slices_node& node_;
  };

  std::vector<matrix> features_;
  matrix labels_;
  std::string label_;
  uint64_t rows_ = 0;
};

class elements_node final : public node {
 public:
  elements_node(std::vector<element> elements, std::string label)
      : elements_(std::move(elements)), label_(std::move(label)) {}

  node_kind kind() const override { return node_kind::source; }
  cardinality_info cardinality() const override {
    return cardinality_info::known(static_cast<int64_t>(elements_.size()));
  }
  std::string label() const override { return label_; }

  std::unique_ptr<accessor> access(uint64_t) const override {
    return std::make_unique<elements_accessor>(*this);
  }

 private:
  class elements_accessor final : public accessor {
   public:
    explicit elements_accessor(const elements_node& n) : node_(n) {}
    uint64_t size() const override { return node_.elements_.size(); }
    element get(uint64_t i) override {
      if (i >= node_.elements_.size())
        throw std::out_of_range(fmt::format("{}: position {} out of range (size {})",
                                            node_.label_, i, node_.elements_.size()));
      return node_.elements_[i];
    }

   private:
    const elements_node& node_;
  };

  std::vector<element> elements_;
  std::string label_;
};

}  // namespace

node_ptr make_slices_node(std::vector<matrix> features, matrix labels, std::string label) {
  return std::make_shared<slices_node>(std::move(features), std::move(labels), std::move(label));
}

node_ptr make_elements_node(std::vector<element> elements, std::string label) {
  return std::make_shared<elements_node>(std::move(elements), std::move(label));
}

}  // namespace detail

dataset from_tensors(element e) {
  const auto rows = e.rows();
  for (size_t k = 0; k < e.features.size(); ++k)
    if (e.features[k].rows() != rows)
      throw std::invalid_argument(fmt::format(
          "from_tensors: features[{}] is {} but features[0] is {}: row counts must agree", k,
          detail::shape_of(e.features[k]), detail::shape_of(e.features[0])));
  if (e.labels.size() == 0 && e.labels.rows() != rows) e.labels.resize(rows, 0);
  if (e.labels.rows() != rows)
    throw std::invalid_argument(
        fmt::format("from_tensors: labels are {} but features[0] is {}: row counts must agree",
                    detail::shape_of(e.labels), detail::shape_of(e.features[0])));
  auto label = fmt::format("tensors({} rows)", rows);
  std::vector<element> one;
  one.push_back(std::move(e));
  return dataset(detail::make_elements_node(std::move(one), std::move(label)));
}

dataset from_tensor_slices(std::vector<matrix> features, matrix labels) {
  if (features.empty() && labels.rows() == 0 && labels.cols() == 0)
    throw std::invalid_argument("from_tensor_slices: no features and no labels");
  const auto rows = features.empty() ? labels.rows() : features[0].rows();
  for (size_t k = 1; k < features.size(); ++k)
    if (features[k].rows() != rows)
      throw std::invalid_argument(fmt::format(
          "from_tensor_slices: features[{}] is {} but features[0] is {}: row counts must agree",
          k, detail::shape_of(features[k]), detail::shape_of(features[0])));
  // A 0 x 0 labels matrix means "no labels": give it the rows, with no columns.
  if (labels.size() == 0 && labels.rows() != rows) labels.resize(rows, 0);
  if (labels.rows() != rows)
    throw std::invalid_argument(fmt::format(
        "from_tensor_slices: labels are {} but features[0] is {}: row counts must agree",
        detail::shape_of(labels), detail::shape_of(features[0])));
  std::string shapes;
  for (const auto& f : features) shapes += fmt::format("{}{}", shapes.empty() ? "" : ", ", f.cols());
  auto label = fmt::format("tensor_slices({} rows, features [{}], labels {})", rows, shapes,
                           labels.cols());
  return dataset(detail::make_slices_node(std::move(features), std::move(labels), std::move(label)));
}

}  // namespace actortrain::dataset
