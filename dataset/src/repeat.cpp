// repeat: the upstream `count` times (or forever), repetition k of epoch e at upstream
// epoch e * count + k (forever: e * 2^32 + k), so reshuffles differ per repetition and
// replay exactly.

#include "node.hpp"

#include <fmt/format.h>

namespace actortrain::dataset::detail {
namespace {

class repeat_node final : public node {
 public:
  repeat_node(node_ptr upstream, int64_t count) : upstream_(std::move(upstream)), count_(count) {}

  node_kind kind() const override { return node_kind::repeat; }

  cardinality_info cardinality() const override {
    if (count_ == 0) return cardinality_info::known(0);
    auto c = upstream_->cardinality();
    if (c.is_known() && c.n == 0) return c;
    if (count_ < 0) return cardinality_info::infinite();
    if (!c.is_known()) return c;
    return cardinality_info::known(
        static_cast<int64_t>(std::min<uint64_t>(mul_sat(static_cast<uint64_t>(count_),
                                                        static_cast<uint64_t>(c.n)),
                                                std::numeric_limits<int64_t>::max())));
  }

  std::string label() const override {
    return count_ < 0 ? std::string("repeat") : fmt::format("repeat({})", count_);
  }
  std::vector<node_ptr> inputs() const override { return {upstream_}; }
  node_ptr rebuild(std::vector<node_ptr> in) const override {
    return std::make_shared<repeat_node>(std::move(in.at(0)), count_);
  }

  uint64_t repetition_epoch(uint64_t epoch, uint64_t k) const {
    return count_ >= 0 ? epoch * static_cast<uint64_t>(count_) + k : (epoch << 32) + k;
  }

  std::unique_ptr<accessor> access(uint64_t epoch) const override {
    if (!upstream_->cardinality().is_known()) return nullptr;
    auto first = upstream_->access(repetition_epoch(epoch, 0));
    if (!first) return nullptr;
    return std::make_unique<repeat_accessor>(*this, epoch, std::move(first));
  }

 protected:
  std::unique_ptr<iterator> stream(uint64_t epoch, uint64_t start) const override {
    if (count_ == 0) return make_empty_iterator(start);
    auto c = upstream_->cardinality();
    if (c.is_known()) {
      const auto n = static_cast<uint64_t>(c.n);
      if (n == 0) return make_empty_iterator(start);
      const uint64_t rep = start / n;
      if (count_ >= 0 && rep >= static_cast<uint64_t>(count_)) return make_empty_iterator(start);
      return std::make_unique<repeat_iterator>(*this, epoch, rep, start % n, start);
    }
    if (c.is_infinite())  // the first repetition never ends
      return std::make_unique<repeat_iterator>(*this, epoch, 0, start, start);
    // Unknown length: replay.
    return replay_to(std::make_unique<repeat_iterator>(*this, epoch, 0, 0, 0), start);
  }

 private:
  class repeat_accessor final : public accessor {
   public:
    repeat_accessor(const repeat_node& n, uint64_t epoch, std::unique_ptr<accessor> first)
        : node_(n), epoch_(epoch), n_(first->size()), current_(std::move(first)) {
      if (n_ == 0 || node_.count_ == 0)
        size_ = 0;
      else if (node_.count_ < 0 || n_ == infinite_size)
        size_ = infinite_size;
      else
        size_ = mul_sat(static_cast<uint64_t>(node_.count_), n_);
    }

    uint64_t size() const override { return size_; }

    element get(uint64_t i) override {
      check(i);
      return repetition(i / n_).get(i % n_);
    }

    void gather(const std::vector<uint64_t>& positions, element& out) override {
      for (uint64_t p : positions) check(p);
      gather_partitioned(
          positions, out,
          [this](uint64_t p) { return std::pair<uint64_t, uint64_t>{p / n_, p % n_}; },
          [this](uint64_t rep, const std::vector<uint64_t>& local, element& e) {
            repetition(rep).gather(local, e);
          });
    }

   private:
    void check(uint64_t i) const {
      if (i >= size_)
        throw std::out_of_range(fmt::format("{}: position {} out of range (size {})",
                                            node_.label(), i, size_));
    }

    accessor& repetition(uint64_t rep) {
      if (rep != current_rep_) {
        auto next = node_.upstream_->access(node_.repetition_epoch(epoch_, rep));
        if (!next)
          throw std::logic_error(node_.upstream_->label() +
                                 ": random access in one epoch but not in another");
        current_ = std::move(next);
        current_rep_ = rep;
      }
      return *current_;
    }

    const repeat_node& node_;
    uint64_t epoch_;
    uint64_t n_;  // elements per repetition
    uint64_t size_ = 0;
    std::unique_ptr<accessor> current_;
    uint64_t current_rep_ = 0;
  };

  class repeat_iterator final : public iterator {
   public:
    /// Starts at `offset` within repetition `rep`; reports positions from `position`.
    repeat_iterator(const repeat_node& n, uint64_t epoch, uint64_t rep, uint64_t offset,
                    uint64_t position)
        : node_(n), epoch_(epoch), rep_(rep), offset_(offset), position_(position) {}

    std::optional<element> next() override {
      while (!done_) {
        if (!inner_) {
          if (node_.count_ >= 0 && rep_ >= static_cast<uint64_t>(node_.count_)) break;
          inner_ = node_.upstream_->iterate(node_.repetition_epoch(epoch_, rep_), offset_);
          rep_yielded_ = offset_ > 0;
          offset_ = 0;
        }
        if (auto e = inner_->next()) {
          rep_yielded_ = true;
          ++position_;
          return e;
        }
        inner_.reset();
        if (!rep_yielded_) break;  // an empty repetition: the data ends, not a hang
        ++rep_;
      }
      done_ = true;
      return std::nullopt;
    }

    uint64_t position() const override { return position_; }
    void rebase(uint64_t start) { position_ = start; }

   private:
    const repeat_node& node_;
    uint64_t epoch_;
    uint64_t rep_;
    uint64_t offset_;
    uint64_t position_;
    std::unique_ptr<iterator> inner_;
    bool rep_yielded_ = false;
    bool done_ = false;
  };

  node_ptr upstream_;
  int64_t count_;
};

}  // namespace

node_ptr make_repeat_node(node_ptr upstream, int64_t count) {
  return std::make_shared<repeat_node>(std::move(upstream), count);
}

}  // namespace actortrain::dataset::detail
