// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
#include "shard_store.hpp"

#include <actortrain/model/checkpoint/checkpoint.hpp>
#include <actortrain/model/fpu.hpp>
#include <actortrain/model/partitioner.hpp>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include <sched.h>

namespace actortrain {

namespace {

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

// Records in `ledger` every step of push `r` (validate checked the digests' count).
void record_steps(step_ledger& ledger, const push_request& r) {
  ledger.record(r.step.run, r.step.pipeline, r.step.position, r.digests.at(0));
  for (size_t k = 0; k < r.more_steps.size(); ++k) {
    auto& s = r.more_steps[k];
    ledger.record(s.run, s.pipeline, s.position, r.digests.at(k + 1));
  }
}

using model::all_finite;

// Rows of a dynamic table as they travel (partition_state, its kept_state) made a table
// snapshot: `slots` named by `slot_names`, put in the optimizer's order `names` (all of
// them, or none: fresh). Throws std::invalid_argument for sizes that disagree.
model::dynamic_table::snapshot rows_of(int64_t dim, const tensor& value, const std::vector<std::string>& slot_names,
                                       const std::vector<tensor>& slots, const std::vector<int64_t>& ids,
                                       const std::vector<int64_t>& last_update,
                                       const std::vector<model::waiting_id>& waiting, int64_t iterations,
                                       const std::vector<std::string>& names, const std::vector<float>& slot_init) {
  const auto n = static_cast<int64_t>(ids.size());
  const int64_t have = value.value ? value.rows() : 0;
  if (have != n || (n > 0 && value.cols() != dim) || last_update.size() != ids.size())
    throw std::invalid_argument(fmt::format("{} ids and {} last updates for rows [{} x {}] of width {}", ids.size(),
                                            last_update.size(), have, value.value ? value.cols() : 0, dim));
  model::dynamic_table::snapshot s;
  s.dim = dim;
  s.iterations = iterations;
  s.ids = ids;
  s.last_update = last_update;
  s.waiting = waiting;
  if (n > 0) s.values.assign(value.value->data(), value.value->data() + value.value->size());
  for (size_t k = 0; k < names.size(); ++k) {
    auto at = std::find(slot_names.begin(), slot_names.end(), names[k]) - slot_names.begin();
    if (static_cast<size_t>(at) >= slots.size()) {  // not sent: the slot starts fresh
      s.slots.emplace_back(static_cast<size_t>(n * dim), slot_init.at(k));
      continue;
    }
    const auto& m = slots[static_cast<size_t>(at)];
    if (n > 0 && (!m.value || m.rows() != n || m.cols() != dim))
      throw std::invalid_argument(fmt::format("slot '{}' is not shaped like the rows", names[k]));
    s.slots.emplace_back(n > 0 ? std::vector<float>(m.value->data(), m.value->data() + m.value->size())
                               : std::vector<float>{});
  }
  return s;
}

// A table snapshot's rows into `value`, `slots` (in the optimizer's order), ids, last
// updates and waiting ids of a partition_state or kept_state.
template <class State>
void put_rows(const model::dynamic_table::snapshot& s, State& out) {
  const auto n = static_cast<Eigen::Index>(s.ids.size());
  out.value = tensor{model::matrix(Eigen::Map<const model::matrix>(s.values.data(), n, s.dim))};
  out.slots.clear();
  for (auto& slot : s.slots) out.slots.push_back(tensor{model::matrix(Eigen::Map<const model::matrix>(slot.data(), n, s.dim))});
  out.iterations = s.iterations;
  out.ids = s.ids;
  out.last_update = s.last_update;
  out.waiting = s.waiting;
}

}  // namespace

shard_store::shard_store(const model::optimizer& opt, options opts)
    : index_(opts.index),
      opts_(opt, opts.groups),
      policy_(opts.policy ? std::move(opts.policy) : std::shared_ptr<apply_policy>(apply_now())),
      compensation_(policy_->applies_stale_gradients() ? opts.compensation : staleness_compensation::none()),
      keep_log_(opts.apply_log),
      variables_(std::move(opts.variables)) {
  stats_.shard = opts.index;
  stats_.staleness_histogram.assign(std::max<size_t>(2, opts.staleness_buckets), 0);
}

failure shard_store::not_ready() const {
  return failure{error_code::not_initialized, fmt::format("ps shard {} has not received its partitions", index_)};
}

// Rejects messages from the past; remembers newer epochs.
failure shard_store::check_fence(const fence& f) {
  if (epochs_older(f, seen_)) {
    ++stats_.fenced;
    return failure{error_code::fenced_out,
                   fmt::format("ps shard {}: message of epochs ({}, {}) after ({}, {})", index_, f.coordinator_epoch,
                               f.recovery_epoch, seen_.coordinator_epoch, seen_.recovery_epoch)};
  }
  if (f.worker != fence::no_worker) {
    auto i = min_generation_.find(f.worker);
    if (i != min_generation_.end() && f.worker_generation < i->second) {
      ++stats_.fenced;
      return failure{error_code::fenced_out, fmt::format("ps shard {}: worker {} generation {} is fenced (now {})",
                                                         index_, f.worker, f.worker_generation, i->second)};
    }
  }
  if (epochs_older(seen_, f)) {
    seen_.coordinator_epoch = f.coordinator_epoch;
    seen_.recovery_epoch = f.recovery_epoch;
  }
  return {};
}

// True when `step` was applied before (or belongs to a run that is over). Moves the
// shard to a newer run and raises its watermark, forgetting the ids below it.
bool shard_store::seen_before(const push_request& req) {
  const auto& step = req.step;
  if (step.run < run_) return true;
  if (step.run > run_) {
    run_ = step.run;
    watermark_.clear();
    applied_steps_.clear();
  }
  if (watermark_.size() < req.watermark.size()) watermark_.resize(req.watermark.size(), 0);
  // Forgets the ids a raised watermark now covers: one range of the ordered set per
  // pipeline raised (a walk over every id remembered cost each push time in proportion
  // to the workers: 40% of a 128-worker simulation). Only ids of this run are held.
  for (size_t p = 0; p < req.watermark.size(); ++p)
    if (req.watermark[p] > watermark_[p]) {
      watermark_[p] = req.watermark[p];
      const auto pipeline = static_cast<uint32_t>(p);
      applied_steps_.erase(applied_steps_.lower_bound(step_id{run_, pipeline, 0}),
                           applied_steps_.lower_bound(step_id{run_, pipeline, watermark_[p]}));
    }
  auto known = [this](const step_id& s) {
    return (s.pipeline < watermark_.size() && s.position < watermark_[s.pipeline]) || applied_steps_.count(s) > 0;
  };
  if (known(step)) return true;
  // An accumulated push is re-run whole (its task is), so any known step makes it a
  // duplicate.
  return std::any_of(req.more_steps.begin(), req.more_steps.end(), known);
}


// Validates a push completely; returns the first problem.
failure shard_store::validate(const push_request& req) const {
  auto bad = [&](std::string what) {
    return failure{error_code::invalid_gradient,
                   fmt::format("ps shard {}, step {}: {}", index_, to_string(req.step), what)};
  };
  if (req.example_count <= 0) return bad(fmt::format("example count {} <= 0", req.example_count));
  if (req.digests.size() != 1 + req.more_steps.size())
    return bad(fmt::format("{} batch digest(s) for {} step(s)", req.digests.size(), 1 + req.more_steps.size()));
  for (auto& s : req.dense) {
    auto i = parts_.find(s.key);
    if (i == parts_.end())
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
      const partition* p = holder(s.variable, id);
      if (!p) return bad(fmt::format("sparse variable {}: row {} is not on this shard", s.variable, id));
      if (s.rows.cols() != p->value->cols())
        return bad(fmt::format("variable {}: gradient rows of width {} for rows of width {}", p->name, s.rows.cols(),
                               p->value->cols()));
    }
    if (!all_finite(*s.rows.value)) return bad(fmt::format("sparse variable {}: gradient is not finite", s.variable));
  }
  return {};
}


const shard_store::partition* shard_store::holder(int32_t variable, int64_t id) const {
  for (auto i = parts_.lower_bound(partition_key{variable, 0}); i != parts_.end() && i->first.variable == variable;
       ++i) {
    const auto& p = i->second;
    if (p.table) {
      if (id >= 0 && model::dynamic_owner(id, p.partitions) == i->first.index) return &p;
    } else if (id >= p.row_begin && id < p.row_begin + p.value->rows()) {
      return &p;
    }
  }
  return nullptr;
}

// The partition's buffer to write the next version into: in place when nobody else
// holds the current one, else a copy (readers keep the version they pulled).
// The copy goes into the buffer of an earlier version once its readers let go of it, so
// a shard whose workers pull ahead copies but does not allocate.
model::matrix& shard_store::writable(partition& p) {
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


void shard_store::record_staleness(uint64_t version, uint64_t read_version) {
  auto lag = version >= read_version ? version - read_version : 0;
  auto& h = stats_.staleness_histogram;
  h[std::min<size_t>(static_cast<size_t>(lag), h.size() - 1)] += 1;
}


// Applies every slice of `r` with the shard's optimizer (versions + 1); `max_lag` takes
// the largest version staleness among them.
void shard_store::apply_slices(push_request& r, uint64_t& max_lag) {
  ++changes_;
  for (auto& s : r.dense) {
    auto& p = parts_.at(s.key);
    max_lag = std::max(max_lag, p.version >= s.read_version ? p.version - s.read_version : 0);
    record_staleness(p.version, s.read_version);
    double lr_scale = 1;
    const float* g = p.comp.before(*p.value, p.version, s.read_version, *s.grad.value, lr_scale);
    auto& w = writable(p);
    const auto& opt = opts_.at(p.optimizer);
    if (float* ahead = p.comp.ahead(w))
      opt.apply_dense_ahead(w.data(), g, static_cast<size_t>(w.size()), p.slots, lr_scale,
                            static_cast<float>(p.comp.horizon()), ahead);
    else
      opt.apply_dense(w.data(), g, static_cast<size_t>(w.size()), p.slots, lr_scale);
    ++p.version;
    p.comp.after(w, p.version);
    record_steps(p.ledger, r);
  }
  for (auto& s : r.sparse) {
    // Split the rows by partition (ids are sorted, partitions contiguous).
    for (auto& [k, p] : parts_) {
      if (k.variable != s.variable) continue;
      if (p.table) {  // one partition per shard: every id of the slice is its (validate)
        max_lag = std::max(max_lag, p.version >= s.read_version ? p.version - s.read_version : 0);
        record_staleness(p.version, s.read_version);
        const float* g = s.rows.value ? s.rows.value->data() : nullptr;
        p.table->apply(opts_.at(p.optimizer), s.ids.data(), s.ids.size(), g);
        ++p.version;
        record_steps(p.ledger, r);
        continue;
      }
      std::vector<int64_t> local;
      std::vector<Eigen::Index> src;
      for (size_t j = 0; j < s.ids.size(); ++j)
        if (s.ids[j] >= p.row_begin && s.ids[j] < p.row_begin + p.value->rows()) {
          local.push_back(s.ids[j] - p.row_begin);
          src.push_back(static_cast<Eigen::Index>(j));
        }
      max_lag = std::max(max_lag, p.version >= s.read_version ? p.version - s.read_version : 0);
      record_staleness(p.version, s.read_version);
      model::matrix g(static_cast<Eigen::Index>(local.size()), s.rows.cols());
      for (size_t j = 0; j < src.size(); ++j) g.row(static_cast<Eigen::Index>(j)) = s.rows.value->row(src[j]);
      auto& w = writable(p);
      opts_.at(p.optimizer).apply_rows(w.data(), static_cast<size_t>(w.cols()), local.data(), local.size(), g.data(), p.slots);
      ++p.version;
      record_steps(p.ledger, r);
    }
  }
}


void shard_store::count_applied(const applied_by& a) {
  if (keep_log_) stats_.apply_log.push_back(a);
  ++stats_.applied;
}

// -- control requests ----------------------------------------------------------------

// A dynamic table's partition from its state (its rows, from a checkpoint or none) and
// its variable's spec; `kept` takes the kept state it carries. Every id, of the rows, the
// waiting list and the kept state, must be this partition's, and appear once.
failure shard_store::make_table(const partition_state& p, partition& q,
                                std::optional<model::dynamic_table::snapshot>& kept) const {
  auto invalid = [&](std::string what) {
    return failure{error_code::invalid_request, fmt::format("init: dynamic table {}: {}", p.name, what)};
  };
  if (p.base >= 0 || !p.removed.empty())
    return invalid(fmt::format("an increment over step {} where every row is needed", p.base));
  auto spec = std::find_if(variables_.begin(), variables_.end(), [&](auto& v) { return v.name == p.name; });
  if (spec == variables_.end()) return invalid("the shard's model has no such variable");
  if (!spec->dynamic) return invalid("the shard's model declares it with fixed rows");
  if (p.partitions < 1 || p.key.index < 0 || p.key.index >= p.partitions)
    return invalid(fmt::format("partition {} of {}", p.key.index, p.partitions));
  if (p.value.value && p.value.cols() != spec->shape.cols)
    return invalid(fmt::format("rows of width {} sent for width {}", p.value.cols(), spec->shape.cols));
  if (p.slots.size() != p.slot_names.size())
    return invalid(fmt::format("{} slots, {} slot names", p.slots.size(), p.slot_names.size()));
  auto check_ids = [&](const std::vector<int64_t>& ids, const char* what) -> failure {
    for (auto id : ids)
      if (id < 0 || model::dynamic_owner(id, p.partitions) != p.key.index)
        return invalid(fmt::format("{} of id {} sent to partition {} of {}, which does not hold it", what, id,
                                   p.key.index, p.partitions));
    auto sorted = ids;
    std::sort(sorted.begin(), sorted.end());
    if (auto d = std::adjacent_find(sorted.begin(), sorted.end()); d != sorted.end())
      return invalid(fmt::format("id {} sent twice ({})", *d, what));
    return {};
  };
  auto waiting_ids = [](const std::vector<model::waiting_id>& w) {
    std::vector<int64_t> out;
    for (const auto& x : w) out.push_back(x.id);
    return out;
  };
  if (auto err = check_ids(p.ids, "row")) return err;
  if (auto err = check_ids(waiting_ids(p.waiting), "waiting id")) return err;
  if (p.kept) {
    if (auto err = check_ids(p.kept->ids, "kept row")) return err;
    if (auto err = check_ids(waiting_ids(p.kept->waiting), "kept waiting id")) return err;
  }
  if (p.iterations < 0) return invalid(fmt::format("{} iterations", p.iterations));
  // A row's last update and a waiting id's last gradient lie in [0, its step count]: a
  // step past it would never let the row or the id go idle.
  auto check_steps = [&](const std::vector<int64_t>& updates, const std::vector<model::waiting_id>& waiting,
                         int64_t iterations, const char* what) -> failure {
    for (auto s : updates)
      if (s < 0 || s > iterations) return invalid(fmt::format("{}row updated at step {} of {}", what, s, iterations));
    for (const auto& w : waiting)
      if (w.last < 0 || w.last > iterations)
        return invalid(fmt::format("{}id {} waiting since step {} of {}", what, w.id, w.last, iterations));
    return {};
  };
  if (auto err = check_steps(p.last_update, p.waiting, p.iterations, "")) return err;
  if (p.kept)
    if (auto err = check_steps(p.kept->last_update, p.kept->waiting, p.kept->iterations, "kept ")) return err;
  for (auto& n : p.slot_names) {
    auto names = opts_.for_variable(p.name).slot_names();
    if (std::find(names.begin(), names.end(), n) == names.end())
      return invalid(fmt::format("its optimizer ({}) has no slot '{}'", opts_.for_variable(p.name).name(), n));
  }
  q.name = p.name;
  q.sparse = true;
  q.partitions = p.partitions;
  q.version = p.version;
  q.optimizer = opts_.index_of(p.name);
  model::dynamic_table_options o;
  o.dim = spec->shape.cols;
  o.init = spec->init;
  o.seed = p.seed;
  o.admit_after = spec->admit_after;
  o.evict_after = spec->evict_after;
  const auto& opt = opts_.at(q.optimizer);
  auto names = opt.slot_names();
  std::vector<float> slot_init;
  for (auto& s : opt.make_slots(1).slots) slot_init.push_back(s.empty() ? 0.0f : s[0]);
  try {
    q.table = std::make_shared<model::dynamic_table>(o, opt);
    // The rows sent (a checkpoint's), and the kept state the restored run holds.
    q.table->merge(rows_of(o.dim, p.value, p.slot_names, p.slots, p.ids, p.last_update, p.waiting, p.iterations, names,
                           slot_init));
    if (p.kept)
      kept = rows_of(o.dim, p.kept->value, p.slot_names, p.kept->slots, p.kept->ids, p.kept->last_update,
                     p.kept->waiting, p.kept->iterations, names, slot_init);
  } catch (const std::exception& e) {
    return invalid(e.what());
  }
  q.value = std::make_shared<model::matrix>(0, o.dim);
  q.slots = opts_.at(q.optimizer).make_slots(0);
  return {};
}

failure shard_store::init(init_request& req) {
  if (auto err = check_fence(req.f)) return err;
  // Every init or restore comes under epochs of its own: the same ones again are a
  // retry (or a late original) of the one taken, which must not roll back what was
  // applied since.
  if (initialized_ && last_init_ && same_epochs(*last_init_, req.f)) return {};
  auto invalid = [](std::string what) { return failure{error_code::invalid_request, std::move(what)}; };
  // Dynamic tables are made (rows merged) before anything changes: a bad one changes nothing.
  std::vector<partition> tables;
  std::vector<std::optional<model::dynamic_table::snapshot>> tables_kept;
  std::set<int32_t> dynamic_variables;  // one partition of each on a shard (dynamic_owner)
  for (auto& p : req.partitions) {
    if ((p.dynamic || p.sparse) && opts_.for_variable(p.name).average_slot() >= 0)
      return invalid(fmt::format("init: {} is updated by rows, and its optimizer ({}) averages dense variables only "
                                 "(use_ema): give it an optimizer of its own (variable groups)",
                                 p.name, opts_.for_variable(p.name).describe()));
    if (p.dynamic) {
      if (!dynamic_variables.insert(p.key.variable).second)
        return invalid(fmt::format("init: two partitions of the dynamic table {} for one shard", p.name));
      partition q;
      std::optional<model::dynamic_table::snapshot> kept;
      if (auto err = make_table(p, q, kept)) return err;
      tables.push_back(std::move(q));
      tables_kept.push_back(std::move(kept));
      continue;
    }
    auto spec = std::find_if(variables_.begin(), variables_.end(), [&](auto& v) { return v.name == p.name; });
    if (spec != variables_.end() && spec->dynamic)
      return invalid(fmt::format("init: {} is a dynamic table, sent as fixed rows", p.name));
    auto names = opts_.for_variable(p.name).slot_names();
    if (!p.value.value) return invalid(fmt::format("init: partition of {} without values", p.name));
    if (p.row_end != p.row_begin + p.value.rows())
      return invalid(fmt::format("init: partition of {} names rows [{}, {}) for {} rows of values", p.name, p.row_begin,
                                 p.row_end, p.value.rows()));
    if (p.slots.size() != p.slot_names.size())
      return invalid(
        fmt::format("init: partition of {}: {} slots, {} slot names", p.name, p.slots.size(), p.slot_names.size()));
    for (auto& n : p.slot_names)
      if (std::find(names.begin(), names.end(), n) == names.end())
        return invalid(fmt::format("init: partition of {}: its optimizer ({}) has no slot '{}'", p.name,
                                   opts_.for_variable(p.name).name(), n));
    for (auto& s : p.slots)
      if (!s.value || s.rows() != p.value.rows() || s.cols() != p.value.cols())
        return invalid(
          fmt::format("init: a slot of {} is not shaped like its values {}", p.name, model::shape_string(*p.value.value)));
  }
  // Violations seen are never forgotten, not even by a restore.
  std::map<partition_key, std::vector<ledger_violation>> seen_violations;
  for (auto& [k, p] : parts_) seen_violations[k] = p.ledger.violations();
  parts_.clear();
  kept_.clear();  // a restored state supersedes what was kept
  kept_tables_.clear();
  auto table = tables.begin();
  auto table_kept = tables_kept.begin();
  for (auto& p : req.partitions) {
    if (p.dynamic) {
      auto& q = *table++;
      if (auto& k = *table_kept++) {  // the restored run's kept state: restore's target
        kept_.emplace(p.key, std::make_pair(model::matrix(0, q.value->cols()), q.slots));
        kept_tables_.emplace(p.key, std::move(*k));
      }
      q.ledger = step_ledger{p.ledger};
      if (auto v = seen_violations.find(p.key); v != seen_violations.end()) q.ledger.keep_violations(v->second);
      parts_.emplace(p.key, std::move(q));
      continue;
    }
    partition q;
    q.ledger = step_ledger{p.ledger};
    if (auto v = seen_violations.find(p.key); v != seen_violations.end()) q.ledger.keep_violations(v->second);
    q.name = p.name;
    q.row_begin = p.row_begin;
    q.sparse = p.sparse;
    q.value = std::make_shared<model::matrix>(p.value.take());
    q.version = p.version;
    q.optimizer = opts_.index_of(p.name);
    const auto& opt = opts_.at(q.optimizer);
    auto names = opt.slot_names();
    q.slots = opt.make_slots(static_cast<size_t>(q.value->size()), q.value->data());  // a missing average: the values
    for (size_t k = 0; k < p.slots.size(); ++k) {
      auto at = static_cast<size_t>(std::find(names.begin(), names.end(), p.slot_names[k]) - names.begin());
      const auto& m = *p.slots[k].value;
      std::copy(m.data(), m.data() + m.size(), q.slots.slots[at].begin());
    }
    q.slots.iterations = p.iterations;
    if (!q.sparse) {
      q.comp = compensator{compensation_};
      q.comp.reset(*q.value, q.version);
    }
    if (p.kept && p.kept->value.value && p.kept->value.rows() == q.value->rows() &&
        p.kept->value.cols() == q.value->cols()) {
      // The kept state of the restored run (a checkpoint of it): restore's target.
      auto kept_slots = opt.make_slots(static_cast<size_t>(q.value->size()), p.kept->value.value->data());
      for (size_t k = 0; k < p.kept->slots.size() && k < p.slot_names.size(); ++k) {
        auto at = static_cast<size_t>(std::find(names.begin(), names.end(), p.slot_names[k]) - names.begin());
        const auto& m = *p.kept->slots[k].value;
        if (at < kept_slots.slots.size() && m.size() == q.value->size())
          std::copy(m.data(), m.data() + m.size(), kept_slots.slots[at].begin());
      }
      kept_slots.iterations = p.kept->iterations;
      kept_.emplace(p.key, std::make_pair(*p.kept->value.value, std::move(kept_slots)));
    }
    parts_.emplace(p.key, std::move(q));
  }
  // The de-duplication state of the restored values (nothing remembered above the
  // watermark: a checkpoint is taken with no step in flight).
  applied_steps_.clear();
  policy_->clear();  // a round in progress is superseded by the restored state
  auto run_before = run_;
  run_ = req.run;
  watermark_ = req.watermark;
  for (auto& [w, g] : req.min_generations) {
    auto& have = min_generation_[w];
    have = std::max(have, g);
  }
  // What this state held beyond the one restored is taken back (a new run starts over).
  if (initialized_ && req.run == run_before && stats_.base + stats_.applied > req.base)
    stats_.undone += stats_.base + stats_.applied - req.base;
  stats_.applied = 0;
  stats_.base = req.base;
  stats_.apply_log.clear();
  initialized_ = true;
  last_init_ = req.f;
  ++changes_;
  table_steps_.clear();  // another state: no increment over a snapshot taken before
  return {};
}

failure shard_store::raise_fence(const fence_request& req, fence& out) {
  if (auto err = check_fence(req.f)) return err;
  if (req.f.worker != fence::no_worker) {
    auto& g = min_generation_[req.f.worker];
    g = std::max(g, req.f.worker_generation);
  }
  out = seen_;
  out.worker = req.f.worker;
  out.worker_generation = req.f.worker == fence::no_worker ? 0 : min_generation_[req.f.worker];
  return {};
}

failure shard_store::set_hyperparams(const hyperparams_request& req) {
  if (auto err = check_fence(req.f)) return err;
  auto last = last_hyper_;
  if (!newer(last, req.f, req.id)) return {};  // a newer change was taken
  // Validate all first so a bad value changes nothing.
  auto probe = opts_;
  try {
    for (auto& [k, v] : req.values) probe.set_hyperparam(k, v);
  } catch (const std::invalid_argument& e) {
    return failure{error_code::invalid_request, fmt::format("ps shard {}: {}", index_, e.what())};
  }
  opts_ = probe;
  last_hyper_ = last;
  return {};
}

failure shard_store::keep(const fence_request& req) {
  if (!initialized_) return not_ready();
  if (auto err = check_fence(req.f)) return err;
  if (!newer(last_keep_, req.f, req.id)) return {};  // done once already
  kept_.clear();
  kept_tables_.clear();
  for (auto& [k, p] : parts_) {
    kept_.emplace(k, std::make_pair(*p.value, p.slots));
    if (p.table) kept_tables_.emplace(k, p.table->save());
  }
  return {};
}

failure shard_store::restore(const fence_request& req) {
  if (!initialized_) return not_ready();
  if (auto err = check_fence(req.f)) return err;
  auto last = last_restore_;
  if (!newer(last, req.f, req.id)) return {};  // done once already
  if (kept_.size() != parts_.size())
    return failure{error_code::invalid_request,
                   fmt::format("ps shard {} holds no kept state{}", index_, kept_.empty() ? "" : " for its partitions")};
  for (auto& [k, p] : parts_)
    if (kept_.find(k) == kept_.end() || (p.table && kept_tables_.find(k) == kept_tables_.end()))
      return failure{error_code::invalid_request,
                     fmt::format("ps shard {}: no kept state of partition {}:{}", index_, k.variable, k.index)};
  for (auto& [k, p] : parts_) {
    auto& [value, slots] = kept_.at(k);
    p.value = std::make_shared<model::matrix>(value);  // readers of the old buffer keep it
    p.spare.reset();
    p.slots = slots;
    if (p.table) {
      p.table->clear();
      p.table->merge(kept_tables_.at(k));
    }
    ++p.version;  // new values: a reader's cached version must not match them
    p.comp.reset(*p.value, p.version);
  }
  last_restore_ = last;
  ++changes_;
  table_steps_.clear();  // another state: no increment over a snapshot taken before
  return {};
}

model::dynamic_table::snapshot shard_store::save_table(const partition_key& k, partition& p, const snapshot_basis& b,
                                                      int64_t& base) const {
  base = -1;
  if (b.base >= 0 && b.base < b.step)
    if (auto at = table_steps_.find(b.base); at != table_steps_.end())
      if (auto since = at->second.find(k); since != at->second.end()) {
        try {
          auto inc = p.table->save(since->second);
          base = b.base;
          return inc;
        } catch (const std::logic_error&) {
          // The table does not know what it dropped since (restored in between): whole.
        }
      }
  return p.table->save();
}

void shard_store::snapshot_taken(const snapshot_basis& b) {
  if (!b.increments) {
    table_steps_.clear();
    for (auto& [k, p] : parts_)
      if (p.table) p.table->log_removed_after(-1);
    return;
  }
  auto& now = table_steps_[b.step];
  now.clear();
  for (auto& [k, p] : parts_)
    if (p.table) now[k] = p.table->iterations();
  while (table_steps_.size() > 4) table_steps_.erase(table_steps_.begin());
  // Each table logs what it drops after the oldest step an increment may start from.
  for (auto& [k, p] : parts_) {
    if (!p.table) continue;
    int64_t oldest = p.table->iterations();
    for (auto& [step, at] : table_steps_)
      if (auto i = at.find(k); i != at.end()) oldest = std::min(oldest, i->second);
    p.table->log_removed_after(oldest);
  }
}

failure shard_store::snapshot(const fence_request& req, const snapshot_basis& b, ps_snapshot& out) {
  if (!initialized_) return not_ready();
  if (auto err = check_fence(req.f)) return err;
  out.shard = index_;
  for (auto& [k, p] : parts_) {
    auto names = opts_.at(p.optimizer).slot_names();
    partition_state s;
    s.key = k;
    s.name = p.name;
    s.row_begin = p.row_begin;
    s.row_end = p.row_begin + p.value->rows();
    s.sparse = p.sparse;
    s.version = p.version;
    if (p.table) {  // every row, or an increment
      s.dynamic = true;
      s.partitions = p.partitions;
      s.row_begin = k.index;  // its "rows" in checkpoints and ledgers
      s.row_end = k.index + 1;
      s.ledger = p.ledger.data();
      s.slot_names = names;
      auto rows = save_table(k, p, b, s.base);
      put_rows(rows, s);
      s.removed = std::move(rows.removed);
      out.partitions.push_back(std::move(s));
      continue;
    }
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
  snapshot_taken(b);
  return {};
}

failure shard_store::snapshot_files(const fence_request& req, const checkpoint_target& t, const snapshot_basis& b,
                                    model::file_system& fs, ps_files& out) {
  if (!initialized_) return not_ready();
  if (auto err = check_fence(req.f)) return err;
  // A retry of the last snapshot (or its late original) rewrites the same files only
  // while the state is the one they were first written at: never a newer state into a
  // checkpoint that may be committed already.
  if (req.id != 0 && same_epochs(last_snapshot_.first, req.f) && last_snapshot_.second == req.id &&
      snapshot_changes_ != changes_)
    return failure{error_code::invalid_request,
                   fmt::format("ps shard {}: snapshot {} repeated after the state changed", index_, req.id)};
  last_snapshot_ = {req.f, req.id};
  snapshot_changes_ = changes_;
  auto entry = [](const model::file_record& r) { return file_entry{r.name, r.bytes, r.crc32}; };
  out.shard = index_;
  try {
    for (auto& [k, p] : parts_) {
      auto names = opts_.at(p.optimizer).slot_names();
      model::partition_data d;
      if (p.table) {  // every row or an increment; its "rows" [k, k + 1)
        int64_t base = -1;
        d = model::table_partition(save_table(k, p, b, base), names);
        d.base = base;
        d.row_begin = k.index;
        d.row_end = k.index + 1;
      } else {
        d.row_begin = p.row_begin;
        d.row_end = p.row_begin + p.value->rows();
        d.values = *p.value;
        d.iterations = p.slots.iterations;
        for (size_t i = 0; i < names.size() && i < p.slots.slots.size(); ++i) {
          model::matrix m(p.value->rows(), p.value->cols());
          std::copy(p.slots.slots[i].begin(), p.slots.slots[i].end(), m.data());
          d.slots[names[i]] = std::move(m);
        }
      }
      auto rec = model::write_partition_arrays(fs, t.dir, p.name, static_cast<size_t>(k.index), d, p.table != nullptr);
      written_partition w;
      auto& h = w.header;
      h.key = k;
      h.name = p.name;
      h.row_begin = rec.row_begin;
      h.row_end = rec.row_end;
      h.sparse = p.sparse;
      h.dynamic = p.table != nullptr;
      h.partitions = p.partitions;
      h.version = p.version;
      h.iterations = rec.iterations;
      h.base = rec.base;
      h.ledger = p.ledger.data();
      w.values = entry(rec.values);
      for (auto& [slot, file] : rec.slots) {
        h.slot_names.push_back(slot);
        w.slots.push_back(entry(file));
      }
      for (auto& [what, file] : rec.tables) w.tables.emplace_back(what, entry(file));
      out.partitions.push_back(std::move(w));
    }
  } catch (const std::exception& e) {
    return failure{error_code::checkpoint_failed, fmt::format("ps shard {}: {}", index_, e.what())};
  }
  snapshot_taken(b);
  return {};
}

// -- workers -----------------------------------------------------------------------------

failure shard_store::pull(const pull_request& req, pull_reply& out) {
  if (!initialized_) return not_ready();
  // Coordinator epoch 0 marks an observer (the application reading variables): reads
  // change nothing, so they pass without raising or checking the fence.
  if (req.f.coordinator_epoch != 0)
    if (auto err = check_fence(req.f)) return err;
  out.values.reserve(req.partitions.size());
  for (auto& k : req.partitions) {
    auto i = parts_.find(k);
    if (i == parts_.end())
      return failure{error_code::invalid_request,
                     fmt::format("ps shard {}: no partition {}:{}", index_, k.variable, k.index)};
    auto& p = i->second;
    // A training step computes on the compensated view (lookahead); everyone else, on
    // what a read of the model sees (optimizer::model_view: with use_ema the average).
    auto values = req.training && !p.sparse ? p.comp.view(p.value, p.version)
                                            : std::shared_ptr<const model::matrix>(p.value);
    if (const auto* a = req.training ? nullptr : opts_.at(p.optimizer).model_view(p.slots)) {
      auto copy = std::make_shared<model::matrix>(p.value->rows(), p.value->cols());
      std::copy(a->begin(), a->end(), copy->data());
      values = std::move(copy);
    }
    out.values.push_back(partition_value{k, p.version, tensor{std::move(values)}});
    out.values.back().value.reducible = req.training;  // what a worker trains with, not what the ps keeps
  }
  return {};
}

failure shard_store::pull_rows(pull_rows_request& req, rows_reply& out) {
  if (!initialized_) return not_ready();
  // Coordinator epoch 0: an observer (cluster::lookup), as in pull; it never trains.
  const bool observer = req.f.coordinator_epoch == 0;
  if (!observer)
    if (auto err = check_fence(req.f)) return err;
  out.variable = req.variable;
  auto first = parts_.lower_bound(partition_key{req.variable, 0});
  if (first == parts_.end() || first->first.variable != req.variable)
    return failure{error_code::invalid_request, fmt::format("ps shard {}: no rows of variable {}", index_, req.variable)};
  const auto width = first->second.value->cols();
  model::matrix rows(static_cast<Eigen::Index>(req.ids.size()), width);
  auto not_here = [&](int64_t id) {
    return failure{error_code::invalid_request,
                   fmt::format("ps shard {}: row {} of variable {} is not here", index_, id, req.variable)};
  };
  if (auto& table = first->second.table) {
    // One partition per shard: every id it holds is this partition's. A read creates
    // nothing (rows come with their first gradient).
    const auto& p = first->second;
    for (auto id : req.ids)
      if (id < 0 || model::dynamic_owner(id, p.partitions) != first->first.index) return not_here(id);
    // A large pull's lookups wait on memory: up to 4 threads (one per core this process
    // may run on) read parts of it at once. Only pulls of 64k ids and more are split; the
    // table does not change meanwhile, as this actor waits for them.
    static const unsigned read_threads = [] {
      cpu_set_t cores;
      const int n = ::sched_getaffinity(0, sizeof cores, &cores) == 0 ? CPU_COUNT(&cores) : 1;
      return std::clamp(static_cast<unsigned>(n), 1u, 4u);
    }();
    table->read(req.ids.data(), req.ids.size(), rows.data(), req.training && !observer, read_threads);
    out.version = first->second.version;
  } else {
    // One lookup per id (every step's row pull comes here); a miss fails the whole read.
    for (size_t j = 0; j < req.ids.size(); ++j) {
      const partition* hit = holder(req.variable, req.ids[j]);
      if (!hit) return not_here(req.ids[j]);
      rows.row(static_cast<Eigen::Index>(j)) = hit->value->row(req.ids[j] - hit->row_begin);
      out.version = std::max(out.version, hit->version);
    }
  }
  stats_.rows_pulled += req.ids.size();
  out.ids = std::move(req.ids);
  out.rows = tensor{std::move(rows)};
  out.rows.reducible = req.training;
  return {};
}

failure shard_store::push(push_request& req, push_reply& out) {
  if (!initialized_) return not_ready();
  if (auto err = check_fence(req.f)) return err;
  // The next step's read, served once the push is done (the apply policy may keep req).
  pull_request then{req.f, std::move(req.then_pull), /*training=*/true};
  auto read_after = [&]() -> failure {
    if (then.partitions.empty()) return {};
    pull_reply values;
    if (auto err = pull(then, values)) return err;
    out.pulled = std::move(values.values);
    return {};
  };
  if (seen_before(req)) {
    ++stats_.duplicates;
    out = push_reply{push_status::duplicate, 0, {}};
    return read_after();
  }
  if (auto err = validate(req)) {
    ++stats_.rejected;
    return err;
  }
  for (auto& k : then.partitions)  // (checked before anything is applied)
    if (parts_.find(k) == parts_.end())
      return failure{error_code::invalid_request,
                     fmt::format("ps shard {}: no partition {}:{} to read after the push", index_, k.variable, k.index)};
  uint64_t max_lag = 0;
  applied_by who{req.step, req.f.worker, req.f.worker_generation, req.attempt};
  auto status = policy_->on_push(req, [this, &max_lag](push_request& r) { apply_slices(r, max_lag); });
  // Held or applied, the step id is taken: a re-run's push is a duplicate.
  applied_steps_.insert(who.step);
  for (auto& s : req.more_steps) applied_steps_.insert(s);
  if (status == push_status::applied) {
    count_applied(who);
    for (auto& s : req.more_steps) count_applied(applied_by{s, req.f.worker, req.f.worker_generation, req.attempt});
  }
  out = push_reply{status, max_lag, {}};
  return read_after();
}

failure shard_store::round(const round_request& req, round_reply& out) {
  if (!initialized_) return not_ready();
  if (auto err = check_fence(req.f)) return err;
  uint64_t max_lag = 0;
  auto used = policy_->on_round(req, [this, &max_lag](push_request& r) { apply_slices(r, max_lag); });
  for (auto& a : used) count_applied(a);
  out = round_reply{req.round, used.size(), max_lag};
  return {};
}

// -- reports -------------------------------------------------------------------------------

ps_ledgers shard_store::ledgers() const {
  ps_ledgers out;
  out.shard = index_;
  for (auto& [k, p] : parts_) {
    // A dynamic table's partition k: "rows" [k, k + 1) (partition_ledger).
    auto begin = p.table ? k.index : p.row_begin, end = p.table ? k.index + 1 : p.row_begin + p.value->rows();
    out.partitions.push_back(partition_ledger{index_, p.name, begin, end, p.ledger.data()});
  }
  return out;
}

ps_stats shard_store::stats() const {
  auto s = stats_;
  s.remembered = applied_steps_.size();
  s.held = policy_->held();
  s.seen = seen_;
  for (auto& [w, g] : min_generation_) s.min_generations.emplace_back(w, g);
  for (auto& [k, p] : parts_) {
    s.versions.push_back(partition_value{k, p.version, tensor{}});
    s.uncompensated += p.comp.uncompensated();
    if (p.table) {
      auto c = p.table->counts();
      s.tables.push_back(table_stats{k, c.rows, c.created, c.evicted, c.waiting, c.unadmitted_reads,
                                     c.dropped_gradients, p.table->bytes(), p.table->payload_bytes()});
    }
  }
  return s;
}

}  // namespace actortrain
