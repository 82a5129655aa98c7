// concatenate: the elements of several datasets one after the other. Random access when
// every part has it (positions are located by binary search over the parts' offsets).

#include "node.hpp"

#include <algorithm>

namespace actortrain::dataset::detail {
namespace {

class concat_node final : public node {
 public:
  explicit concat_node(std::vector<node_ptr> parts) : parts_(std::move(parts)) {}

  node_kind kind() const override { return node_kind::concatenate; }

  // tf.data's rule: infinite if any part is, else unknown if any part is, else the sum.
  cardinality_info cardinality() const override {
    bool unknown = false;
    int64_t n = 0;
    for (const auto& p : parts_) {
      auto c = p->cardinality();
      if (c.is_infinite()) return c;
      if (!c.is_known()) unknown = true;
      else n += c.n;
    }
    return unknown ? cardinality_info::unknown() : cardinality_info::known(n);
  }

  std::string label() const override { return "concatenate"; }
  std::vector<node_ptr> inputs() const override { return parts_; }
  node_ptr rebuild(std::vector<node_ptr> in) const override {
    return std::make_shared<concat_node>(std::move(in));
  }

  std::unique_ptr<accessor> access(uint64_t epoch) const override {
    std::vector<std::unique_ptr<accessor>> parts;
    for (const auto& p : parts_) {
      auto a = p->access(epoch);
      if (!a) return nullptr;
      const bool infinite = a->size() == infinite_size;
      parts.push_back(std::move(a));
      if (infinite) break;  // later parts are never reached
    }
    return std::make_unique<concat_accessor>(std::move(parts));
  }

 protected:
  std::unique_ptr<iterator> stream(uint64_t epoch, uint64_t start) const override {
    return std::make_unique<concat_iterator>(*this, epoch, start);
  }

 private:
  class concat_accessor final : public accessor {
   public:
    explicit concat_accessor(std::vector<std::unique_ptr<accessor>> parts)
        : parts_(std::move(parts)) {
      uint64_t offset = 0;
      for (const auto& p : parts_) {
        offsets_.push_back(offset);
        offset = p->size() == infinite_size ? infinite_size : add_sat(offset, p->size());
      }
      size_ = offset;
    }

    uint64_t size() const override { return size_; }

    element get(uint64_t i) override {
      auto [part, local] = locate(i);
      return parts_[part]->get(local);
    }

    void gather(const std::vector<uint64_t>& positions, element& out) override {
      gather_partitioned(
          positions, out, [this](uint64_t p) { return locate(p); },
          [this](uint64_t part, const std::vector<uint64_t>& local, element& e) {
            parts_[part]->gather(local, e);
          });
    }

   private:
    std::pair<uint64_t, uint64_t> locate(uint64_t i) const {
      if (i >= size_) throw std::out_of_range("concatenate: position out of range");
      // The last part whose offset is <= i (empty parts share offsets with the next).
      auto it = std::upper_bound(offsets_.begin(), offsets_.end(), i);
      auto part = static_cast<uint64_t>(it - offsets_.begin()) - 1;
      return {part, i - offsets_[part]};
    }

    std::vector<std::unique_ptr<accessor>> parts_;
    std::vector<uint64_t> offsets_;
    uint64_t size_ = 0;
  };

  class concat_iterator final : public iterator {
   public:
    concat_iterator(const concat_node& n, uint64_t epoch, uint64_t start)
        : node_(n), epoch_(epoch), position_(start) {
      // Skip whole parts of known length; replay into the first part of unknown length.
      uint64_t remaining = start;
      while (part_ < node_.parts_.size()) {
        const auto& p = node_.parts_[part_];
        auto c = p->cardinality();
        if (c.is_known() && remaining >= static_cast<uint64_t>(c.n)) {
          remaining -= static_cast<uint64_t>(c.n);
          ++part_;
          continue;
        }
        if (c.is_known() || c.is_infinite()) {
          inner_ = p->iterate(epoch_, remaining);
          break;
        }
        inner_ = p->iterate(epoch_, 0);
        while (remaining > 0 && inner_->next()) --remaining;
        if (remaining == 0) break;
        inner_.reset();
        ++part_;
      }
    }

    std::optional<element> next() override {
      while (part_ < node_.parts_.size()) {
        if (!inner_) inner_ = node_.parts_[part_]->iterate(epoch_, 0);
        if (auto e = inner_->next()) {
          ++position_;
          return e;
        }
        inner_.reset();
        ++part_;
      }
      return std::nullopt;
    }

    uint64_t position() const override { return position_; }

   private:
    const concat_node& node_;
    uint64_t epoch_;
    uint64_t position_;
    size_t part_ = 0;
    std::unique_ptr<iterator> inner_;
  };

  std::vector<node_ptr> parts_;
};

}  // namespace

node_ptr make_concat_node(std::vector<node_ptr> parts) {
  return std::make_shared<concat_node>(std::move(parts));
}

}  // namespace actortrain::dataset::detail
