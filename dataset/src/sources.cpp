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

// Throws std::invalid_argument, naming `who` and the shapes, unless every matrix of `e`
// has e.rows() rows, inputs given as ids have no float columns, and there is something.
// A 0 x 0 labels matrix means "no labels": it gets the rows, with no columns.
void check_rows(element& e, const std::string& who) {
  if (e.features.empty() && e.labels.rows() == 0 && e.labels.cols() == 0)
    throw std::invalid_argument(fmt::format("{}: no features and no labels", who));
  if (e.ids.size() > e.features.size())
    throw std::invalid_argument(fmt::format("{}: {} id inputs but {} inputs", who, e.ids.size(), e.features.size()));
  auto name = [&](size_t k) { return e.is_ids(k) ? fmt::format("ids[{}]", k) : fmt::format("features[{}]", k); };
  auto shape = [&](size_t k) {
    return e.is_ids(k) ? fmt::format("[{} x {}]", e.ids[k].rows(), e.ids[k].cols()) : shape_of(e.features[k]);
  };
  // An input given as ids: its float matrix gets the ids' rows (before rows() is read).
  for (size_t k = 0; k < e.ids.size(); ++k)
    if (e.is_ids(k)) {
      if (e.features[k].cols() != 0)
        throw std::invalid_argument(fmt::format("{}: input {} is given both as ids and as {} floats", who, k,
                                                shape_of(e.features[k])));
      if (e.features[k].rows() != e.ids[k].rows()) e.features[k].resize(e.ids[k].rows(), 0);
    }
  const auto rows = e.rows();
  for (size_t k = 1; k < e.features.size(); ++k)
    if ((e.is_ids(k) ? e.ids[k].rows() : e.features[k].rows()) != rows)
      throw std::invalid_argument(fmt::format("{}: {} is {} but {} is {}: row counts must agree", who, name(k),
                                              shape(k), name(0), shape(0)));
  if (e.labels.size() == 0 && e.labels.rows() != rows) e.labels.resize(rows, 0);
  if (e.labels.rows() != rows)
    throw std::invalid_argument(fmt::format("{}: labels are {} but {} is {}: row counts must agree", who,
                                            shape_of(e.labels), name(0), shape(0)));
}


class slices_node final : public node {
 public:
  slices_node(element all, std::string label) : all_(std::move(all)), label_(std::move(label)) {
    rows_ = static_cast<uint64_t>(all_.rows());
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
      shape_rows(node_.all_, n, out);
      for (Eigen::Index j = 0; j < n; ++j)
        copy_element_row(node_.all_, static_cast<Eigen::Index>(positions[static_cast<size_t>(j)]), out, j);
    }

   private:
    element gather_one(const std::vector<uint64_t>& positions) {
      element e;
      gather(positions, e);
      return e;
    }

    const slices_node& node_;
  };

  element all_;
  std::string label_;
  uint64_t rows_ = 0;
};

// Element i is fn(i), made when it is read.
class generated_node final : public node {
 public:
  generated_node(uint64_t count, std::function<element(uint64_t)> fn, std::string label)
      : count_(count), fn_(std::move(fn)), label_(std::move(label)) {}

  node_kind kind() const override { return node_kind::source; }
  cardinality_info cardinality() const override { return cardinality_info::known(static_cast<int64_t>(count_)); }
  std::string label() const override { return label_; }
  std::unique_ptr<accessor> access(uint64_t) const override { return std::make_unique<generated_accessor>(*this); }

 private:
  class generated_accessor final : public accessor {
   public:
    explicit generated_accessor(const generated_node& n) : node_(n) {}
    uint64_t size() const override { return node_.count_; }
    element get(uint64_t i) override {
      if (i >= node_.count_)
        throw std::out_of_range(fmt::format("{}: position {} out of range (size {})", node_.label_, i, node_.count_));
      auto e = node_.fn_(i);
      check_rows(e, fmt::format("{}: element {}", node_.label_, i));  // a malformed element, named
      return e;
    }

   private:
    const generated_node& node_;
  };

  uint64_t count_;
  std::function<element(uint64_t)> fn_;
  std::string label_;
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

node_ptr make_slices_node(element all, std::string label) {
  return std::make_shared<slices_node>(std::move(all), std::move(label));
}

node_ptr make_elements_node(std::vector<element> elements, std::string label) {
  return std::make_shared<elements_node>(std::move(elements), std::move(label));
}

}  // namespace detail


dataset from_tensors(element e) {
  detail::check_rows(e, "from_tensors");
  auto label = fmt::format("tensors({} rows)", e.rows());
  std::vector<element> one;
  one.push_back(std::move(e));
  return dataset(detail::make_elements_node(std::move(one), std::move(label)));
}

dataset from_tensor_slices(element all) {
  detail::check_rows(all, "from_tensor_slices");
  std::string shapes;
  for (size_t k = 0; k < all.features.size(); ++k)
    shapes += fmt::format("{}{}{}", shapes.empty() ? "" : ", ", all.is_ids(k) ? all.ids[k].cols() : all.features[k].cols(),
                          all.is_ids(k) ? " ids" : "");
  auto label = fmt::format("tensor_slices({} rows, features [{}], labels {})", all.rows(), shapes, all.labels.cols());
  return dataset(detail::make_slices_node(std::move(all), std::move(label)));
}

dataset from_tensor_slices(std::vector<matrix> features, matrix labels) {
  element all;
  all.features = std::move(features);
  all.labels = std::move(labels);
  return from_tensor_slices(std::move(all));
}

dataset generate(int64_t count, std::function<element(uint64_t index)> fn, std::string name) {
  if (count < 0) throw std::invalid_argument(fmt::format("generate: count = {} < 0", count));
  if (!fn) throw std::invalid_argument("generate: empty function");
  auto label = fmt::format("generated({}, {} elements)", name, count);
  return dataset(std::make_shared<detail::generated_node>(static_cast<uint64_t>(count), std::move(fn), std::move(label)));
}

}  // namespace actortrain::dataset
