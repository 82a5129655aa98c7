#include <actortrain/actors/sim/simulator.hpp>

#include "../cluster/cluster_internals.hpp"
#include "../core/planted.hpp"
#include "timed_delivery.hpp"
#include <actortrain/actors/coordinator/dispatch_gate.hpp>
#include <actortrain/actors/core/configure.hpp>
#include <actortrain/actors/cluster/events.hpp>
#include <actortrain/actors/sim/fault_plan.hpp>
#include <actortrain/actors/ps/ledger.hpp>
#include <actortrain/dataset/all.hpp>
#include <actortrain/model/all.hpp>
#include <actortrain/model/batch_rows.hpp>
#include <actortrain/model/checkpoint/memory_file_system.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>

namespace actortrain {

// -- planted defects ------------------------------------------------------------------

std::string to_string(planted_defect d) {
  switch (d) {
    case planted_defect::none: return "none";
    case planted_defect::apply_twice_after_rollback: return "apply_twice_after_rollback";
    case planted_defect::skip_step: return "skip_step";
    case planted_defect::foreign_step: return "foreign_step";
    case planted_defect::wrong_batch: return "wrong_batch";
    case planted_defect::visit_twice: return "visit_twice";
    case planted_defect::forget_grants_after_rollback: return "forget_grants_after_rollback";
  }
  return "none";
}

std::vector<planted_defect> planted_defects() {
  return {planted_defect::apply_twice_after_rollback, planted_defect::skip_step, planted_defect::foreign_step,
          planted_defect::wrong_batch, planted_defect::visit_twice};
}

planted_defect planted_defect_from_string(const std::string& s) {
  std::string known;
  for (auto d : planted_defects()) {
    if (to_string(d) == s) return d;
    known += (known.empty() ? "" : ", ") + to_string(d);
  }
  if (s == "none") return planted_defect::none;
  if (s == to_string(planted_defect::forget_grants_after_rollback)) return planted_defect::forget_grants_after_rollback;
  throw std::invalid_argument(fmt::format("unknown defect '{}' ({})", s, known));
}

bool sim_result::completed() const {
  for (auto& e : fit_errors)
    if (!e.empty()) return false;
  return true;
}

bool sim_result::planted_visible() const {
  for (auto k : planted_fired)
    if (checked_whole.count(k)) return true;
  return false;
}

bool sim_result::poisoned() const {
  for (auto& e : fit_errors)
    if (e.find("poison_step") != std::string::npos) return true;
  return false;
}

std::string sim_result::report() const {
  std::string out;
  for (size_t i = 0; i < fit_errors.size(); ++i)
    out += fmt::format("  fit {} (run {}): {}\n", i + 1, i < runs.size() ? runs[i] : 0,
                       fit_errors[i].empty() ? "completed" : fit_errors[i]);
  for (auto& v : violations) out += "  violation: " + v + "\n";
  for (auto& p : plan) out += "  rule: " + p + "\n";
  for (auto& i : injected) out += "  injected: " + i + "\n";
  return out;
}

namespace {

// FNV-1a over the bytes of what the trace contains.
struct trace_hasher {
  uint64_t h = 1469598103934665603ull;
  void bytes(const void* p, size_t n) {
    auto c = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) {
      h ^= c[i];
      h *= 1099511628211ull;
    }
  }
  template <class T>
  void add(const T& x) {
    static_assert(std::is_trivially_copyable<T>::value, "plain values only");
    bytes(&x, sizeof(T));
  }
};

// The file-system seam of the simulated checkpoints: in memory, and the n-th commit (a
// manifest renamed into place) has one bit of one of its arrays flipped, as storage that
// rots would.
class corrupting_file_system final : public model::file_system {
 public:
  explicit corrupting_file_system(int nth) : nth_(nth) {}
  model::io_status create_dir(const std::string& p) override { return base_.create_dir(p); }
  model::io_status create_dirs(const std::string& p) override { return base_.create_dirs(p); }
  model::io_status write_file(const std::string& p, const std::vector<std::string_view>& c) override {
    return base_.write_file(p, c);
  }
  using model::file_system::write_file;
  model::io_status sync_file(const std::string& p) override { return base_.sync_file(p); }
  model::io_status sync_dir(const std::string& p) override { return base_.sync_dir(p); }
  model::io_status rename(const std::string& from, const std::string& to) override {
    auto st = base_.rename(from, to);
    const std::string manifest = "/manifest.json";
    if (st.ok() && nth_ > 0 && to.size() > manifest.size() &&
        to.compare(to.size() - manifest.size(), manifest.size(), manifest) == 0 && ++commits_ == nth_) {
      auto dir = to.substr(0, to.size() - manifest.size());
      std::vector<std::string> names;
      if (base_.list_dir(dir, names).ok())
        for (auto& n : names)
          if (n.size() > 4 && n.compare(n.size() - 4, 4, ".npy") == 0) {
            std::string bytes;
            if (!base_.read_file(dir + "/" + n, bytes).ok() || bytes.empty()) continue;
            bytes.back() = static_cast<char>(bytes.back() ^ 0x10);
            (void)base_.write_file(dir + "/" + n, bytes);
            corrupted_ = dir;
            break;
          }
    }
    return st;
  }
  model::io_status remove_all(const std::string& p) override { return base_.remove_all(p); }
  model::io_status list_dir(const std::string& p, std::vector<std::string>& n) override { return base_.list_dir(p, n); }
  model::io_status read_file(const std::string& p, std::string& out) override { return base_.read_file(p, out); }
  bool exists(const std::string& p) override { return base_.exists(p); }
  const std::string& corrupted() const { return corrupted_; }

 private:
  model::memory_file_system base_;
  int nth_ = 0;
  int commits_ = 0;
  std::string corrupted_;
};

// `fn` with a NaN in the features of batch `position` of pipeline 0 (every epoch): the
// step that computes on it fails with invalid_gradient, an application error.
dataset::dataset_fn poisoned(dataset::dataset_fn fn, uint64_t position) {
  return [fn, position](const dataset::input_context& ctx) {
    auto d = fn(ctx);
    if (ctx.input_pipeline_id != 0) return d;
    auto k = static_cast<int64_t>(position);
    auto nan = d.skip(k).take(1).map([](dataset::element e) {
      for (auto& f : e.features)  // the first float input (ids have no NaN)
        if (f.size() > 0) {
          f.data()[0] = std::numeric_limits<float>::quiet_NaN();
          break;
        }
      return e;
    });
    return d.take(k).concatenate(nan).concatenate(d.skip(k + 1));
  };
}

// Steps of one epoch of `fn` over `pipelines` (for the plan's occurrences).
int64_t steps_per_epoch(const job& j, int pipelines, int64_t replicas) {
  int64_t n = 0;
  for (int p = 0; p < pipelines; ++p) {
    auto c = j.train(dataset::input_context{pipelines, p, replicas}).cardinality();
    n += c.is_known() ? c.n : 16;
  }
  return std::max<int64_t>(1, n);
}

// What one simulation produced, before the comparison with a fault-free run.
struct outcome {
  sim_result res;
  std::optional<model::parameter_store> values;
  std::string lost_data;  // what a fault destroyed that no other copy held ("" none)
};

outcome run_once(const job& j, const sim_options& o, std::shared_ptr<fault_plan> plan, bool reference) {
  outcome out;
  auto& res = out.res;
  res.seed = o.seed;
  if (plan && !reference)
    for (auto& r : plan->rules()) res.plan.push_back(to_string(r));
  const bool take_over = !reference && o.take_over_after > 0;
  if (take_over && !plan) plan = std::make_shared<fault_plan>();  // to cut the old coordinator off

  caf::actor_system_config cfg;
  configure(cfg);
  cfg.set("scheduler.policy", caf::atom("testing"));
  caf::actor_system sys{cfg};
  auto& sched = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  auto started = sched.clock().now();

  cluster_spec spec = j.spec;
  spec.simulated = true;
  spec.faults = reference ? nullptr : plan;
  spec.apply_log = true;
  spec.restart_lost_workers = true;
  spec.metrics_file.clear();
  spec.visitation_log = false;
  if (spec.checkpoint_dir.empty() && o.checkpoint_every > 0) {
    spec.checkpoint_dir = "/sim";
    spec.checkpoint_every = o.checkpoint_every;
  }
  auto fs = std::make_shared<corrupting_file_system>(reference ? 0 : o.corrupt_checkpoint);
  spec.checkpoint_fs = fs;
  if (take_over && spec.checkpoint_dir.empty())
    throw std::invalid_argument("simulate: take_over_after needs checkpoints (checkpoint_every > 0)");
  std::shared_ptr<detail::timed_delivery> timed;
  if (o.costs && !reference) {
    // What a pull brings and a push carries from each shard; what a batch weighs.
    auto pl = model::place(j.structure.variables(), spec.partitioner.get(), spec.num_ps);
    std::vector<double> floats(static_cast<size_t>(spec.num_ps), 0.0);
    for (auto& vp : pl.variables())
      if (!vp.sparse)
        for (auto& part : vp.partitions) floats[static_cast<size_t>(part.ps)] += static_cast<double>(part.rows() * vp.shape.cols);
    double batch_bytes = 0;
    {
      auto it = j.train(dataset::input_context{cluster_internals::num_pipelines(spec), 0, 1}).iterate(0);
      if (auto b = it->next()) {
        for (auto& f : b->features) batch_bytes += 4.0 * static_cast<double>(f.size());
        for (auto& x : b->ids) batch_bytes += 8.0 * static_cast<double>(x.size());
        batch_bytes += 4.0 * static_cast<double>(b->labels.size());
      }
    }
    timed = std::make_shared<detail::timed_delivery>(
      *o.costs, std::move(floats), batch_bytes,
      [&sched, started] { return std::chrono::duration<double>(sched.clock().now() - started).count(); }, plan);
    spec.faults = timed;
  }
  const auto mode = spec.consistency;
  std::optional<uint64_t> bound;  // the mode's bound on version staleness
  if (mode.mode() == consistency_mode::kind::sync) bound = 0;
  if (mode.mode() == consistency_mode::kind::bounded_staleness) bound = 2 * mode.bound();

  cluster::parts parts;
  // Timed as processes: each worker reads the pipeline of its own replica, as worker
  // tasks do (the model places dataset shard p in worker p's process).
  if (timed) parts.pipeline_affinity = true;
  if (!reference && o.plant != planted_defect::none) {
    parts.plant = std::make_shared<detail::defect_switch>();
    parts.plant->which = o.plant;
  }
  std::vector<model::metric_ptr> metrics;
  if (j.metrics) metrics = j.metrics();
  auto owned = cluster_internals::make(sys, spec, j.structure, *j.optimizer, j.loss, std::move(metrics), parts);
  auto& c = *owned;
  for (auto& cb : j.callbacks) c.add_callback(cb);
  // On every way out: stop the cluster and run the test scheduler until its actors are
  // gone (the system's destructor waits for them, and only this thread runs them).
  struct stop_first {
    std::unique_ptr<cluster>& owned;
    caf::scheduler::test_coordinator& sched;
    ~stop_first() {
      owned.reset();
      for (int i = 0; i < 100000 && (sched.try_run_once() || sched.clock().trigger_timeout()); ++i) {
      }
    }
  } stopper{owned, sched};

  // What the events show: the trace, run ids, the mode's bounds, the recoveries.
  trace_hasher trace;
  std::map<uint64_t, std::pair<int64_t, double>> rounds;  // sync: per round, its steps and loss
  std::set<uint64_t> bad_rounds;
  int64_t fit_steps = 0;  // step events of the current fit
  int fit_index = 0, rolled_back_before = 0;
  std::set<uint64_t> failed_runs;
  uint64_t fit_run = 0;
  bool in_take_over = false;
  // Simulated time of training: from each fit's start to its last applied step.
  auto sim_now = [&] { return std::chrono::duration<double>(sched.clock().now() - started).count(); };
  double fit_began = 0, last_step_at = 0, staleness_sum = 0;
  cluster_internals::observe(c, [&](const event& e) {
    if (o.keep_trace) {
      if (e.kind == event_kind::step_done)
        res.trace.push_back(fmt::format("step run {} epoch {} round {} pipeline {} position {} worker {} loss {:.9g}",
                                        e.run, e.epoch, e.round, e.pipeline, e.position, e.worker, e.loss));
      else
        res.trace.push_back(fmt::format("{} run {} epoch {} count {}{}", to_string(e.kind), e.run, e.epoch, e.count,
                                        e.text.empty() ? std::string{} : ": " + e.text));
    }
    switch (e.kind) {
      case event_kind::run_begin:
        if (!in_take_over && fit_run == 0) fit_run = e.run;
        break;
      case event_kind::step_done:
        ++fit_steps;
        ++res.timing.steps;
        res.timing.examples += e.examples;
        staleness_sum += static_cast<double>(e.staleness);
        last_step_at = sim_now();
        res.max_staleness = std::max(res.max_staleness, e.staleness);
        if (bound && e.staleness > *bound)
          res.violations.push_back(fmt::format("step ({}, {}) applied with staleness {} (the mode's bound is {})",
                                               e.pipeline, e.position, e.staleness, *bound));
        if (e.round > 0) {
          auto [at, fresh] = rounds.emplace(e.round + (e.run << 32), std::make_pair(int64_t{0}, e.loss));
          ++at->second.first;
          if ((!fresh && at->second.second != e.loss) || at->second.first > spec.num_workers) bad_rounds.insert(e.round);
        }
        trace.add(e.pipeline);
        trace.add(e.position);
        trace.add(e.worker);
        trace.add(e.generation);
        trace.add(e.loss);
        break;
      case event_kind::worker_lost:
        ++res.restarts;  // the cluster restarts it (restart_lost_workers)
        trace.add(uint8_t{1});
        trace.add(e.worker);
        trace.add(e.generation);
        break;
      case event_kind::worker_joined:
        trace.add(uint8_t{2});
        trace.add(e.worker);
        trace.add(e.generation);
        break;
      case event_kind::dataset_lost:
        trace.add(uint8_t{3});
        trace.add(e.pipeline);
        ++res.rebuilt;
        break;
      case event_kind::ps_lost:
        trace.add(uint8_t{4});
        trace.add(e.count);
        if (failed_runs.count(e.run))
          out.lost_data = "a ps shard lost after a failed run, before the next run committed its start";
        break;
      case event_kind::ps_restored:
      case event_kind::resumed:
        rounds.clear();  // the rounds after the checkpoint run again
        trace.add(e.kind == event_kind::resumed ? uint8_t{6} : uint8_t{5});
        trace.add(e.count);
        if (e.kind == event_kind::ps_restored) {
          ++res.ps_restores;
          // Restored from an incremental checkpoint: its dynamic tables read back through a chain.
          try {
            if (!e.text.empty() && fs->exists(model::join_path(e.text, "manifest.json")))
              for (const auto& ck : model::list_checkpoints(*fs, spec.checkpoint_dir))
                if (ck.path == e.text && !ck.bases.empty()) ++res.incremental_restores;
          } catch (const std::exception&) {
            // A checkpoint the restore read, unreadable now: counted nowhere.
          }
        }
        break;
      case event_kind::warning:
        if (e.text.rfind("the run failed: ", 0) == 0) failed_runs.insert(e.run);
        // A restore that skipped a corrupt checkpoint went back further than the state it
        // replaced: what earlier runs left may be gone with it (in this run it is redone).
        if (e.text.rfind("restore: skipped", 0) == 0) rolled_back_before = std::max(rolled_back_before, fit_index);
        if (e.text.find("restore: the kept state of epoch") == 0)
          out.lost_data = "a corrupt checkpoint held the only copy of the state early stopping kept";
        if (e.text.find("is slow: also running") != std::string::npos) ++res.speculated;
        if (e.text.rfind("restore: skipped", 0) == 0) ++res.skipped_checkpoints;
        break;
      default:
        break;
    }
  });

  bool hung = false;
  std::optional<cluster_internals::deposed> deposed;
  std::vector<ledger_run> checked;
  std::vector<int> checked_fit;  // the fit each checked run was
  for (int k = 0; k < std::max(1, o.fits) && !hung; ++k) {
    if (parts.plant) parts.plant->fit = k;
    fit_index = k;
    auto fn = k == o.failing_fit ? poisoned(j.train, o.failing_position) : j.train;
    model::fit_options fo = j.fit;
    fo.verbose = 0;
    fo.out = nullptr;
    fit_steps = 0;
    fit_run = 0;
    in_take_over = false;
    fit_began = last_step_at = sim_now();
    auto h = j.loop ? cluster_internals::schedule_loop(c, j, fn) : c.schedule(fn, fo);
    bool due = take_over && k == std::max(1, o.fits) - 1;  // the last fit is taken over
    for (int64_t guard = 0;; ++guard) {
      // While a take-over is due, one message at a time: it happens at its step count.
      if (due) {
        sched.try_run_once();
        c.done(h);  // hands the events to the cluster (and the observer)
        if (fit_steps >= o.take_over_after) {
          // The old coordinator is cut off for its next 30 messages (so its requests
          // time out), then wakes up: by then everything it sends must be refused.
          plan->add(fault_rule{delivery::kind::drop, actor_role::coordinator, 0, actor_role::any, -1, "", 1, 30, {}});
          in_take_over = true;
          deposed = cluster_internals::take_over(c);
          res.taken_over = true;
          trace.add(uint8_t{7});
          due = false;
        }
      } else {
        // Messages without time moving on: a livelock (a request answered at once and
        // sent again, forever) would never let the clock advance.
        for (int64_t n = 0; sched.try_run_once(); ++n)
          if (n > 2000000) {
            hung = true;
            break;
          }
        if (hung) break;
      }
      if (c.done(h)) break;
      if (sched.has_job()) continue;
      // Nothing can happen until the next timer: a delayed message or a timeout.
      // With costs every message is a timer: the guard grows with the run.
      if (guard > (timed ? int64_t{200000000} : int64_t{2000000}) || !sched.clock().trigger_timeout()) {
        hung = true;
        break;
      }
    }
    res.timing.train_seconds += last_step_at - fit_began;
    if (hung) {
      res.violations.push_back(
        fmt::format("fit {} hung: nothing left to run and no timer pending, or messages going round without end", k + 1));
      res.fit_errors.push_back("hung");
      res.runs.push_back(fit_run);
      break;
    }
    std::string err;
    fit_result r;
    try {
      r = c.join(h);
    } catch (const std::exception& e) {
      err = e.what();
    }
    // Restarts asked for near the end are answered after it.
    for (int i = 0; i < 100000 && sched.try_run_once(); ++i) {
    }
    res.fit_errors.push_back(err);
    res.runs.push_back(fit_run);
    if (fit_run == 0) continue;
    if (err.find("validates") != std::string::npos)
      out.lost_data = "a corrupt checkpoint was the run's only one";
    ledger_run lr = ledger_run_of(j, spec, fit_run, err.empty());
    lr.fn = fn;
    if (err.empty() && r.stopped_epoch >= 0) lr.epochs = static_cast<int>(r.stopped_epoch + 1);
    checked.push_back(std::move(lr));
    checked_fit.push_back(k);
    // A fit that should end well and did not. Legitimate endings: a poison step, and a
    // roll-back with no good checkpoint of the run left (the planted corruption hit the
    // only one: the run fails naming it rather than roll back across runs).
    bool legitimate = err.find("poison_step") != std::string::npos ||
                      (o.corrupt_checkpoint > 0 && err.find("validates") != std::string::npos);
    if (!err.empty() && k != o.failing_fit && !legitimate)
      res.violations.push_back(fmt::format("fit {} (run {}) failed: {}", k + 1, fit_run, err));
    if (err.empty() && k == o.failing_fit)
      res.violations.push_back(fmt::format("fit {} (run {}) completed although its data has a NaN batch", k + 1, fit_run));
  }
  res.simulated_seconds = std::chrono::duration<double>(sched.clock().now() - started).count();
  if (res.timing.steps > 0) res.timing.mean_staleness = staleness_sum / static_cast<double>(res.timing.steps);
  if (timed && res.timing.train_seconds > 0)
    for (auto busy : timed->ps_busy()) res.timing.ps_load.push_back(busy / res.timing.train_seconds);
  if (timed) {
    auto pulls = timed->pull_seconds();
    std::sort(pulls.begin(), pulls.end());
    if (!pulls.empty()) {
      res.timing.pull_seconds = pulls[pulls.size() / 2];
      res.timing.pull_p10_seconds = pulls[pulls.size() / 10];
    }
  }
  res.rounds = rounds.size();
  for (auto r : bad_rounds)
    res.violations.push_back(fmt::format("synchronous round {}: more than {} steps, or steps reporting different losses", r,
                                         spec.num_workers));
  if (plan && !reference) res.injected = plan->injected();
  if (parts.plant) res.planted_fired = parts.plant->fired_in();
  if (hung) return out;
  if (deposed) {
    // Let the zombie wake up and try: its run must end, and not as a success.
    auto& old = deposed->result;
    for (int i = 0; i < 1000000 && old.wait_for(std::chrono::seconds(0)) != std::future_status::ready; ++i)
      if (!sched.try_run_once() && !sched.clock().trigger_timeout()) break;
    if (old.wait_for(std::chrono::seconds(0)) != std::future_status::ready)
      res.violations.push_back("the deposed coordinator's run never ended");
    else if (old.get())
      res.violations.push_back("the deposed coordinator completed its run");
  }
  // Exactly-once, from the shards' ledgers and the job's own data.
  auto ledgers_future = c.ledgers_async();
  for (int i = 0; i < 100000 && ledgers_future.wait_for(std::chrono::seconds(0)) != std::future_status::ready; ++i)
    if (!sched.try_run_once() && !sched.clock().trigger_timeout()) break;
  // The last fit may have ended with a shard that has no state (a restore that found no
  // good checkpoint): then there is nothing to read, legitimately only after such an end.
  bool stateless_end = !res.fit_errors.empty() && !res.fit_errors.back().empty();
  for (size_t k = 0; k < checked.size(); ++k) {
    if (checked_fit[k] < rolled_back_before) checked[k].complete = false;
    if (checked[k].complete) res.checked_whole.insert(checked_fit[k]);
  }
  try {
    auto ledgers = ledgers_future.get();
    if (ledgers.empty() && stateless_end) throw std::runtime_error("");  // nothing to check
    // Every row of every variable of the model, in exactly one partition's ledger.
    if (!stateless_end)
      for (auto& v : check_coverage(ledgers, ledger_variables(j, spec.num_ps))) res.violations.push_back("ledger: " + v);
    trace_hasher digest;
    auto text = ledgers_to_json(ledgers).dump();
    digest.bytes(text.data(), text.size());
    res.ledgers_digest = digest.h;
    auto verdict = check_ledgers(ledgers, checked);
    for (auto& v : verdict.violations) res.violations.push_back("ledger: " + v);
    for (auto& [run, n] : verdict.steps) res.steps += static_cast<int64_t>(n);
  } catch (const std::exception& e) {
    if (std::string(e.what()).size() > 0) res.violations.push_back(std::string("ledger: ") + e.what());
  }
  // Torn steps: a step whose shards applied slices of different computations.
  auto stats_future = cluster_internals::shard_stats(c);
  for (int i = 0; i < 100000 && stats_future.wait_for(std::chrono::seconds(0)) != std::future_status::ready; ++i)
    if (!sched.try_run_once() && !sched.clock().trigger_timeout()) break;
  std::map<step_id, std::set<std::tuple<uint32_t, uint64_t, uint64_t>>> computations;
  try {
    for (auto& s : stats_future.get())
      for (auto& a : s.apply_log) computations[a.step].emplace(a.worker, a.generation, a.attempt);
  } catch (const std::exception& e) {
    if (!stateless_end) res.violations.push_back(std::string("the shards' counters: ") + e.what());
  }
  for (auto& [step, by] : computations) res.torn += by.size() > 1 ? 1 : 0;
  auto vars_future = c.pull_variables();
  for (int i = 0; i < 100000 && vars_future.wait_for(std::chrono::seconds(0)) != std::future_status::ready; ++i)
    if (!sched.try_run_once() && !sched.clock().trigger_timeout()) break;
  model::parameter_store vars;
  try {
    vars = vars_future.get();
  } catch (const std::exception& e) {
    if (!stateless_end) res.violations.push_back(std::string("the final parameters: ") + e.what());
    res.trace_hash = trace.h;
    return out;
  }
  // A dynamic table's values: the rows of every id of the training data, in id order,
  // read from its shards (an id without a row reads its initial values).
  const auto& specs = j.structure.variables();
  for (size_t v = 0; v < specs.size(); ++v) {
    if (!specs[v].dynamic) continue;
    std::set<int64_t> ids;
    auto it = j.train(dataset::input_context{1, 0, 1}).iterate(0);
    while (auto b = it->next())
      for (auto id : model::batch_row_ids(*b, j.structure.row_feeds()[v], std::numeric_limits<int64_t>::max())) ids.insert(id);
    auto rows_future = c.lookup_async(specs[v].name, std::vector<int64_t>(ids.begin(), ids.end()));
    for (int i = 0; i < 100000 && rows_future.wait_for(std::chrono::seconds(0)) != std::future_status::ready; ++i)
      if (!sched.try_run_once() && !sched.clock().trigger_timeout()) break;
    try {
      vars.adopt(static_cast<model::variable_id>(v), std::make_shared<model::matrix>(rows_future.get()));
    } catch (const std::exception& e) {
      if (!stateless_end) res.violations.push_back(fmt::format("the rows of {}: {}", specs[v].name, e.what()));
    }
  }
  for (size_t v = 0; v < vars.size(); ++v) {
    const auto& m = vars[static_cast<model::variable_id>(v)];
    trace.bytes(m.data(), static_cast<size_t>(m.size()) * sizeof(float));
  }
  res.trace_hash = trace.h;
  res.values = std::make_shared<const model::parameter_store>(vars);
  res.values_digest = model::parameters_digest(*res.values);
  out.values = std::move(vars);
  return out;
}

}  // namespace

sim_result simulate(const job& j, const sim_options& o, std::shared_ptr<fault_plan> plan) {
  check_job(j, "simulate");
  auto faulty = run_once(j, o, plan, /*reference=*/false);
  auto& res = faulty.res;
  res.replay = fmt::format(
    "simulate(job, sim_options{{seed={}, faults={}, control_faults={}, ps_crashes={}, fits={}, failing_fit={}, "
    "failing_position={}, corrupt_checkpoint={}, take_over_after={}, checkpoint_every={}, plant={}}})",
    o.seed, o.faults, o.control_faults, o.ps_crashes, o.fits, o.failing_fit, o.failing_position, o.corrupt_checkpoint,
    o.take_over_after, o.checkpoint_every, to_string(o.plant));
  // Values: where the mode makes them independent of timing, equal to a fault-free run's.
  const auto& mode = j.spec.consistency;
  // A push lost on its way to one shard, or a worker that died after pushing to some,
  // can leave a step applied on some shards only: its re-run reads their part of it
  // (a torn step); so can a duplicated task computed again while the original's pushes
  // are delayed. The shards' apply logs count tears, but a shard killed later takes its
  // log along; so the plan itself says whether one could happen.
  bool may_tear = res.torn > 0, delayed_push = false, duplicated_task = false;
  for (auto& line : res.injected) {
    if (line.rfind("push ", 0) == 0 &&
        (line.find(": drop") != std::string::npos || line.find(": crash after") != std::string::npos))
      may_tear = true;
    delayed_push = delayed_push || (line.rfind("push ", 0) == 0 && line.find(": delay") != std::string::npos);
    duplicated_task = duplicated_task || (line.rfind("step ", 0) == 0 && line.find(": duplicate") != std::string::npos);
  }
  // A speculative copy of a straggler is another computation of its step too.
  may_tear = may_tear || (delayed_push && (duplicated_task || res.speculated > 0));
  bool sequential = mode == consistency_mode::bounded_staleness(0);
  bool promised = mode == consistency_mode::sync() || (sequential && !may_tear);
  if (sequential && may_tear) res.values_not_compared = "the plan could tear a step";
  if (promised && !faulty.lost_data.empty()) {
    res.values_not_compared = faulty.lost_data;
    promised = false;
  }
  if (o.compare_values && promised && faulty.values && res.fit_errors.size() == static_cast<size_t>(std::max(1, o.fits))) {
    auto clean = run_once(j, o, nullptr, /*reference=*/true);
    res.reference_trace = std::move(clean.res.trace);
    // Only runs that ended the same way (completed, or failed with the same error code)
    // can end with the same values.
    auto ending = [](const std::string& err) { return err.substr(0, err.find(':')); };
    bool same_endings = clean.values && clean.res.fit_errors.size() == res.fit_errors.size();
    for (size_t k = 0; same_endings && k < res.fit_errors.size(); ++k)
      same_endings = ending(res.fit_errors[k]) == ending(clean.res.fit_errors[k]);
    if (same_endings) {
      res.values_compared = true;
      for (size_t v = 0; v < faulty.values->size(); ++v) {
        const auto& a = (*faulty.values)[static_cast<model::variable_id>(v)];
        const auto& b = (*clean.values)[static_cast<model::variable_id>(v)];
        if (a.rows() != b.rows() || a.cols() != b.cols() ||
            std::memcmp(a.data(), b.data(), static_cast<size_t>(a.size()) * sizeof(float)) != 0) {
          res.violations.push_back(fmt::format("{}: variable {} differs from the fault-free run's ({} mode promises the same "
                                               "values)",
                                               mode.to_string(), j.structure.variables()[v].name,
                                               mode.to_string()));
          break;
        }
      }
    } else if (res.poisoned()) {
      res.values_not_compared = "a poison-step ending";
    } else {
      res.violations.push_back("the fits ended otherwise than in the fault-free run");
    }
  }
  return res;
}

sim_result simulate(const job& j, const sim_options& o) {
  check_job(j, "simulate");
  auto mode = j.spec.consistency;
  auto replicas = static_cast<int64_t>(std::max<uint64_t>(1, make_gate(mode, std::max(1, j.spec.num_workers))->round_size()));
  auto pipelines = cluster_internals::num_pipelines(j.spec);
  random_plan_options ro;
  ro.num_workers = j.spec.num_workers;
  ro.num_ps = j.spec.num_ps;
  ro.steps = steps_per_epoch(j, pipelines, replicas) * std::max(1, j.fit.epochs) * std::max(1, o.fits);
  ro.faults = o.faults;
  ro.ps_crashes = o.ps_crashes && (o.checkpoint_every > 0 || !j.spec.checkpoint_dir.empty());
  ro.control = o.control_faults;
  ro.timeout = std::chrono::duration_cast<caf::timespan>(j.spec.request_timeout);
  auto plan = fault_plan::random(o.seed, ro);
  // A corrupt checkpoint matters when a restore comes after it: a ps shard dies at a
  // push drawn from the later two thirds of the run.
  if (o.corrupt_checkpoint > 0 && ro.ps_crashes) {
    model::rng g{o.seed, /*stream=*/0xc0bb};
    auto per_shard = static_cast<uint64_t>(ro.steps);  // every step pushes to every shard once
    plan->add(fault_rule{delivery::kind::kill_receiver, actor_role::worker, -1, actor_role::ps,
                         static_cast<int32_t>(g.below(static_cast<uint64_t>(ro.num_ps))), "push",
                         1 + per_shard / 3 + g.below(std::max<uint64_t>(1, per_shard * 2 / 3)), 1, {}});
  }
  return simulate(j, o, plan);
}

}  // namespace actortrain
