// cache: materializes the upstream's epoch-0 pass on first use and serves every epoch
// from memory, by random access.

#include "node.hpp"

#include <fmt/format.h>

#include <mutex>

namespace actortrain::dataset::detail {
namespace {

class cache_node final : public node {
 public:
  explicit cache_node(node_ptr upstream) : upstream_(std::move(upstream)) {}

  node_kind kind() const override { return node_kind::cache; }
  cardinality_info cardinality() const override { return upstream_->cardinality(); }
  std::string label() const override { return "cache"; }
  std::vector<node_ptr> inputs() const override { return {upstream_}; }
  node_ptr rebuild(std::vector<node_ptr> in) const override {
    return std::make_shared<cache_node>(std::move(in.at(0)));
  }

  std::unique_ptr<accessor> access(uint64_t) const override { return materialized()->access(0); }

 private:
  /// The in-memory copy, built by the first caller; concurrent callers wait for it. If
  /// building throws, the next caller tries again.
  node_ptr materialized() const {
    std::lock_guard<std::mutex> guard(mutex_);
    if (cached_) return cached_;
    if (upstream_->cardinality().is_infinite())
      throw std::invalid_argument("cache: cannot materialize an infinite dataset (" +
                                  upstream_->describe() + ")");
    std::vector<element> elements;
    auto it = upstream_->iterate(0, 0);
    while (auto e = it->next()) elements.push_back(std::move(*e));
    cached_ = to_node(std::move(elements));
    return cached_;
  }

  /// One-row elements of one shape become matrices (rows gathered like a source's);
  /// anything else stays a list of elements.
  node_ptr to_node(std::vector<element> elements) const {
    std::string name = "cached(" + upstream_->describe() + ")";
    bool rows_of_one = !elements.empty();
    for (size_t i = 0; i < elements.size() && rows_of_one; ++i)
      rows_of_one = elements[i].rows() == 1 && same_columns(elements[0], elements[i]);
    if (!rows_of_one) return make_elements_node(std::move(elements), std::move(name));
    element all;
    stack_rows(elements, all);
    elements.clear();
    return make_slices_node(std::move(all), std::move(name));
  }

  static bool same_columns(const element& a, const element& b) {
    try {
      check_stackable(a, b);
      return true;
    } catch (const shape_error&) {
      return false;
    }
  }

  node_ptr upstream_;
  mutable std::mutex mutex_;
  mutable node_ptr cached_;
};

}  // namespace

node_ptr make_cache_node(node_ptr upstream) {
  return std::make_shared<cache_node>(std::move(upstream));
}

}  // namespace actortrain::dataset::detail
