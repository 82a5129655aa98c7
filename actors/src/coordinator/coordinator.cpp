// The coordinator actor: its behaviour — one line per message, grouped by phase, each
// handled in the file of its phase — the start and end of runs, and events (state.hpp
// lists what each file holds).
#include "state.hpp"

#include "../core/planted.hpp"
#include "../core/thread_name.hpp"

namespace actortrain {

namespace coord {

void emit(coord_state& st, event e) {
  e.run = st.run;
  e.coordinator_epoch = st.opts.coordinator_epoch;
  e.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - st.started).count();
  note_for_status(st, e);
  if (!st.opts.events) return;
  st.opts.events->push(std::move(e));
}

fence current_fence(const coord_state& st) {
  fence f;
  f.coordinator_epoch = st.opts.coordinator_epoch;
  f.recovery_epoch = st.recovery_epoch;
  return f;
}

// Forgets the dispatch indices and the open round (their steps will not be applied).
void forget_round(coord_state& st) { st.round.forget(); }

uint64_t round_size(const coord_state& st) { return st.opts.gate->round_size(); }

void fail_run(self_ptr self, caf::error err) {
  auto& st = self->state;
  auto text = describe(err);
  if (st.ph == phase::idle) return;
  bool eval_only = st.standalone_eval;
  st.ph = phase::idle;
  st.quiescing = false;
  st.checkpointing = false;
  ++st.ckpt_attempt;
  ++st.tick;
  st.recovering = false;
  st.resuming = false;
  st.eval_outputs = false;
  st.eval_batch_events = false;
  st.outputs.clear();
  // Nothing of a failed run counts later: its tasks' late answers find nothing pending,
  // and the next run begins under new epochs, which its late pushes lack.
  forget_work(st);
  st.clean_since_commit = false;
  for (auto& x : st.extra_ckpts)
    if (x.rp) x.rp->deliver(make_error(error_code::checkpoint_failed, "the run failed before the checkpoint: " + text));
  st.extra_ckpts.clear();
  event e;
  e.kind = event_kind::warning;
  e.text = "the run failed: " + text;
  emit(st, std::move(e));
  if (eval_only)
    st.eval_rp.deliver(std::move(err));
  else
    st.run_rp.deliver(std::move(err));
}

bool nothing_in_flight(const coord_state& st) {
  return st.work.idle() && st.round.empty();
}

// Writes the first asked-for checkpoint (nothing may be in flight), answers its asker,
// then runs `then`.
void write_extra_checkpoint(self_ptr self, std::function<void()> then) {
  auto& st = self->state;
  auto x = std::move(st.extra_ckpts.front());
  st.extra_ckpts.pop_front();
  st.quiesce_began = std::chrono::steady_clock::now();
  auto rp = std::move(x.rp);
  auto step = static_cast<int64_t>(st.steps_total);
  if (x.target.dir == st.extra_dir && step == st.extra_step) {  // asked twice at one step: it is written
    if (rp) rp->deliver(st.extra_path);
    then();
    return;
  }
  write_checkpoint_to(self, x.target, [self, rp, then, dir = x.target.dir, step](const std::string& path) mutable {
    auto& st = self->state;
    st.extra_dir = dir;
    st.extra_step = step;
    st.extra_path = path;
    if (rp) rp->deliver(path);
    then();
  });
}

void finish_run(self_ptr self) {
  auto& st = self->state;
  if (!st.extra_ckpts.empty() && st.ph != phase::idle && nothing_in_flight(st)) {
    write_extra_checkpoint(self, [self] { finish_run(self); });
    return;
  }
  if (!st.opts.checkpoint_dir.empty() &&
      (st.last_committed != static_cast<int64_t>(st.steps_total) || !st.clean_since_commit) && st.ph != phase::idle &&
      st.work.idle()) {
    // The trained state is committed before the run returns (restores after it, and
    // resuming a finished run, start from here).
    st.quiesce_began = std::chrono::steady_clock::now();
    write_checkpoint_now(self, [self] { finish_run(self); });
    return;
  }
  st.ph = phase::idle;
  run_summary s;
  s.run = st.run;
  s.steps = static_cast<int64_t>(st.applied_run);
  s.ran_out = st.ran_out;
  s.stopped_epoch = st.stopped_epoch;
  s.restored_epoch = st.restored_epoch;
  s.visits = std::move(st.visits);
  st.visits.clear();
  for (auto& [k, v] : st.history) {
    s.keys.push_back(k);
    s.values.push_back(v);
  }
  st.run_rp.deliver(std::move(s));
}

// Pipeline `p`'s dataset shard is gone (a validation pipeline's with `eval`): its steps
// wait for a new one (dataset_lost, count 1 for a validation pipeline).
void mark_pipeline_lost(coord_state& st, uint32_t p, std::string why, bool eval) {
  if (eval) {
    st.eval_lost.insert(p);  // also for the evaluations of later epochs
    if (p < st.eval_pipes.size()) st.eval_pipes[p].lost = true;
  } else {
    st.pipes[p].lost = true;
  }
  event e;
  e.kind = event_kind::dataset_lost;
  e.pipeline = p;
  e.count = eval ? 1 : 0;
  e.text = std::move(why);
  emit(st, std::move(e));
}

// A fit: a new run (or the resumed one) starts.
caf::result<run_summary> on_fit(self_ptr self, run_spec& spec) {
  auto& st = self->state;
  if (st.ph != phase::idle)
    return make_error(error_code::invalid_request, "a run is in progress: fit calls do not overlap");
  if (spec.pipelines.empty()) return make_error(error_code::invalid_request, "fit without dataset shards");
  if (spec.epochs < 0) return make_error(error_code::invalid_request, fmt::format("epochs = {} < 0", spec.epochs));
  if (spec.on_demand && round_size(st) > 0)
    return make_error(error_code::invalid_request, "scheduled steps need an asynchronous consistency (not sync rounds)");
  if (spec.on_demand && !spec.resume_from.empty() && spec.on_demand != st.grants_loop)
    return make_error(error_code::invalid_request, "a run of scheduled steps resumes only with its grants");
  if (!alive_workers(st)) return make_error(error_code::no_workers, "the cluster has no live worker");
  ++st.run;
  st.spec = std::move(spec);
  st.resuming = !st.spec.resume_from.empty();
  if (st.resuming) st.restore_dir = st.spec.resume_from;  // also what a lost shard rolls back to
  st.run_rp = self->make_response_promise<run_summary>();
  st.epoch = st.spec.initial_epoch;
  st.history.clear();
  st.visits.clear();
  st.ran_out = false;
  st.gate_epoch = st.kept_epoch = st.stopped_epoch = st.restored_epoch = -1;
  st.restore_at_end = false;
  st.dispatched_run = st.applied_run = 0;
  st.applied_epoch = st.dispatched_epoch = 0;
  forget_work(st);
  st.round.continue_at(1);
  st.work.forget_failures();
  st.pipes.clear();
  for (auto& s : st.spec.pipelines) {
    st.pipes.push_back(pipeline_slot{s, 0, 0, UINT64_MAX});
    self->monitor(s);
  }
  for (auto& s : st.spec.eval_pipelines) self->monitor(s);
  st.eval_lost.clear();
  st.rr = 0;
  st.standalone_eval = false;
  st.run_start_committed = false;
  if (st.spec.on_demand) {
    st.spec.epochs = INT32_MAX;  // the epochs turn with the data, the run ends with its grants
    if (st.grants_loop != st.spec.on_demand) {  // none came ahead of the run
      st.grants.reset();
      st.grants_loop = st.spec.on_demand;
    }
  }
  event e;
  e.kind = event_kind::run_begin;
  e.count = st.spec.epochs;
  emit(st, std::move(e));
  st.ph = phase::initializing;
  // A shard lost meanwhile: the run starts once it is replaced (at most worker_wait).
  if (!st.lost_ps.empty()) self->delayed_send(self, st.opts.worker_wait, recover_atom::value, ++st.recoveries);
  start_run(self);
  return st.run_rp;
}

// Steps the application scheduled: kept from their arrival (they may overtake the run's
// request), dispatched while their run is on.
void on_grant(self_ptr self, step_grants& g) {
  auto& st = self->state;
  if (g.loop < st.grants_loop) return;  // an earlier loop's
  if (g.loop > st.grants_loop) {
    st.grants.reset();
    st.grants_loop = g.loop;
  }
  try {
    st.grants.add(g.first, g.steps, g.replicas, g.end);
  } catch (const std::invalid_argument& e) {
    if (st.spec.on_demand == g.loop && st.ph != phase::idle) fail_run(self, make_error(error_code::invalid_request, e.what()));
    return;
  }
  if (st.spec.on_demand == g.loop && st.ph == phase::training) dispatch(self);
}

// An evaluation on its own (evaluate, predict): every batch once.
caf::result<eval_summary> on_eval(self_ptr self, eval_spec& spec) {
  auto& st = self->state;
  if (st.ph != phase::idle) return make_error(error_code::invalid_request, "evaluate while a run is in progress");
  if (spec.pipelines.empty()) return make_error(error_code::invalid_request, "evaluate without dataset shards");
  if (!alive_workers(st)) return make_error(error_code::no_workers, "the cluster has no live worker");
  st.eval_rp = self->make_response_promise<eval_summary>();
  st.standalone_eval = true;
  st.eval_outputs = spec.outputs;
  st.eval_batch_events = spec.batch_events;
  st.eval_done = 0;
  st.outputs.clear();
  auto shards = spec.pipelines;
  auto go = [self, shards] {
    self->state.ps_ready = true;
    start_eval(self, shards);
    dispatch(self);
  };
  st.ph = phase::initializing;
  if (st.ps_ready)
    go();
  else
    init_shards(self, go);
  return st.eval_rp;
}

// New hyperparameters for every shard.
caf::result<caf::ok_atom> on_hyperparams(self_ptr self, hyperparams_request& req) {
  auto& st = self->state;
  req.f = current_fence(st);
  req.id = ++st.control_id;
  auto rp = self->make_response_promise<caf::ok_atom>();
  ask_every_shard<caf::ok_atom>(
    self, "new hyperparameters", [] { return true; },
    [self, req, rp]() mutable {
      // Every shard took them (the cluster checked them first): so does the copy
      // checkpoints describe.
      if (auto& o = self->state.optimizer)
        for (auto& [k, v] : req.values) o->set_hyperparam(k, v);
      rp.deliver(caf::ok_atom::value);
    },
    [rp](caf::error& e) mutable { rp.deliver(std::move(e)); }, hyper_atom::value, req);
  return rp;
}

coordinator_actor::behavior_type coordinator_impl(self_ptr self, coordinator_options opts) {
  if (opts.detached) detail::name_this_thread("at.coordinator");
  auto& st = self->state;
  st.opts = std::move(opts);
  if (st.opts.optimizer) st.optimizer = std::make_unique<model::optimizer_set>(*st.opts.optimizer);
  if (!st.opts.gate) st.opts.gate = dispatch_when_free();
  st.started = std::chrono::steady_clock::now();
  for (size_t i = 0; i < st.opts.workers.size(); ++i) {
    worker_slot w;
    w.handle = st.opts.workers[i];
    w.id = static_cast<uint32_t>(i);
    self->monitor(w.handle);
    st.workers.push_back(w);
  }
  for (auto& p : st.opts.ps) self->monitor(p);
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    for (auto& w : st.workers)
      if (w.handle.address() == dm.source) on_worker_down(self, w.id, dm.reason);
    for (size_t i = 0; i < st.opts.ps.size(); ++i)
      if (st.opts.ps[i].address() == dm.source) on_ps_down(self, static_cast<uint32_t>(i), dm.reason);
    if (st.ph == phase::idle || st.standalone_eval) return;
    for (size_t p = 0; p < st.pipes.size(); ++p)
      if (!st.pipes[p].lost && st.pipes[p].shard.address() == dm.source)
        mark_pipeline_lost(st, static_cast<uint32_t>(p), describe(dm.reason));
    // A validation shard may die between evaluations too (a worker asks ahead for the
    // first batch of a queued evaluation task).
    for (size_t p = 0; p < st.spec.eval_pipelines.size(); ++p)
      if (!st.eval_lost.count(static_cast<uint32_t>(p)) && st.spec.eval_pipelines[p].address() == dm.source)
        mark_pipeline_lost(st, static_cast<uint32_t>(p), describe(dm.reason), /*eval=*/true);
  });
  self->set_exception_handler([self](caf::scheduled_actor*, std::exception_ptr& eptr) -> caf::error {
    auto err = make_error(error_code::user_error, "coordinator: " + exception_text(eptr));
    fail_run(self, err);
    return err;
  });
  return {
    // -- runs: fit, evaluate, hyperparameters (this file) ------------------------------------
    [self](fit_atom, run_spec& spec) -> caf::result<run_summary> { return on_fit(self, spec); },
    [self](eval_atom, eval_spec& spec) -> caf::result<eval_summary> { return on_eval(self, spec); },
    [self](hyper_atom, hyperparams_request& req) -> caf::result<caf::ok_atom> { return on_hyperparams(self, req); },
    [self](grant_atom, step_grants& g) { on_grant(self, g); },
    // -- epochs: the gate (epochs.cpp) -------------------------------------------------------
    [self](gate_atom, uint64_t run, int64_t epoch, gate_decision& d) -> caf::result<caf::ok_atom> {
      return on_gate_decision(self, run, epoch, d);
    },
    [self](gate_atom, uint64_t id) { on_gate_timeout(self, id); },
    // -- checkpoints (checkpoints.cpp) -------------------------------------------------------
    [self](ckpt_atom, const checkpoint_target& t, int32_t keep) -> caf::result<std::string> {
      return on_checkpoint_request(self, t, keep);
    },
    [self](ckpt_atom, uint64_t id) { on_checkpoint_tick(self, id); },
    // -- dispatch: speculation (dispatch.cpp) ------------------------------------------------
    [self](slow_atom, uint64_t id) { on_slow(self, id); },
    // -- membership: workers and dataset shards (membership.cpp) -----------------------------
    [self](join_atom, worker_actor handle, uint32_t id) -> caf::result<uint64_t> { return on_join(self, handle, id); },
    [self](outage_atom, uint64_t id) { on_outage(self, id); },
    [self](source_atom, uint32_t p, dataset_shard_actor shard, bool eval) -> caf::result<caf::ok_atom> {
      return on_source(self, p, shard, eval);
    },
    // -- recovery: a lost ps shard (recovery.cpp) --------------------------------------------
    [self](replace_atom, uint32_t index, ps_shard_actor shard) -> caf::result<caf::ok_atom> {
      return on_replace(self, index, shard);
    },
    [self](recover_atom, uint64_t id) { on_recover_deadline(self, id); },
    // -- status (status.cpp) -----------------------------------------------------------------
    [self](report_atom) -> caf::result<status_report> { return on_report(self); },
  };
}

}  // namespace coord

coordinator_actor spawn_coordinator(caf::actor_system& sys, coordinator_options opts) {
  if (opts.ps.empty()) throw std::invalid_argument("spawn_coordinator: no ps shards");
  if (!opts.placement || !opts.initial) throw std::invalid_argument("spawn_coordinator: no placement or initial values");
  if (!opts.seam) throw std::invalid_argument("spawn_coordinator: no send seam");
  if (opts.tasks_per_worker < 1)
    throw std::invalid_argument(fmt::format("tasks_per_worker = {} < 1", opts.tasks_per_worker));
  if (opts.steps_per_execution < 1)
    throw std::invalid_argument(fmt::format("steps_per_execution = {} < 1", opts.steps_per_execution));
  bool detached = opts.detached;
  if (detached) return sys.spawn<caf::detached>(coord::coordinator_impl, std::move(opts));
  return sys.spawn(coord::coordinator_impl, std::move(opts));
}

}  // namespace actortrain
