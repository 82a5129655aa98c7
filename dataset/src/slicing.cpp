// take, skip and shard: views that select upstream positions by index arithmetic
// (position i of the view is upstream position stride * i + offset), so they keep random
// access and seek without producing the elements they drop.

#include "node.hpp"

#include <fmt/format.h>

namespace actortrain::dataset::detail {
namespace {

/// Position i is upstream position stride * i + offset, for i < size.
class affine_accessor final : public accessor {
 public:
  affine_accessor(std::unique_ptr<accessor> up, uint64_t stride, uint64_t offset, uint64_t size)
      : up_(std::move(up)), stride_(stride), offset_(offset), size_(size) {}

  uint64_t size() const override { return size_; }
  element get(uint64_t i) override { return up_->get(map(i)); }
  void gather(const std::vector<uint64_t>& positions, element& out) override {
    mapped_.resize(positions.size());
    for (size_t j = 0; j < positions.size(); ++j) mapped_[j] = map(positions[j]);
    up_->gather(mapped_, out);
  }

 private:
  uint64_t map(uint64_t i) const {
    if (i >= size_)
      throw std::out_of_range(fmt::format("position {} out of range (size {})", i, size_));
    return i * stride_ + offset_;
  }

  std::unique_ptr<accessor> up_;
  uint64_t stride_;
  uint64_t offset_;
  uint64_t size_;
  std::vector<uint64_t> mapped_;
};

/// Sequential form: yields upstream elements starting at the upstream position for
/// `start`, dropping stride - 1 upstream elements between two yields, at most `limit`
/// positions in all.
class affine_iterator final : public iterator {
 public:
  affine_iterator(std::unique_ptr<iterator> up, uint64_t stride, uint64_t start, uint64_t limit)
      : up_(std::move(up)), stride_(stride), position_(start), limit_(limit) {}

  std::optional<element> next() override {
    if (done_ || position_ >= limit_) return std::nullopt;
    if (!first_) {
      for (uint64_t k = 1; k < stride_; ++k)
        if (!up_->next()) return finish();
    }
    auto e = up_->next();
    if (!e) return finish();
    first_ = false;
    ++position_;
    return e;
  }

  uint64_t position() const override { return position_; }

 private:
  std::optional<element> finish() {
    done_ = true;
    return std::nullopt;
  }

  std::unique_ptr<iterator> up_;
  uint64_t stride_;
  uint64_t position_;
  uint64_t limit_;
  bool first_ = true;
  bool done_ = false;
};

class take_node final : public node {
 public:
  take_node(node_ptr upstream, uint64_t count) : upstream_(std::move(upstream)), count_(count) {}

  node_kind kind() const override { return node_kind::take; }
  cardinality_info cardinality() const override {
    auto c = upstream_->cardinality();
    if (c.is_infinite()) return cardinality_info::known(static_cast<int64_t>(count_));
    if (!c.is_known()) return c;
    return cardinality_info::known(std::min(c.n, static_cast<int64_t>(count_)));
  }
  std::string label() const override { return fmt::format("take({})", count_); }
  std::vector<node_ptr> inputs() const override { return {upstream_}; }
  node_ptr rebuild(std::vector<node_ptr> in) const override {
    return std::make_shared<take_node>(std::move(in.at(0)), count_);
  }
  std::unique_ptr<accessor> access(uint64_t epoch) const override {
    auto up = upstream_->access(epoch);
    if (!up) return nullptr;
    const uint64_t size = std::min(up->size(), count_);
    return std::make_unique<affine_accessor>(std::move(up), 1, 0, size);
  }

 protected:
  std::unique_ptr<iterator> stream(uint64_t epoch, uint64_t start) const override {
    if (start >= count_) return make_empty_iterator(start);
    return std::make_unique<affine_iterator>(upstream_->iterate(epoch, start), 1, start, count_);
  }

 private:
  node_ptr upstream_;
  uint64_t count_;
};

class skip_node final : public node {
 public:
  skip_node(node_ptr upstream, uint64_t count) : upstream_(std::move(upstream)), count_(count) {}

  node_kind kind() const override { return node_kind::skip; }
  cardinality_info cardinality() const override {
    auto c = upstream_->cardinality();
    if (!c.is_known()) return c;
    return cardinality_info::known(std::max<int64_t>(0, c.n - static_cast<int64_t>(count_)));
  }
  std::string label() const override { return fmt::format("skip({})", count_); }
  std::vector<node_ptr> inputs() const override { return {upstream_}; }
  node_ptr rebuild(std::vector<node_ptr> in) const override {
    return std::make_shared<skip_node>(std::move(in.at(0)), count_);
  }
  std::unique_ptr<accessor> access(uint64_t epoch) const override {
    auto up = upstream_->access(epoch);
    if (!up) return nullptr;
    const uint64_t n = up->size();
    const uint64_t size = n == infinite_size ? infinite_size : (n > count_ ? n - count_ : 0);
    return std::make_unique<affine_accessor>(std::move(up), 1, count_, size);
  }

 protected:
  std::unique_ptr<iterator> stream(uint64_t epoch, uint64_t start) const override {
    return std::make_unique<affine_iterator>(upstream_->iterate(epoch, add_sat(start, count_)),
                                             1, start, infinite_size);
  }

 private:
  node_ptr upstream_;
  uint64_t count_;
};

class shard_node final : public node {
 public:
  shard_node(node_ptr upstream, uint64_t num_shards, uint64_t index)
      : upstream_(std::move(upstream)), num_shards_(num_shards), index_(index) {}

  node_kind kind() const override { return node_kind::shard; }
  cardinality_info cardinality() const override {
    auto c = upstream_->cardinality();
    if (!c.is_known()) return c;
    return cardinality_info::known(static_cast<int64_t>(shard_size(static_cast<uint64_t>(c.n))));
  }
  std::string label() const override { return fmt::format("shard({}, {})", num_shards_, index_); }
  std::vector<node_ptr> inputs() const override { return {upstream_}; }
  node_ptr rebuild(std::vector<node_ptr> in) const override {
    return std::make_shared<shard_node>(std::move(in.at(0)), num_shards_, index_);
  }
  std::unique_ptr<accessor> access(uint64_t epoch) const override {
    auto up = upstream_->access(epoch);
    if (!up) return nullptr;
    const uint64_t n = up->size();
    const uint64_t size = n == infinite_size ? infinite_size : shard_size(n);
    return std::make_unique<affine_accessor>(std::move(up), num_shards_, index_, size);
  }

 protected:
  std::unique_ptr<iterator> stream(uint64_t epoch, uint64_t start) const override {
    return std::make_unique<affine_iterator>(
        upstream_->iterate(epoch, add_sat(mul_sat(start, num_shards_), index_)), num_shards_,
        start, infinite_size);
  }

 private:
  /// Number of i < n with i % num_shards == index.
  uint64_t shard_size(uint64_t n) const {
    return n > index_ ? (n - index_ - 1) / num_shards_ + 1 : 0;
  }

  node_ptr upstream_;
  uint64_t num_shards_;
  uint64_t index_;
};

}  // namespace

node_ptr make_take_node(node_ptr upstream, uint64_t count) {
  return std::make_shared<take_node>(std::move(upstream), count);
}

node_ptr make_skip_node(node_ptr upstream, uint64_t count) {
  return std::make_shared<skip_node>(std::move(upstream), count);
}

node_ptr make_shard_node(node_ptr upstream, uint64_t num_shards, uint64_t index) {
  return std::make_shared<shard_node>(std::move(upstream), num_shards, index);
}

}  // namespace actortrain::dataset::detail
