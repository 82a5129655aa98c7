#include <actortrain/model/batch_rows.hpp>

#include <algorithm>
#include <cmath>

namespace actortrain::model {

namespace {

// Calls f(value) for every value of inputs `feeds` of `b` that is an id below `vocab`.
template <class Batch, class F>
void for_each_id(Batch& b, const std::vector<int32_t>& feeds, int64_t vocab, F&& f) {
  const auto limit = static_cast<double>(vocab);
  for (auto slot : feeds) {
    if (slot < 0 || static_cast<size_t>(slot) >= b.features.size()) continue;
    auto& x = b.features[static_cast<size_t>(slot)];
    for (Eigen::Index i = 0; i < x.size(); ++i) {
      const double v = x.data()[i];
      if (v >= 0 && v < limit && std::floor(v) == v) f(x.data()[i]);
    }
  }
}

}  // namespace

std::vector<int64_t> batch_row_ids(const batch& b, const std::vector<int32_t>& feeds, int64_t vocab) {
  std::vector<int64_t> ids;
  for_each_id(b, feeds, vocab, [&](float v) { ids.push_back(static_cast<int64_t>(v)); });
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

void renumber_rows(batch& b, const std::vector<int32_t>& feeds, const std::vector<int64_t>& ids) {
  // Every id of `ids` is below its last element + 1: values above it stay.
  const int64_t vocab = ids.empty() ? 0 : ids.back() + 1;
  for_each_id(b, feeds, vocab, [&](float& v) {
    auto id = static_cast<int64_t>(v);
    auto at = std::lower_bound(ids.begin(), ids.end(), id);
    if (at != ids.end() && *at == id) v = static_cast<float>(at - ids.begin());
  });
}

bool restore_row_ids(sparse_rows& g, const std::vector<int64_t>& ids) {
  for (auto p : g.ids)
    if (p < 0 || p >= static_cast<int64_t>(ids.size())) return false;
  for (auto& p : g.ids) p = ids[static_cast<size_t>(p)];
  return true;
}

}  // namespace actortrain::model
