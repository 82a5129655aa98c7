// shuffle: tf.data's buffer algorithm with counter-based draws.
//
// The k-th output (k = 0, 1, ...) takes slot below(draw(seed, k, e), buffer size) of the
// buffer, where e is the epoch (or 0 without reshuffle_each_iteration); the slot is
// refilled with the next upstream element, or, once the upstream is exhausted, with the
// buffer's last element. The same algorithm runs in three forms that give the same order:
//   - on indices, over a whole random-access epoch of known size n: a permutation of n
//     32-bit indices, then O(1) seeks and row gathers (the fast path). The node keeps the
//     last epoch's permutation and every accessor of that epoch shares it: a dataset
//     shard seeks whenever requests arrive out of order, and building the order again
//     cost O(n) each time (a tenth of a CTR job's CPU at 1M examples a pipeline);
//   - on indices, streaming, over a random-access upstream too large or infinite for a
//     permutation: a buffer of indices, seeks replay indices only;
//   - on elements, over any other upstream: a buffer of elements, seeks replay elements.

#include "node.hpp"

#include <actortrain/model/random.hpp>

#include <fmt/format.h>

#include <memory>
#include <mutex>

namespace actortrain::dataset::detail {
namespace {

using model::shuffle_buffer;  // the buffer algorithm (model/random.hpp), shared with trainer::fit(x, y)

class shuffle_node final : public node {
 public:
  shuffle_node(node_ptr upstream, uint64_t buffer_size, uint64_t seed, bool reshuffle)
      : upstream_(std::move(upstream)), buffer_size_(buffer_size), seed_(seed), reshuffle_(reshuffle) {}

  node_kind kind() const override { return node_kind::shuffle; }
  cardinality_info cardinality() const override { return upstream_->cardinality(); }
  std::string label() const override {
    return reshuffle_ ? fmt::format("shuffle({}, seed={})", buffer_size_, seed_)
                      : fmt::format("shuffle({}, seed={}, reshuffle=false)", buffer_size_, seed_);
  }
  std::vector<node_ptr> inputs() const override { return {upstream_}; }
  node_ptr rebuild(std::vector<node_ptr> in) const override {
    return std::make_shared<shuffle_node>(std::move(in.at(0)), buffer_size_, seed_, reshuffle_);
  }

  /// Largest upstream given a permutation (4 bytes per element, shared by the epoch's
  /// iterators); larger or infinite random-access upstreams stream indices instead.
  static constexpr uint64_t max_permutation = uint64_t{1} << 26;

  std::unique_ptr<accessor> access(uint64_t epoch) const override {
    auto up = upstream_->access(epoch);
    if (!up || up->size() > max_permutation) return nullptr;
    return std::make_unique<permutation_accessor>(std::move(up), order_of(up->size(), stream_of(epoch)));
  }

 protected:
  std::unique_ptr<iterator> stream(uint64_t epoch, uint64_t start) const override {
    if (auto up = upstream_->access(epoch))
      return replay_to(std::make_unique<index_iterator>(*this, std::move(up), stream_of(epoch)),
                       start);
    return replay_to(
        std::make_unique<element_iterator>(*this, upstream_->iterate(epoch, 0), stream_of(epoch)),
        start);
  }

 private:
  uint64_t stream_of(uint64_t epoch) const { return reshuffle_ ? epoch : 0; }

  using order_ptr = std::shared_ptr<const std::vector<uint32_t>>;

  /// The order of one epoch of n <= max_permutation elements: the one kept when it is
  /// that epoch's (the order depends on n and the stream alone), else built and kept.
  order_ptr order_of(uint64_t n, uint64_t stream) const {
    std::lock_guard<std::mutex> lock{kept_mutex_};
    if (!kept_ || kept_n_ != n || kept_stream_ != stream) {
      kept_.reset();  // not two orders at once
      kept_ = std::make_shared<const std::vector<uint32_t>>(permutation(n, stream));
      kept_n_ = n;
      kept_stream_ = stream;
    }
    return kept_;
  }

  /// The order of one epoch of n <= max_permutation elements.
  std::vector<uint32_t> permutation(uint64_t n, uint64_t stream) const {
    std::vector<uint32_t> order;
    order.reserve(n);
    shuffle_buffer<uint32_t> buf(buffer_size_, seed_, stream);
    uint64_t next_index = 0;
    auto pull = [&]() -> std::optional<uint32_t> {
      if (next_index >= n) return std::nullopt;
      return static_cast<uint32_t>(next_index++);
    };
    while (auto i = buf.next(pull)) order.push_back(*i);
    return order;
  }

  class permutation_accessor final : public accessor {
   public:
    permutation_accessor(std::unique_ptr<accessor> up, order_ptr order)
        : up_(std::move(up)), order_(std::move(order)) {}
    uint64_t size() const override { return order_->size(); }
    element get(uint64_t i) override { return up_->get(order_->at(i)); }
    void gather(const std::vector<uint64_t>& positions, element& out) override {
      mapped_.resize(positions.size());
      for (size_t j = 0; j < positions.size(); ++j) mapped_[j] = order_->at(positions[j]);
      up_->gather(mapped_, out);
    }

   private:
    std::unique_ptr<accessor> up_;
    order_ptr order_;
    std::vector<uint64_t> mapped_;
  };

  class index_iterator final : public iterator {
   public:
    index_iterator(const shuffle_node& n, std::unique_ptr<accessor> up, uint64_t stream)
        : up_(std::move(up)), buffer_(n.buffer_size_, n.seed_, stream) {}
    std::optional<element> next() override {
      const uint64_t size = up_->size();
      auto i = buffer_.next([&]() -> std::optional<uint64_t> {
        if (next_index_ >= size) return std::nullopt;
        return next_index_++;
      });
      if (!i) return std::nullopt;
      element e = up_->get(*i);
      ++position_;
      return e;
    }
    uint64_t position() const override { return position_; }
    void rebase(uint64_t start) { position_ = start; }

   private:
    std::unique_ptr<accessor> up_;
    shuffle_buffer<uint64_t> buffer_;
    uint64_t next_index_ = 0;
    uint64_t position_ = 0;
  };

  class element_iterator final : public iterator {
   public:
    element_iterator(const shuffle_node& n, std::unique_ptr<iterator> up, uint64_t stream)
        : up_(std::move(up)), buffer_(n.buffer_size_, n.seed_, stream) {}
    std::optional<element> next() override {
      auto e = buffer_.next([&] { return up_->next(); });
      if (e) ++position_;
      return e;
    }
    uint64_t position() const override { return position_; }
    void rebase(uint64_t start) { position_ = start; }

   private:
    std::unique_ptr<iterator> up_;
    shuffle_buffer<element> buffer_;
    uint64_t position_ = 0;
  };

  node_ptr upstream_;
  uint64_t buffer_size_;
  uint64_t seed_;
  bool reshuffle_;
  // The last order built (access() is const and may run on several threads).
  mutable std::mutex kept_mutex_;
  mutable order_ptr kept_;
  mutable uint64_t kept_n_ = 0, kept_stream_ = 0;
};

}  // namespace

node_ptr make_shuffle_node(node_ptr upstream, uint64_t buffer_size, uint64_t seed,
                           bool reshuffle_each_iteration) {
  return std::make_shared<shuffle_node>(std::move(upstream), buffer_size, seed,
                                        reshuffle_each_iteration);
}

}  // namespace actortrain::dataset::detail
