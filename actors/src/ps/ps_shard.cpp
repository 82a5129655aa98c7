#include <actortrain/actors/core/errors.hpp>
#include <actortrain/actors/ps/ps_shard.hpp>
#include <actortrain/model/checkpoint/checkpoint.hpp>
#include <actortrain/model/fpu.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "../core/thread_name.hpp"

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

struct partition {
  std::string name;
  int64_t row_begin = 0;
  bool sparse = false;
  std::shared_ptr<model::matrix> value;
  std::shared_ptr<model::matrix> spare;  // an earlier version's buffer, for copy-on-write
  model::slot_block slots;
  uint64_t version = 0;
  step_ledger ledger;  // every step applied to it (ledger.hpp)
};

struct ps_state {
  std::shared_ptr<model::file_system> checkpoint_fs;  // shared checkpoints (null: posix)
  uint32_t index = 0;
  bool initialized = false;
  model::optimizer_ptr opt;
  std::shared_ptr<apply_policy> policy;
  std::map<partition_key, partition> parts;
  // Highest epochs seen, and per worker the lowest generation still accepted.
  fence seen;
  std::map<uint32_t, uint64_t> min_generation;
  // De-duplication: the step ids of the newest run seen that were applied at or above
  // its watermark (below it, everything is known applied).
  uint64_t run = 0;
  std::vector<uint64_t> watermark;  // per pipeline
  std::set<step_id> applied_steps;
  ps_stats stats;
  bool keep_log = false;
  // The state a keep_atom copied (values and slots per partition), for restore_atom.
  std::map<partition_key, std::pair<model::matrix, model::slot_block>> kept;
  // Idempotency of the coordinator's control requests, which it retries: the epochs of
  // the last init taken (the same ones again are a retry: acknowledged, not redone),
  // the newest (epochs, id) of keep, restore and hyperparameters taken, and the last
  // shared snapshot with the count of state changes it was written at.
  std::optional<fence> last_init;
  std::pair<fence, uint64_t> last_keep{}, last_restore{}, last_hyper{};
  std::pair<fence, uint64_t> last_snapshot{};
  uint64_t snapshot_changes = 0;
  uint64_t changes = 0;  // applies, inits and restores so far
  static inline const char* name = "ps_shard";
};

using self_ptr = ps_shard_actor::stateful_pointer<ps_state>;

bool same_epochs(const fence& a, const fence& b) {
  return a.coordinator_epoch == b.coordinator_epoch && a.recovery_epoch == b.recovery_epoch;
}

// True when (f, id) is newer than `last`: then `last` becomes it.
bool newer(std::pair<fence, uint64_t>& last, const fence& f, uint64_t id) {
  if (id == 0) return true;
  bool is_newer = epochs_older(last.first, f) || (same_epochs(last.first, f) && id > last.second);
  if (is_newer) last = {f, id};
  return is_newer;
}

// Rejects messages from the past; remembers newer epochs.
caf::error check_fence(ps_state& st, const fence& f) {
  if (epochs_older(f, st.seen)) {
    ++st.stats.fenced;
    return make_error(error_code::fenced_out,
                      fmt::format("ps shard {}: message of epochs ({}, {}) after ({}, {})", st.index,
                                  f.coordinator_epoch, f.recovery_epoch, st.seen.coordinator_epoch,
                                  st.seen.recovery_epoch));
  }
  if (f.worker != fence::no_worker) {
    auto i = st.min_generation.find(f.worker);
    if (i != st.min_generation.end() && f.worker_generation < i->second) {
      ++st.stats.fenced;
      return make_error(error_code::fenced_out,
                        fmt::format("ps shard {}: worker {} generation {} is fenced (now {})", st.index, f.worker,
                                    f.worker_generation, i->second));
    }
  }
  if (epochs_older(st.seen, f)) {
    st.seen.coordinator_epoch = f.coordinator_epoch;
    st.seen.recovery_epoch = f.recovery_epoch;
  }
  return caf::none;
}

using model::all_finite;

// True when `step` was applied before (or belongs to a run that is over). Moves the
// shard to a newer run and raises its watermark, forgetting the ids below it.
bool seen_before(ps_state& st, const push_request& req) {
  const auto& step = req.step;
  if (step.run < st.run) return true;
  if (step.run > st.run) {
    st.run = step.run;
    st.watermark.clear();
    st.applied_steps.clear();
  }
  if (st.watermark.size() < req.watermark.size()) st.watermark.resize(req.watermark.size(), 0);
  bool raised = false;
  for (size_t p = 0; p < req.watermark.size(); ++p)
    if (req.watermark[p] > st.watermark[p]) {
      st.watermark[p] = req.watermark[p];
      raised = true;
    }
  if (raised)
    for (auto i = st.applied_steps.begin(); i != st.applied_steps.end();)
      i = i->pipeline < st.watermark.size() && i->position < st.watermark[i->pipeline] ? st.applied_steps.erase(i)
                                                                                      : std::next(i);
  auto known = [&st](const step_id& s) {
    return (s.pipeline < st.watermark.size() && s.position < st.watermark[s.pipeline]) || st.applied_steps.count(s) > 0;
  };
  if (known(step)) return true;
  // An accumulated push is re-run whole (its task is), so any known step makes it a
  // duplicate.
  return std::any_of(req.more_steps.begin(), req.more_steps.end(), known);
}

// Validates a push completely; returns the first problem.
caf::error validate(const ps_state& st, const push_request& req) {
  auto bad = [&](std::string what) {
    return make_error(error_code::invalid_gradient,
                      fmt::format("ps shard {}, step {}: {}", st.index, to_string(req.step), what));
  };
  if (req.example_count <= 0) return bad(fmt::format("example count {} <= 0", req.example_count));
  if (req.digests.size() != 1 + req.more_steps.size())
    return bad(fmt::format("{} batch digest(s) for {} step(s)", req.digests.size(), 1 + req.more_steps.size()));
  for (auto& s : req.dense) {
    auto i = st.parts.find(s.key);
    if (i == st.parts.end())
      return bad(fmt::format("no partition {}:{} on this shard", s.key.variable, s.key.index));
    const auto& p = i->second;
    if (p.sparse) return bad(fmt::format("variable {} is sparse: push rows, not a dense slice", p.name));
    if (!s.grad.value) return bad(fmt::format("variable {}: empty gradient", p.name));
    if (s.grad.rows() != p.value->rows() || s.grad.cols() != p.value->cols())
      return bad(fmt::format("variable {} partition {}: gradient [{} x {}] for a partition of {}", p.name, s.key.index,
                             s.grad.rows(), s.grad.cols(), model::shape_string(*p.value)));
    if (!all_finite(*s.grad.value)) return bad(fmt::format("variable {}: gradient is not finite", p.name));
  }
  for (auto& s : req.sparse) {
    if (s.ids.empty()) continue;
    if (!s.rows.value || s.rows.rows() != static_cast<int64_t>(s.ids.size()))
      return bad(fmt::format("sparse variable {}: {} ids but {} gradient rows", s.variable, s.ids.size(), s.rows.rows()));
    if (!std::is_sorted(s.ids.begin(), s.ids.end()) || std::adjacent_find(s.ids.begin(), s.ids.end()) != s.ids.end())
      return bad(fmt::format("sparse variable {}: ids not sorted and unique", s.variable));
    for (auto id : s.ids) {
      bool found = false;
      for (auto& [k, p] : st.parts) {
        if (k.variable != s.variable) continue;
        if (id >= p.row_begin && id < p.row_begin + p.value->rows()) {
          if (s.rows.cols() != p.value->cols())
            return bad(fmt::format("variable {}: gradient rows of width {} for rows of width {}", p.name, s.rows.cols(),
                                   p.value->cols()));
          found = true;
          break;
        }
      }
      if (!found) return bad(fmt::format("sparse variable {}: row {} is not on this shard", s.variable, id));
    }
    if (!all_finite(*s.rows.value)) return bad(fmt::format("sparse variable {}: gradient is not finite", s.variable));
  }
  return caf::none;
}

// The partition's buffer to write the next version into: in place when nobody else
// holds the current one, else a copy (readers keep the version they pulled).
// The copy goes into the buffer of an earlier version once its readers let go of it, so
// a shard whose workers pull ahead copies but does not allocate.
model::matrix& writable(partition& p) {
  if (p.value.use_count() == 1) return *p.value;
  std::shared_ptr<model::matrix> next = std::move(p.spare);
  if (next && next.use_count() == 1)
    *next = *p.value;
  else
    next = std::make_shared<model::matrix>(*p.value);
  p.spare = std::move(p.value);
  p.value = std::move(next);
  return *p.value;
}

void record_staleness(ps_state& st, uint64_t version, uint64_t read_version) {
  auto lag = version >= read_version ? version - read_version : 0;
  auto& h = st.stats.staleness_histogram;
  h[std::min<size_t>(static_cast<size_t>(lag), h.size() - 1)] += 1;
}

// Applies every slice of `r` with the shard's optimizer (versions + 1); `max_lag` takes
// the largest version staleness among them.
// Records in `p`'s ledger every step of push `r` (validate checked the digests' count).
void record_steps(partition& p, const push_request& r) {
  p.ledger.record(r.step.run, r.step.pipeline, r.step.position, r.digests.at(0));
  for (size_t k = 0; k < r.more_steps.size(); ++k) {
    auto& s = r.more_steps[k];
    p.ledger.record(s.run, s.pipeline, s.position, r.digests.at(k + 1));
  }
}

void apply_slices(ps_state& st, push_request& r, uint64_t& max_lag) {
  ++st.changes;
  for (auto& s : r.dense) {
    auto& p = st.parts.at(s.key);
    max_lag = std::max(max_lag, p.version >= s.read_version ? p.version - s.read_version : 0);
    record_staleness(st, p.version, s.read_version);
    auto& w = writable(p);
    st.opt->apply_dense(w.data(), s.grad.value->data(), static_cast<size_t>(w.size()), p.slots);
    ++p.version;
    record_steps(p, r);
  }
  for (auto& s : r.sparse) {
    // Split the rows by partition (ids are sorted, partitions contiguous).
    for (auto& [k, p] : st.parts) {
      if (k.variable != s.variable) continue;
      std::vector<int64_t> local;
      std::vector<Eigen::Index> src;
      for (size_t j = 0; j < s.ids.size(); ++j)
        if (s.ids[j] >= p.row_begin && s.ids[j] < p.row_begin + p.value->rows()) {
          local.push_back(s.ids[j] - p.row_begin);
          src.push_back(static_cast<Eigen::Index>(j));
        }
      max_lag = std::max(max_lag, p.version >= s.read_version ? p.version - s.read_version : 0);
      record_staleness(st, p.version, s.read_version);
      model::matrix g(static_cast<Eigen::Index>(local.size()), s.rows.cols());
      for (size_t j = 0; j < src.size(); ++j) g.row(static_cast<Eigen::Index>(j)) = s.rows.value->row(src[j]);
      auto& w = writable(p);
      st.opt->apply_rows(w.data(), static_cast<size_t>(w.cols()), local.data(), local.size(), g.data(), p.slots);
      ++p.version;
      record_steps(p, r);
    }
  }
}

void count_applied(ps_state& st, const applied_by& a) {
  if (st.keep_log) st.stats.apply_log.push_back(a);
  ++st.stats.applied;
}

}  // namespace

std::unique_ptr<apply_policy> apply_now() { return std::make_unique<apply_now_policy>(); }
std::unique_ptr<apply_policy> hold_for_round() { return std::make_unique<hold_for_round_policy>(); }

namespace {

ps_shard_actor::behavior_type ps_shard_impl(self_ptr self, model::optimizer_ptr opt, ps_shard_options opts) {
  if (opts.detached) detail::name_this_thread(fmt::format("at.ps{}", opts.index));
  auto& st = self->state;
  st.index = opts.index;
  st.opt = std::move(opt);
  st.policy = opts.policy ? opts.policy : std::shared_ptr<apply_policy>(apply_now());
  st.stats.shard = opts.index;
  st.keep_log = opts.apply_log;
  st.checkpoint_fs = opts.checkpoint_fs;
  st.stats.staleness_histogram.assign(std::max<size_t>(2, opts.staleness_buckets), 0);
  self->set_exception_handler([self](caf::scheduled_actor*, std::exception_ptr& eptr) -> caf::error {
    return make_error(error_code::user_error, fmt::format("ps shard {}: {}", self->state.index, exception_text(eptr)));
  });
  auto not_ready = [self] {
    return make_error(error_code::not_initialized,
                      fmt::format("ps shard {} has not received its partitions", self->state.index));
  };
  return {
    [self](init_atom, init_request& req) -> caf::result<caf::ok_atom> {
      auto& st = self->state;
      if (auto err = check_fence(st, req.f)) return err;
      // Every init or restore comes under epochs of its own: the same ones again are a
      // retry (or a late original) of the one taken, which must not roll back what was
      // applied since.
      if (st.initialized && st.last_init && same_epochs(*st.last_init, req.f)) return caf::ok_atom::value;
      auto names = st.opt->slot_names();
      for (auto& p : req.partitions) {
        if (!p.value.value)
          return make_error(error_code::invalid_request, fmt::format("init: partition of {} without values", p.name));
        if (p.slots.size() != p.slot_names.size())
          return make_error(error_code::invalid_request, fmt::format("init: partition of {}: {} slots, {} slot names",
                                                                     p.name, p.slots.size(), p.slot_names.size()));
        for (auto& n : p.slot_names)
          if (std::find(names.begin(), names.end(), n) == names.end())
            return make_error(error_code::invalid_request,
                              fmt::format("init: partition of {}: the optimizer has no slot '{}'", p.name, n));
        for (auto& s : p.slots)
          if (!s.value || s.rows() != p.value.rows() || s.cols() != p.value.cols())
            return make_error(error_code::invalid_request,
                              fmt::format("init: a slot of {} is not shaped like its values {}", p.name,
                                          model::shape_string(*p.value.value)));
      }
      // Violations seen are never forgotten, not even by a restore.
      std::map<partition_key, std::vector<ledger_violation>> seen_violations;
      for (auto& [k, p] : st.parts) seen_violations[k] = p.ledger.violations();
      st.parts.clear();
      st.kept.clear();  // a restored state supersedes what was kept
      for (auto& p : req.partitions) {
        partition q;
        q.ledger = step_ledger{p.ledger};
        if (auto v = seen_violations.find(p.key); v != seen_violations.end()) q.ledger.keep_violations(v->second);
        q.name = p.name;
        q.row_begin = p.row_begin;
        q.sparse = p.sparse;
        q.value = std::make_shared<model::matrix>(p.value.take());
        q.slots = st.opt->make_slots(static_cast<size_t>(q.value->size()));
        for (size_t k = 0; k < p.slots.size(); ++k) {
          auto at = static_cast<size_t>(std::find(names.begin(), names.end(), p.slot_names[k]) - names.begin());
          const auto& m = *p.slots[k].value;
          std::copy(m.data(), m.data() + m.size(), q.slots.slots[at].begin());
        }
        q.slots.iterations = p.iterations;
        if (p.kept.value && p.kept.rows() == q.value->rows() && p.kept.cols() == q.value->cols()) {
          // The kept state of the restored run (a checkpoint of it): restore_atom's target.
          auto kept_slots = st.opt->make_slots(static_cast<size_t>(q.value->size()));
          for (size_t k = 0; k < p.kept_slots.size() && k < p.slot_names.size(); ++k) {
            auto at = static_cast<size_t>(std::find(names.begin(), names.end(), p.slot_names[k]) - names.begin());
            const auto& m = *p.kept_slots[k].value;
            if (at < kept_slots.slots.size() && m.size() == q.value->size())
              std::copy(m.data(), m.data() + m.size(), kept_slots.slots[at].begin());
          }
          kept_slots.iterations = p.kept_iterations;
          st.kept.emplace(p.key, std::make_pair(*p.kept.value, std::move(kept_slots)));
        }
        st.parts.emplace(p.key, std::move(q));
      }
      // The de-duplication state of the restored values (nothing remembered above the
      // watermark: a checkpoint is taken with no step in flight).
      st.applied_steps.clear();
      st.policy->clear();  // a round in progress is superseded by the restored state
      st.run = req.run;
      st.watermark = req.watermark;
      for (auto& [w, g] : req.min_generations) {
        auto& have = st.min_generation[w];
        have = std::max(have, g);
      }
      st.stats.applied = 0;
      st.stats.base = req.base;
      st.stats.apply_log.clear();
      st.initialized = true;
      st.last_init = req.f;
      ++st.changes;
      return caf::ok_atom::value;
    },
    [self, not_ready](pull_atom, const pull_request& req) -> caf::result<pull_reply> {
      auto& st = self->state;
      if (!st.initialized) return not_ready();
      // Coordinator epoch 0 marks an observer (the application reading variables): reads
      // change nothing, so they pass without raising or checking the fence.
      if (req.f.coordinator_epoch != 0)
        if (auto err = check_fence(st, req.f)) return err;
      pull_reply r;
      r.values.reserve(req.partitions.size());
      for (auto& k : req.partitions) {
        auto i = st.parts.find(k);
        if (i == st.parts.end())
          return make_error(error_code::invalid_request,
                            fmt::format("ps shard {}: no partition {}:{}", st.index, k.variable, k.index));
        r.values.push_back(partition_value{k, i->second.version, tensor{std::shared_ptr<const model::matrix>(i->second.value)}});
      }
      return r;
    },
    [self, not_ready](pull_rows_atom, const pull_rows_request& req) -> caf::result<rows_reply> {
      auto& st = self->state;
      if (!st.initialized) return not_ready();
      if (auto err = check_fence(st, req.f)) return err;
      rows_reply r;
      r.variable = req.variable;
      int64_t width = -1;
      for (auto& [k, p] : st.parts)
        if (k.variable == req.variable) width = p.value->cols();
      if (width < 0)
        return make_error(error_code::invalid_request,
                          fmt::format("ps shard {}: no rows of variable {}", st.index, req.variable));
      model::matrix rows(static_cast<Eigen::Index>(req.ids.size()), width);
      for (size_t j = 0; j < req.ids.size(); ++j) {
        auto id = req.ids[j];
        const partition* hit = nullptr;
        for (auto& [k, p] : st.parts)
          if (k.variable == req.variable && id >= p.row_begin && id < p.row_begin + p.value->rows()) hit = &p;
        if (!hit)
          return make_error(error_code::invalid_request,
                            fmt::format("ps shard {}: row {} of variable {} is not here", st.index, id, req.variable));
        rows.row(static_cast<Eigen::Index>(j)) = hit->value->row(id - hit->row_begin);
        r.version = std::max(r.version, hit->version);
      }
      r.ids = req.ids;
      r.rows = tensor{std::move(rows)};
      st.stats.rows_pulled += req.ids.size();
      return r;
    },
    [self, not_ready](push_atom, push_request& req) -> caf::result<push_reply> {
      auto& st = self->state;
      if (!st.initialized) return not_ready();
      if (auto err = check_fence(st, req.f)) return err;
      if (seen_before(st, req)) {
        ++st.stats.duplicates;
        return push_reply{push_status::duplicate, 0};
      }
      if (auto err = validate(st, req)) {
        ++st.stats.rejected;
        return err;
      }
      uint64_t max_lag = 0;
      applied_by who{req.step, req.f.worker, req.f.worker_generation, req.attempt};
      auto status = st.policy->on_push(req, [&st, &max_lag](push_request& r) { apply_slices(st, r, max_lag); });
      // Held or applied, the step id is taken: a re-run's push is a duplicate.
      st.applied_steps.insert(who.step);
      for (auto& s : req.more_steps) st.applied_steps.insert(s);
      if (status == push_status::applied) {
        count_applied(st, who);
        for (auto& s : req.more_steps) count_applied(st, applied_by{s, req.f.worker, req.f.worker_generation, req.attempt});
      }
      return push_reply{status, max_lag};
    },
    [self, not_ready](round_atom, const round_request& req) -> caf::result<round_reply> {
      auto& st = self->state;
      if (!st.initialized) return not_ready();
      if (auto err = check_fence(st, req.f)) return err;
      uint64_t max_lag = 0;
      auto used = st.policy->on_round(req, [&st, &max_lag](push_request& r) { apply_slices(st, r, max_lag); });
      for (auto& a : used) count_applied(st, a);
      return round_reply{req.round, used.size(), max_lag};
    },
    [self](hyper_atom, const hyperparams_request& req) -> caf::result<caf::ok_atom> {
      auto& st = self->state;
      if (auto err = check_fence(st, req.f)) return err;
      auto last = st.last_hyper;
      if (!newer(last, req.f, req.id)) return caf::ok_atom::value;  // a newer change was taken
      // Validate all first so a bad value changes nothing.
      auto probe = st.opt->clone();
      try {
        for (auto& [k, v] : req.values) probe->set_hyperparam(k, v);
      } catch (const std::invalid_argument& e) {
        return make_error(error_code::invalid_request, fmt::format("ps shard {}: {}", st.index, e.what()));
      }
      st.opt = std::move(probe);
      st.last_hyper = last;
      return caf::ok_atom::value;
    },
    [self](fence_atom, const fence_request& req) -> caf::result<fence> {
      auto& st = self->state;
      if (auto err = check_fence(st, req.f)) return err;
      if (req.f.worker != fence::no_worker) {
        auto& g = st.min_generation[req.f.worker];
        g = std::max(g, req.f.worker_generation);
      }
      fence now = st.seen;
      now.worker = req.f.worker;
      now.worker_generation = req.f.worker == fence::no_worker ? 0 : st.min_generation[req.f.worker];
      return now;
    },
    [self, not_ready](snapshot_atom, const fence_request& req) -> caf::result<ps_snapshot> {
      auto& st = self->state;
      if (!st.initialized) return not_ready();
      if (auto err = check_fence(st, req.f)) return err;
      ps_snapshot out;
      out.shard = st.index;
      auto names = st.opt->slot_names();
      for (auto& [k, p] : st.parts) {
        partition_snapshot s;
        s.key = k;
        s.name = p.name;
        s.row_begin = p.row_begin;
        s.version = p.version;
        s.iterations = p.slots.iterations;
        s.value = tensor{std::shared_ptr<const model::matrix>(p.value)};
        s.ledger = p.ledger.data();
        s.slot_names = names;
        for (auto& slot : p.slots.slots) {
          model::matrix m(p.value->rows(), p.value->cols());
          std::copy(slot.begin(), slot.end(), m.data());
          s.slots.push_back(tensor{std::move(m)});
        }
        out.partitions.push_back(std::move(s));
      }
      return out;
    },
    [self, not_ready](snapshot_atom, const fence_request& req, const checkpoint_target& t) -> caf::result<ps_files> {
      auto& st = self->state;
      if (!st.initialized) return not_ready();
      if (auto err = check_fence(st, req.f)) return err;
      // A retry of the last snapshot (or its late original) rewrites the same files only
      // while the state is the one they were first written at: never a newer state into
      // a checkpoint that may be committed already.
      if (req.id != 0 && same_epochs(st.last_snapshot.first, req.f) && st.last_snapshot.second == req.id &&
          st.snapshot_changes != st.changes)
        return make_error(error_code::invalid_request,
                          fmt::format("ps shard {}: snapshot {} repeated after the state changed", st.index, req.id));
      st.last_snapshot = {req.f, req.id};
      st.snapshot_changes = st.changes;
      auto& fs = st.checkpoint_fs ? *st.checkpoint_fs : model::posix_file_system();
      auto entry = [](const model::file_record& r) { return file_entry{r.name, r.bytes, r.crc32}; };
      ps_files out;
      out.shard = st.index;
      auto names = st.opt->slot_names();
      try {
        for (auto& [k, p] : st.parts) {
          model::partition_data d;
          d.row_begin = p.row_begin;
          d.row_end = p.row_begin + p.value->rows();
          d.values = *p.value;
          d.iterations = p.slots.iterations;
          for (size_t i = 0; i < names.size() && i < p.slots.slots.size(); ++i) {
            model::matrix m(p.value->rows(), p.value->cols());
            std::copy(p.slots.slots[i].begin(), p.slots.slots[i].end(), m.data());
            d.slots[names[i]] = std::move(m);
          }
          auto rec = model::write_partition_arrays(fs, t.dir, p.name, static_cast<size_t>(k.index), d);
          partition_files f{k, p.name, rec.row_begin, rec.row_end, rec.iterations, entry(rec.values), {}, {},
                            p.ledger.data()};
          for (auto& [slot, file] : rec.slots) {
            f.slot_names.push_back(slot);
            f.slots.push_back(entry(file));
          }
          out.partitions.push_back(std::move(f));
        }
      } catch (const std::exception& e) {
        return make_error(error_code::checkpoint_failed, fmt::format("ps shard {}: {}", st.index, e.what()));
      }
      return out;
    },
    [self, not_ready](keep_atom, const fence_request& req) -> caf::result<caf::ok_atom> {
      auto& st = self->state;
      if (!st.initialized) return not_ready();
      if (auto err = check_fence(st, req.f)) return err;
      if (!newer(st.last_keep, req.f, req.id)) return caf::ok_atom::value;  // done once already
      st.kept.clear();
      for (auto& [k, p] : st.parts) st.kept.emplace(k, std::make_pair(*p.value, p.slots));
      return caf::ok_atom::value;
    },
    [self, not_ready](restore_atom, const fence_request& req) -> caf::result<caf::ok_atom> {
      auto& st = self->state;
      if (!st.initialized) return not_ready();
      if (auto err = check_fence(st, req.f)) return err;
      auto last = st.last_restore;
      if (!newer(last, req.f, req.id)) return caf::ok_atom::value;  // done once already
      if (st.kept.size() != st.parts.size())
        return make_error(error_code::invalid_request, fmt::format("ps shard {} holds no kept state{}", st.index,
                                                                   st.kept.empty() ? "" : " for its partitions"));
      for (auto& [k, p] : st.parts) {
        auto i = st.kept.find(k);
        if (i == st.kept.end())
          return make_error(error_code::invalid_request,
                            fmt::format("ps shard {}: no kept state of partition {}:{}", st.index, k.variable, k.index));
      }
      for (auto& [k, p] : st.parts) {
        auto& [value, slots] = st.kept.at(k);
        p.value = std::make_shared<model::matrix>(value);  // readers of the old buffer keep it
        p.spare.reset();
        p.slots = slots;
        ++p.version;  // new values: a reader's cached version must not match them
      }
      st.last_restore = last;
      ++st.changes;
      return caf::ok_atom::value;
    },
    [self](ledger_atom) -> ps_ledgers {
      auto& st = self->state;
      ps_ledgers out;
      out.shard = st.index;
      for (auto& [k, p] : st.parts)
        out.partitions.push_back(partition_ledger{st.index, p.name, p.row_begin, p.row_begin + p.value->rows(),
                                                  p.ledger.data()});
      return out;
    },
    [self](stats_atom) -> ps_stats {
      auto s = self->state.stats;
      s.remembered = self->state.applied_steps.size();
      s.held = self->state.policy->held();
      s.seen = self->state.seen;
      for (auto& [w, g] : self->state.min_generation) s.min_generations.emplace_back(w, g);
      for (auto& [k, p] : self->state.parts) s.versions.push_back(partition_value{k, p.version, tensor{}});
      return s;
    },
  };
}

}  // namespace

ps_shard_actor spawn_ps_shard(caf::actor_system& sys, const model::optimizer& opt, ps_shard_options opts) {
  bool detached = opts.detached;
  if (detached) return sys.spawn<caf::detached>(ps_shard_impl, opt.clone(), std::move(opts));
  return sys.spawn(ps_shard_impl, opt.clone(), std::move(opts));
}

}  // namespace actortrain
