// batch: stacks the rows of consecutive elements. Over random access it gathers rows
// straight into the batch matrices; otherwise it collects elements and stacks them.

#include "node.hpp"

#include <fmt/format.h>

namespace actortrain::dataset::detail {
namespace {

class batch_node final : public node {
 public:
  batch_node(node_ptr upstream, uint64_t batch_size, bool drop_remainder)
      : upstream_(std::move(upstream)), batch_size_(batch_size), drop_remainder_(drop_remainder) {}

  node_kind kind() const override { return node_kind::batch; }

  cardinality_info cardinality() const override {
    auto c = upstream_->cardinality();
    if (!c.is_known()) return c;
    return cardinality_info::known(static_cast<int64_t>(batches(static_cast<uint64_t>(c.n))));
  }

  std::string label() const override {
    return drop_remainder_ ? fmt::format("batch({}, drop_remainder)", batch_size_)
                           : fmt::format("batch({})", batch_size_);
  }
  std::vector<node_ptr> inputs() const override { return {upstream_}; }
  node_ptr rebuild(std::vector<node_ptr> in) const override {
    return std::make_shared<batch_node>(std::move(in.at(0)), batch_size_, drop_remainder_);
  }

  std::unique_ptr<accessor> access(uint64_t epoch) const override {
    auto up = upstream_->access(epoch);
    if (!up) return nullptr;
    return std::make_unique<batch_accessor>(*this, std::move(up));
  }

 protected:
  std::unique_ptr<iterator> stream(uint64_t epoch, uint64_t start) const override {
    return std::make_unique<batch_iterator>(
        *this, upstream_->iterate(epoch, mul_sat(start, batch_size_)), start);
  }

 private:
  /// A shape error with this node and the batch's position in front.
  shape_error in_context(const shape_error& e, uint64_t batch) const {
    return shape_error(fmt::format("{}: batch {}: {}", label(), batch, e.what()));
  }

  /// Number of batches of n elements.
  uint64_t batches(uint64_t n) const {
    return drop_remainder_ ? n / batch_size_ : n / batch_size_ + (n % batch_size_ != 0);
  }

  class batch_accessor final : public accessor {
   public:
    batch_accessor(const batch_node& n, std::unique_ptr<accessor> up)
        : node_(n), up_(std::move(up)), up_size_(up_->size()) {
      size_ = up_size_ == infinite_size ? infinite_size : node_.batches(up_size_);
    }

    uint64_t size() const override { return size_; }

    element get(uint64_t i) override {
      element out;
      positions_.clear();
      append_positions(i);
      gather_upstream(i, out);
      return out;
    }

    // A batch of batches is the union of their rows.
    void gather(const std::vector<uint64_t>& positions, element& out) override {
      positions_.clear();
      for (uint64_t i : positions) append_positions(i);
      gather_upstream(positions.empty() ? 0 : positions.front(), out);
    }

   private:
    void gather_upstream(uint64_t batch, element& out) {
      try {
        up_->gather(positions_, out);
      } catch (const shape_error& e) {
        throw node_.in_context(e, batch);
      }
    }

    void append_positions(uint64_t i) {
      if (i >= size_)
        throw std::out_of_range(fmt::format("{}: batch {} out of range (size {})",
                                            node_.label(), i, size_));
      const uint64_t begin = mul_sat(i, node_.batch_size_);
      const uint64_t end = std::min(up_size_, add_sat(begin, node_.batch_size_));
      for (uint64_t p = begin; p < end; ++p) positions_.push_back(p);
    }

    const batch_node& node_;
    std::unique_ptr<accessor> up_;
    uint64_t up_size_;
    uint64_t size_ = 0;
    std::vector<uint64_t> positions_;
  };

  class batch_iterator final : public iterator {
   public:
    batch_iterator(const batch_node& n, std::unique_ptr<iterator> up, uint64_t start)
        : node_(n), up_(std::move(up)), position_(start) {}

    std::optional<element> next() override {
      if (done_) return std::nullopt;
      parts_.clear();
      while (parts_.size() < node_.batch_size_) {
        auto e = up_->next();
        if (!e) {
          done_ = true;
          break;
        }
        parts_.push_back(std::move(*e));
      }
      if (parts_.empty() || (done_ && node_.drop_remainder_)) {
        done_ = true;
        return std::nullopt;
      }
      element out;
      try {
        stack_rows(parts_, out);
      } catch (const shape_error& e) {
        throw node_.in_context(e, position_);
      }
      parts_.clear();
      ++position_;
      return out;
    }

    uint64_t position() const override { return position_; }

   private:
    const batch_node& node_;
    std::unique_ptr<iterator> up_;
    uint64_t position_;
    bool done_ = false;
    std::vector<element> parts_;
  };

  node_ptr upstream_;
  uint64_t batch_size_;
  bool drop_remainder_;
};

}  // namespace

node_ptr make_batch_node(node_ptr upstream, uint64_t batch_size, bool drop_remainder) {
  return std::make_shared<batch_node>(std::move(upstream), batch_size, drop_remainder);
}

}  // namespace actortrain::dataset::detail
