// map: applies a function to every element (keeps random access and cardinality).

#include "node.hpp"

#include <actortrain/model/random.hpp>

#include <fmt/format.h>

namespace actortrain::dataset::detail {
namespace {

class map_node final : public node {
 public:
  map_node(node_ptr upstream, map_fn fn, seeded_map_fn seeded_fn, uint64_t seed)
      : upstream_(std::move(upstream)),
        fn_(std::move(fn)),
        seeded_fn_(std::move(seeded_fn)),
        seed_(seed) {}

  node_kind kind() const override { return node_kind::map; }
  cardinality_info cardinality() const override { return upstream_->cardinality(); }
  std::string label() const override {
    return seeded_fn_ ? fmt::format("map(seed={})", seed_) : "map";
  }
  std::vector<node_ptr> inputs() const override { return {upstream_}; }
  node_ptr rebuild(std::vector<node_ptr> in) const override {
    return std::make_shared<map_node>(std::move(in.at(0)), fn_, seeded_fn_, seed_);
  }

  element apply(element e, uint64_t epoch, uint64_t position) const {
    if (seeded_fn_) return seeded_fn_(std::move(e), model::draw(seed_, position, epoch));
    return fn_(std::move(e));
  }

  std::unique_ptr<accessor> access(uint64_t epoch) const override {
    auto up = upstream_->access(epoch);
    if (!up) return nullptr;
    return std::make_unique<map_accessor>(*this, std::move(up), epoch);
  }

 protected:
  std::unique_ptr<iterator> stream(uint64_t epoch, uint64_t start) const override {
    return std::make_unique<map_iterator>(*this, upstream_->iterate(epoch, start), epoch, start);
  }

 private:
  class map_accessor final : public accessor {
   public:
    map_accessor(const map_node& n, std::unique_ptr<accessor> up, uint64_t epoch)
        : node_(n), up_(std::move(up)), epoch_(epoch) {}
    uint64_t size() const override { return up_->size(); }
    element get(uint64_t i) override { return node_.apply(up_->get(i), epoch_, i); }

   private:
    const map_node& node_;
    std::unique_ptr<accessor> up_;
    uint64_t epoch_;
  };

  class map_iterator final : public iterator {
   public:
    map_iterator(const map_node& n, std::unique_ptr<iterator> up, uint64_t epoch, uint64_t start)
        : node_(n), up_(std::move(up)), epoch_(epoch), position_(start) {}
    std::optional<element> next() override {
      auto e = up_->next();
      if (!e) return std::nullopt;
      element out = node_.apply(std::move(*e), epoch_, position_);
      ++position_;
      return out;
    }
    uint64_t position() const override { return position_; }

   private:
    const map_node& node_;
    std::unique_ptr<iterator> up_;
    uint64_t epoch_;
    uint64_t position_;
  };

  node_ptr upstream_;
  map_fn fn_;
  seeded_map_fn seeded_fn_;
  uint64_t seed_;
};

}  // namespace

node_ptr make_map_node(node_ptr upstream, map_fn fn) {
  return std::make_shared<map_node>(std::move(upstream), std::move(fn), seeded_map_fn{}, 0);
}

node_ptr make_seeded_map_node(node_ptr upstream, seeded_map_fn fn, uint64_t seed) {
  return std::make_shared<map_node>(std::move(upstream), map_fn{}, std::move(fn), seed);
}

}  // namespace actortrain::dataset::detail
