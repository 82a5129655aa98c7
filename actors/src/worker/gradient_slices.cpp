// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
#include "gradient_slices.hpp"

#include <string>

#include <fmt/format.h>

namespace actortrain {

std::vector<push_request> slice_gradients(const model::placement& pl, model::gradient_store& grads,
                                          const std::vector<uint64_t>& read_version,
                                          std::vector<std::shared_ptr<const model::matrix>>& sent,
                                          const push_header& h) {
  const int nps = pl.num_ps();
  std::vector<push_request> reqs(static_cast<size_t>(nps));
  for (auto& r : reqs) {
    r.f = h.f;
    r.step = h.steps.front();
    r.more_steps.assign(h.steps.begin() + 1, h.steps.end());
    r.example_count = h.example_count;
    r.watermark = h.watermark;
    r.attempt = h.attempt;
    r.digests = h.digests;
  }
  for (auto& vp : pl.variables()) {
    auto v = static_cast<size_t>(vp.variable);
    if (grads.is_sparse[v]) {
      auto& g = grads.sparse[v];
      std::vector<int> slice_of(static_cast<size_t>(nps), -1);
      auto slice_on = [&](int ps) -> sparse_slice& {
        auto& at = slice_of[static_cast<size_t>(ps)];
        auto& out = reqs[static_cast<size_t>(ps)].sparse;
        if (at < 0) {
          at = static_cast<int>(out.size());
          sparse_slice s;
          s.variable = vp.variable;
          s.read_version = read_version[v];
          out.push_back(std::move(s));
        }
        return out[static_cast<size_t>(at)];
      };
      // The touched rows per shard (ids stay sorted: partitions are contiguous and
      // grouped in order).
      std::vector<std::vector<size_t>> rows_on(static_cast<size_t>(nps));
      if (!g.ids.empty())
        for (auto& grp : pl.group_rows(vp.variable, g.ids))
          rows_on[static_cast<size_t>(grp.ps)].insert(rows_on[static_cast<size_t>(grp.ps)].end(), grp.positions.begin(),
                                                       grp.positions.end());
      for (auto& part : vp.partitions) {
        auto& s = slice_on(part.ps);
        if (s.rows.value) continue;  // this shard's slice is made
        const auto& mine = rows_on[static_cast<size_t>(part.ps)];
        model::matrix rows(static_cast<Eigen::Index>(mine.size()), vp.shape.cols);
        for (size_t j = 0; j < mine.size(); ++j) {
          s.ids.push_back(g.ids[mine[j]]);
          rows.row(static_cast<Eigen::Index>(j)) = g.rows.row(static_cast<Eigen::Index>(mine[j]));
        }
        s.rows = tensor{std::move(rows)};
      }
    } else if (vp.partitions.size() == 1) {
      auto& part = vp.partitions[0];
      tensor g{std::move(grads.dense[v])};
      tensor previous{std::move(sent[v])};
      grads.dense[v] = previous.value && previous.value.use_count() == 1 ? previous.take()
                                                                         : model::matrix(vp.shape.rows, vp.shape.cols);
      sent[v] = g.value;
      reqs[static_cast<size_t>(part.ps)].dense.push_back(
        dense_slice{partition_key{vp.variable, part.index}, read_version[v], std::move(g)});
    } else {
      for (auto& part : vp.partitions)
        reqs[static_cast<size_t>(part.ps)].dense.push_back(
          dense_slice{partition_key{vp.variable, part.index}, read_version[v],
                      tensor{model::matrix(grads.dense[v].middleRows(part.row_begin, part.rows()))}});
    }
  }
  return reqs;
}

failure gradient_mean::add(const model::placement& pl, const model::gradient_store& grads, int64_t examples,
                           const std::vector<uint64_t>& read_version) {
  auto n = grads.size();
  for (size_t v = 0; v < n; ++v)
    if (grads.is_sparse[v]) {
      std::string name = std::to_string(v);
      for (auto& vp : pl.variables())
        if (static_cast<size_t>(vp.variable) == v) name = vp.name;
      return failure{error_code::invalid_request,
                     fmt::format("push_every > 1 with {}, an embedding table pulled by row (push_every takes dense "
                                 "variables only)",
                                 name)};
    }
  auto w = static_cast<float>(examples);
  if (steps_ == 0) {
    sum_.resize(n);
    for (size_t v = 0; v < n; ++v) sum_[v] = grads.dense[v] * w;
    read_version_ = read_version;
    examples_ = 0;
  } else {
    for (size_t v = 0; v < n; ++v) sum_[v] += grads.dense[v] * w;
  }
  examples_ += examples;
  ++steps_;
  return {};
}

void gradient_mean::take(model::gradient_store& grads, std::vector<uint64_t>& read_version) {
  auto inv = 1.0f / static_cast<float>(examples_);
  for (size_t v = 0; v < sum_.size(); ++v) grads.dense[v] = sum_[v] * inv;
  read_version = read_version_;
  steps_ = 0;
}

}  // namespace actortrain
