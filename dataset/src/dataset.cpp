// The dataset handle: argument checks, then one node per transformation.

#include "node.hpp"

#include <fmt/format.h>

namespace actortrain::dataset {
namespace {

/// Keeps the root alive for as long as an iterator over it exists.
class rooted_iterator final : public iterator {
 public:
  rooted_iterator(std::shared_ptr<const detail::node> root, uint64_t epoch, uint64_t start)
      : root_(std::move(root)), inner_(root_->iterate(epoch, start)) {}
  std::optional<element> next() override { return inner_->next(); }
  uint64_t position() const override { return inner_->position(); }

 private:
  std::shared_ptr<const detail::node> root_;  // declared first: destroyed after inner_
  std::unique_ptr<iterator> inner_;
};

void require(bool ok, const std::string& message) {
  if (!ok) throw std::invalid_argument(message);
}

/// A dataset as the trainer's batch source: its iterators are batch iterators already.
class dataset_batches final : public model::batch_source::impl {
 public:
  explicit dataset_batches(dataset d) : data(std::move(d)) {}
  std::unique_ptr<model::batch_iterator> iterate(uint64_t epoch) const override { return data.iterate(epoch); }
  model::batch_count count() const override {
    auto c = data.cardinality();
    return {c.is_known() ? c.n : -1, c.is_infinite()};
  }
  dataset data;
};

}  // namespace

dataset::dataset() : root_(detail::make_elements_node({}, "empty")) {}

dataset::dataset(std::shared_ptr<const detail::node> root) : root_(std::move(root)) {
  require(root_ != nullptr, "dataset: null node");
}

std::unique_ptr<iterator> dataset::iterate(uint64_t epoch, uint64_t start_position) const {
  return std::make_unique<rooted_iterator>(root_, epoch, start_position);
}

cardinality_info dataset::cardinality() const { return root_->cardinality(); }

std::string dataset::describe() const { return root_->describe(); }

dataset::operator model::batch_source() const {
  return model::batch_source{std::make_shared<dataset_batches>(*this)};
}

std::optional<dataset> as_dataset(const model::batch_source& source) {
  if (auto* d = dynamic_cast<const dataset_batches*>(&source.get())) return d->data;
  return std::nullopt;
}

dataset dataset::map(map_fn fn) const {
  require(static_cast<bool>(fn), "map: the function is empty");
  return dataset(detail::make_map_node(root_, std::move(fn)));
}

dataset dataset::map(seeded_map_fn fn, uint64_t seed) const {
  require(static_cast<bool>(fn), "map: the function is empty");
  return dataset(detail::make_seeded_map_node(root_, std::move(fn), seed));
}

dataset dataset::filter(predicate_fn pred) const {
  require(static_cast<bool>(pred), "filter: the predicate is empty");
  return dataset(detail::make_filter_node(root_, std::move(pred)));
}

dataset dataset::batch(int64_t batch_size, bool drop_remainder) const {
  require(batch_size >= 1, fmt::format("batch: batch_size must be >= 1, got {}", batch_size));
  return dataset(
      detail::make_batch_node(root_, static_cast<uint64_t>(batch_size), drop_remainder));
}

dataset dataset::shuffle(int64_t buffer_size, uint64_t seed, bool reshuffle_each_iteration) const {
  require(buffer_size >= 1, fmt::format("shuffle: buffer_size must be >= 1, got {}", buffer_size));
  return dataset(detail::make_shuffle_node(root_, static_cast<uint64_t>(buffer_size), seed,
                                           reshuffle_each_iteration));
}

dataset dataset::repeat(int64_t count) const {
  require(count >= -1,
          fmt::format("repeat: count must be -1 (forever) or >= 0, got {}", count));
  return dataset(detail::make_repeat_node(root_, count));
}

dataset dataset::shard(int64_t num_shards, int64_t index) const {
  require(num_shards >= 1, fmt::format("shard: num_shards must be >= 1, got {}", num_shards));
  require(index >= 0 && index < num_shards,
          fmt::format("shard: index must be in [0, num_shards) = [0, {}), got {}", num_shards,
                      index));
  return dataset(detail::make_shard_node(root_, static_cast<uint64_t>(num_shards),
                                         static_cast<uint64_t>(index)));
}

dataset dataset::take(int64_t count) const {
  require(count >= 0, fmt::format("take: count must be >= 0, got {}", count));
  return dataset(detail::make_take_node(root_, static_cast<uint64_t>(count)));
}

dataset dataset::skip(int64_t count) const {
  require(count >= 0, fmt::format("skip: count must be >= 0, got {}", count));
  return dataset(detail::make_skip_node(root_, static_cast<uint64_t>(count)));
}

dataset dataset::cache() const { return dataset(detail::make_cache_node(root_)); }

dataset dataset::prefetch(int64_t buffer_size) const {
  require(buffer_size >= 1, fmt::format("prefetch: buffer_size must be >= 1, got {}", buffer_size));
  return dataset(detail::make_prefetch_node(root_, static_cast<uint64_t>(buffer_size)));
}

dataset dataset::concatenate(const dataset& other) const {
  return dataset(detail::make_concat_node({root_, other.root_}));
}

}  // namespace actortrain::dataset
