#include <actortrain/model/batch_rows.hpp>
#include <actortrain/model/layers/embedding.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace actortrain::model {

namespace {

// Calls f(id) for every value of inputs `feeds` of `b` that is an id below `vocab`: an
// integer >= 0 of an input given as ids, or a float one below 2^24 (past it, floats
// are not exact).
template <class F>
void for_each_id(const batch& b, const std::vector<int32_t>& feeds, int64_t vocab, F&& f) {
  const auto limit = static_cast<double>(std::min(vocab, layers::max_float_id));
  for (auto slot : feeds) {
    if (slot < 0 || static_cast<size_t>(slot) >= b.features.size()) continue;
    const auto k = static_cast<size_t>(slot);
    if (b.is_ids(k)) {
      const auto& x = b.ids[k];
      for (Eigen::Index i = 0; i < x.size(); ++i)
        if (x.data()[i] >= 0 && x.data()[i] < vocab) f(x.data()[i]);
      continue;
    }
    const auto& x = b.features[k];
    for (Eigen::Index i = 0; i < x.size(); ++i) {
      const double v = x.data()[i];
      if (v >= 0 && v < limit && std::floor(v) == v) f(static_cast<int64_t>(v));
    }
  }
}

// Where `id` is in `ids` (sorted, unique), or -1.
int64_t position(const std::vector<int64_t>& ids, int64_t id) {
  auto at = std::lower_bound(ids.begin(), ids.end(), id);
  return at != ids.end() && *at == id ? at - ids.begin() : -1;
}

}  // namespace

std::vector<int64_t> batch_row_ids(const batch& b, const std::vector<int32_t>& feeds, int64_t vocab) {
  std::vector<int64_t> ids;
  for_each_id(b, feeds, vocab, [&](int64_t v) { ids.push_back(v); });
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

void renumber_rows(batch& b, const std::vector<int32_t>& feeds, const std::vector<int64_t>& ids) {
  for (auto slot : feeds) {
    if (slot < 0 || static_cast<size_t>(slot) >= b.features.size()) continue;
    const auto k = static_cast<size_t>(slot);
    if (b.is_ids(k)) {
      const auto& x = b.ids[k];
      auto& out = b.features[k];
      out.resize(x.rows(), x.cols());
      for (Eigen::Index i = 0; i < x.size(); ++i) {
        auto p = position(ids, x.data()[i]);
        // An id of no row keeps its value (the layer names it); a negative one so stays
        // negative whatever its size.
        out.data()[i] = p >= 0 ? static_cast<float>(p) : static_cast<float>(x.data()[i]);
      }
      b.ids[k].resize(x.rows(), 0);
      continue;
    }
    auto& x = b.features[k];
    for (Eigen::Index i = 0; i < x.size(); ++i) {
      const double v = x.data()[i];
      if (v < 0 || v >= static_cast<double>(layers::max_float_id) || std::floor(v) != v) continue;
      auto p = position(ids, static_cast<int64_t>(v));
      if (p >= 0) x.data()[i] = static_cast<float>(p);
    }
  }
}

void ids_as_floats(batch& b, const std::vector<bool>& keep) {
  for (size_t k = 0; k < b.ids.size(); ++k) {
    if (!b.is_ids(k) || (k < keep.size() && keep[k])) continue;
    const auto& x = b.ids[k];
    for (Eigen::Index i = 0; i < x.size(); ++i)
      if (x.data()[i] <= -layers::max_float_id || x.data()[i] >= layers::max_float_id)
        throw std::invalid_argument(fmt::format(
          "input {} row {} column {}: id {} is {} 2^24, where floats are no longer exact{}", k, i / x.cols(),
          i % x.cols(), x.data()[i], x.data()[i] < 0 ? "at most minus" : "at least",
          x.data()[i] < 0 ? "" : ": only a table keyed by id (dynamic_embedding) takes such ids"));
    if (k < b.features.size()) b.features[k] = x.cast<float>();
    b.ids[k].resize(x.rows(), 0);
  }
}

bool restore_row_ids(sparse_rows& g, const std::vector<int64_t>& ids) {
  for (auto p : g.ids)
    if (p < 0 || p >= static_cast<int64_t>(ids.size())) return false;
  for (auto& p : g.ids) p = ids[static_cast<size_t>(p)];
  return true;
}

}  // namespace actortrain::model
