// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
#include <actortrain/actors/ps/apply_policy.hpp>

#include <algorithm>
#include <map>

namespace actortrain {

namespace {

class apply_now_policy : public apply_policy {
 public:
  std::string describe() const override { return "apply_now"; }
  push_status on_push(push_request& req, const std::function<void(push_request&)>& apply) override {
    apply(req);
    return push_status::applied;
  }
};

// Synchronous rounds: pushes wait here, by step id, until their round closes.
class hold_for_round_policy : public apply_policy {
 public:
  std::string describe() const override { return "hold_for_round"; }
  bool applies_stale_gradients() const override { return false; }
  push_status on_push(push_request& req, const std::function<void(push_request&)>&) override {
    auto step = req.step;
    held_[step] = std::move(req);
    return push_status::held;
  }
  std::vector<applied_by> on_round(const round_request& req, const std::function<void(push_request&)>& apply) override {
    std::vector<push_request> use;
    for (auto& s : req.steps)
      if (auto i = held_.find(s); i != held_.end()) {
        use.push_back(std::move(i->second));
        held_.erase(i);
      }
    std::vector<applied_by> out;
    if (use.empty()) return out;
    int64_t examples = 0;
    for (auto& u : use) examples += u.example_count;
    // The mean over the round's global batch: steps that pushed nothing here count in the
    // denominator (their gradient for these rows is zero).
    auto total = static_cast<double>(std::max(req.example_count, examples));
    push_request merged;
    merged.f = req.f;
    merged.step = use.front().step;
    merged.example_count = static_cast<int64_t>(total);
    // Every step of the mean enters each partition's ledger, with its own batch's digest.
    for (auto& u : use) {
      if (&u != &use.front()) merged.more_steps.push_back(u.step);
      for (auto& m : u.more_steps) merged.more_steps.push_back(m);
      merged.digests.insert(merged.digests.end(), u.digests.begin(), u.digests.end());
    }
    std::map<partition_key, size_t> dense_at;
    struct row_ref {
      int64_t id;
      const model::matrix* rows;
      Eigen::Index row;
      float weight;
    };
    std::map<int32_t, std::vector<row_ref>> sparse;
    std::map<int32_t, uint64_t> sparse_read;
    for (auto& u : use) {
      auto w = static_cast<float>(static_cast<double>(u.example_count) / total);
      for (auto& d : u.dense) {
        auto [at, fresh] = dense_at.emplace(d.key, merged.dense.size());
        if (fresh) {
          merged.dense.push_back(dense_slice{d.key, d.read_version, tensor{model::matrix(w * *d.grad.value)}});
        } else {
          auto& m = merged.dense[at->second];
          // The merged tensor is this policy's alone until applied: write into it.
          const_cast<model::matrix&>(*m.grad.value) += w * *d.grad.value;
          m.read_version = std::min(m.read_version, d.read_version);
        }
      }
      for (auto& sp : u.sparse) {
        auto [rv, fresh] = sparse_read.emplace(sp.variable, sp.read_version);
        if (!fresh) rv->second = std::min(rv->second, sp.read_version);
        auto& refs = sparse[sp.variable];  // also with no rows: the table's partitions count the round
        for (size_t j = 0; j < sp.ids.size(); ++j)
          refs.push_back(row_ref{sp.ids[j], sp.rows.value.get(), static_cast<Eigen::Index>(j), w});
      }
      out.push_back(applied_by{u.step, u.f.worker, u.f.worker_generation, u.attempt});
    }
    for (auto& [var, refs] : sparse) {
      std::stable_sort(refs.begin(), refs.end(), [](const row_ref& a, const row_ref& b) { return a.id < b.id; });
      sparse_slice sl;
      sl.variable = var;
      sl.read_version = sparse_read[var];
      size_t unique = 0;
      for (size_t j = 0; j < refs.size(); ++j) unique += j == 0 || refs[j].id != refs[j - 1].id ? 1 : 0;
      auto width = refs.empty() ? 0 : refs.front().rows->cols();
      model::matrix rows = model::matrix::Zero(static_cast<Eigen::Index>(unique), width);
      for (size_t j = 0; j < refs.size(); ++j) {
        if (j == 0 || refs[j].id != refs[j - 1].id) sl.ids.push_back(refs[j].id);
        rows.row(static_cast<Eigen::Index>(sl.ids.size() - 1)) += refs[j].weight * refs[j].rows->row(refs[j].row);
      }
      sl.rows = tensor{std::move(rows)};
      merged.sparse.push_back(std::move(sl));
    }
    apply(merged);
    return out;
  }
  void clear() override { held_.clear(); }
  size_t held() const override { return held_.size(); }

 private:
  std::map<step_id, push_request> held_;
};

}  // namespace

std::unique_ptr<apply_policy> apply_now() { return std::make_unique<apply_now_policy>(); }
std::unique_ptr<apply_policy> hold_for_round() { return std::make_unique<hold_for_round_policy>(); }

}  // namespace actortrain
