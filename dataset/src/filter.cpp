// filter: keeps the elements a predicate accepts. No random access; seeking replays.

#include "node.hpp"

namespace actortrain::dataset::detail {
namespace {

class filter_node final : public node {
 public:
  filter_node(node_ptr upstream, predicate_fn pred)
      : upstream_(std::move(upstream)), pred_(std::move(pred)) {}

  node_kind kind() const override { return node_kind::filter; }
  cardinality_info cardinality() const override { return cardinality_info::unknown(); }
  std::string label() const override { return "filter"; }
  std::vector<node_ptr> inputs() const override { return {upstream_}; }
  node_ptr rebuild(std::vector<node_ptr> in) const override {
    return std::make_shared<filter_node>(std::move(in.at(0)), pred_);
  }

 protected:
  std::unique_ptr<iterator> stream(uint64_t epoch, uint64_t start) const override {
    // Which upstream element is the start-th kept one is only known by replaying.
    return replay_to(std::make_unique<filter_iterator>(*this, upstream_->iterate(epoch, 0)), start);
  }

 private:
  class filter_iterator final : public iterator {
   public:
    filter_iterator(const filter_node& n, std::unique_ptr<iterator> up)
        : node_(n), up_(std::move(up)) {}
    std::optional<element> next() override {
      while (auto e = up_->next()) {
        if (node_.pred_(*e)) {
          ++position_;
          return e;
        }
      }
      return std::nullopt;
    }
    uint64_t position() const override { return position_; }
    void rebase(uint64_t start) { position_ = start; }

   private:
    const filter_node& node_;
    std::unique_ptr<iterator> up_;
    uint64_t position_ = 0;
  };

  node_ptr upstream_;
  predicate_fn pred_;
};

}  // namespace

node_ptr make_filter_node(node_ptr upstream, predicate_fn pred) {
  return std::make_shared<filter_node>(std::move(upstream), std::move(pred));
}

}  // namespace actortrain::dataset::detail
