// The coordinator actor: its behaviour, dispatch, and the steps' answers (state.hpp;
// epochs.cpp, checkpoints.cpp and recovery.cpp hold the rest).
#include "state.hpp"

#include "../core/planted.hpp"
#include "../core/thread_name.hpp"

namespace actortrain {

namespace coord {


// What the status report keeps of an event.
void note_for_status(coord_state& st, const event& e) {
  constexpr size_t steps_kept = 64, events_kept = 12;
  std::string what;
  auto with_why = [&](std::string s) { return e.text.empty() ? s : s + ": " + e.text; };
  switch (e.kind) {
    case event_kind::step_done: {
      auto& q = st.recent_steps[e.worker];
      q.emplace_back(e.seconds, e.staleness);
      if (q.size() > steps_kept) q.pop_front();
      return;
    }
    case event_kind::checkpoint_done:
      st.checkpoint_step = static_cast<int64_t>(e.count);
      st.checkpoint_dir = e.text;
      st.checkpoint_at = e.seconds;
      return;
    case event_kind::worker_lost: what = with_why(fmt::format("worker {} (generation {}) lost", e.worker, e.generation)); break;
    case event_kind::worker_joined:
      if (e.generation <= 1) return;
      what = fmt::format("worker {} rejoined as generation {}", e.worker, e.generation);
      break;
    case event_kind::steps_requeued: what = fmt::format("{} step(s) of worker {} re-queued", e.count, e.worker); break;
    case event_kind::ps_lost: what = with_why(fmt::format("ps shard {} lost", e.count)); break;
    case event_kind::ps_restored: what = fmt::format("every ps shard restored to the checkpoint of step {}", e.count); break;
    case event_kind::dataset_lost: what = with_why(fmt::format("dataset shard {} lost", e.pipeline)); break;
    case event_kind::dataset_rebuilt: what = fmt::format("dataset shard {} rebuilt", e.pipeline); break;
    case event_kind::resumed: what = fmt::format("resumed from the checkpoint of step {}", e.count); break;
    default: return;
  }
  st.recent_events.emplace_back(e.seconds, std::move(what));
  if (st.recent_events.size() > events_kept) st.recent_events.pop_front();
}

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

void dispatch(self_ptr self);
void end_epoch(self_ptr self);
void forget_work(coord_state& st);
void on_ps_down(self_ptr self, uint32_t index, const caf::error& reason);

void on_worker_down(self_ptr self, uint32_t wid, const caf::error& reason);

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

void write_checkpoint_now(self_ptr self, std::function<void()> then);
void write_checkpoint_to(self_ptr self, ckpt_target target, std::function<void(const std::string&)> then);

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
void mark_pipeline_lost(coord_state& st, uint32_t p, std::string why, bool eval = false) {
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

// Worker `wid` no longer holds task `id`.
void settled(coord_state& st, uint32_t wid, uint64_t id) {
  --st.workers[wid].outstanding;
  if (st.workers[wid].isolating == id) st.workers[wid].isolating = 0;
}

// Removes and returns task `id` of worker `wid` (step_queue::take).
std::optional<pending_task> take_pending(coord_state& st, uint32_t wid, uint64_t id) {
  auto out = st.work.take(wid, id);
  if (out) settled(st, wid, id);
  return out;
}

// The next task for a free worker, if the gate and the data allow one.
std::optional<pending_task> next_task(coord_state& st, const worker_slot& to) {
  if (st.ph == phase::evaluating) {
    for (size_t n = 0; n < st.eval_pipes.size(); ++n) {
      auto p = (st.rr + n) % st.eval_pipes.size();
      auto& ps = st.eval_pipes[p];
      if (ps.ended() || ps.lost) continue;  // a lost one waits for its new shard
      st.rr = p + 1;
      pending_task t;
      t.eval = true;
      t.task.f = current_fence(st);
      t.task.source = ps.shard;
      t.task.training = false;
      t.task.outputs = st.eval_outputs;
      for (int32_t k = 0; k < st.opts.steps_per_execution && ps.next < ps.end; ++k)
        t.task.steps.push_back(step_id{st.run, static_cast<uint32_t>(p), ps.next++});
      return t;
    }
    return std::nullopt;
  }
  if (st.ph != phase::training) return std::nullopt;
  // Re-queued steps go first, but not back to a worker (generation) they failed on while
  // a live worker they have not failed on exists: a cut-off worker would fail them again
  // and again.
  std::vector<std::pair<uint32_t, uint64_t>> alive;
  for (auto& w : st.workers)
    if (w.alive) alive.emplace_back(w.id, w.generation);
  // A suspect (a step that failed before) runs alone on an idle worker, so that if it
  // fails again it is the one to blame. While one waits, busy workers get no new
  // steps: they drain, and the first idle one takes it.
  bool suspect_waiting = false;
  auto again = st.work.take_requeued([&](const step_task& t) {
    if (st.work.avoids(t, {to.id, to.generation}, alive)) return false;
    auto pipe = t.steps.front().pipeline;
    bool lost = pipe < st.pipes.size() && st.pipes[pipe].lost;  // waits for its new shard
    if (st.work.suspect(t) && !lost) {
      suspect_waiting = true;
      if (to.outstanding > 0) return false;
    }
    return !lost;
  });
  if (again) {
    pending_task t;
    t.task = std::move(*again);
    auto pipe = t.task.steps.front().pipeline;
    t.task.f = current_fence(st);
    if (pipe < st.pipes.size()) t.task.source = st.pipes[pipe].shard;  // a rebuilt shard, if any
    return t;
  }
  if (st.quiescing || !st.extra_ckpts.empty()) return std::nullopt;  // a checkpoint waits: only re-queued steps go out
  if (suspect_waiting && to.outstanding > 0) return std::nullopt;
  if (st.round.closing()) return std::nullopt;  // the next round starts once this one is applied
  gate_view v{st.round.dispatched(), st.applied_run, st.round.oldest_unapplied(), st.work.in_flight(),
              st.round.members()};
  auto room = st.opts.gate->room(v);
  if (room == 0) return std::nullopt;
  int64_t budget = st.spec.steps_per_epoch > 0 ? st.spec.steps_per_epoch - st.dispatched_epoch : INT64_MAX;
  if (budget <= 0) return std::nullopt;
  // With pipeline affinity a worker takes its own pipeline (id modulo their number)
  // while that has steps, so a replica of it in the worker's process serves its batches
  // in order; then the others in turn.
  const size_t own = st.pipes.empty() ? 0 : to.id % st.pipes.size();
  bool own_open = st.opts.pipeline_affinity && !st.pipes.empty() && !st.pipes[own].ended() && !st.pipes[own].lost;
  for (size_t n = 0; n < st.pipes.size(); ++n) {
    auto p = own_open ? own : (st.rr + n) % st.pipes.size();
    auto& ps = st.pipes[p];
    if (ps.lost && !ps.ended() && st.opts.gate->ordered()) return std::nullopt;  // its turn: wait for its new shard
    if (ps.ended() || ps.lost) continue;
    if (!own_open) st.rr = p + 1;
    pending_task t;
    t.task.f = current_fence(st);
    t.task.source = ps.shard;
    t.task.epoch = st.spec.steps_per_epoch > 0 ? 0 : static_cast<uint64_t>(st.epoch);
    t.task.epoch_begin = ps.epoch_begin;
    int64_t k = std::min<int64_t>(st.opts.steps_per_execution, budget);
    if (room < static_cast<uint64_t>(k)) k = static_cast<int64_t>(room);
    for (int64_t j = 0; j < k && ps.next < ps.end; ++j) {
      step_id s{st.run, static_cast<uint32_t>(p), ps.next++};
      st.round.dispatch(s, round_size(st) > 0);
      t.task.steps.push_back(s);
    }
    st.dispatched_epoch += static_cast<int64_t>(t.task.steps.size());
    st.dispatched_run += t.task.steps.size();
    return t;
  }
  return std::nullopt;
}

void requeue(self_ptr self, step_task task, const caf::error& why) {
  auto& st = self->state;
  for (auto& s : task.steps) {
    int n = st.work.failed(s, task.f.worker, task.f.worker_generation);
    if (n >= st.opts.poison_limit) {
      // Where the data is: batch k of the epoch in the pipeline's order (its position
      // counts on across epochs), so the records are those the dataset_fn's pipeline
      // yields as its k-th batch.
      fail_run(self, make_error(error_code::poison_step,
                                fmt::format("step {} (the batch at position {} of input pipeline {}: batch {} of "
                                            "the pipeline's epoch) failed {} times, last on worker {}: {}",
                                            to_string(s), s.position, s.pipeline, s.position - task.epoch_begin, n,
                                            task.f.worker, describe(why))));
      return;
    }
  }
  st.work.requeue(std::move(task));
}

// Removes the other copy of a speculated task (its answer, if it comes, is stale).
void drop_twins(coord_state& st, uint64_t id) {
  for (auto wid : st.work.drop_twins(id)) settled(st, wid, id);
}

// Step `r` is applied on every shard: into the epoch's means, the visitation log and the
// counters (a checkpoint may fall due), and a step_done event. `shown_loss` is what the
// event reports (a synchronous round's loss for each of its steps); `round` is 0 outside
// synchronous rounds.
void count_step(self_ptr self, const step_result& r, double shown_loss, uint64_t round) {
  auto& st = self->state;
  st.train_acc.add(r);
  if (st.spec.visitation_log) st.visits.push_back(visit{r.step.run, r.step.pipeline, r.step.position, r.worker, r.generation});
  ++st.applied_epoch;
  ++st.applied_run;
  ++st.steps_total;
  st.clean_since_commit = false;
  if (!st.opts.checkpoint_dir.empty() && !st.quiescing &&
      ((st.opts.checkpoint_every > 0 && st.steps_total >= st.next_checkpoint) || st.time_due)) {
    st.quiescing = true;
    st.quiesce_began = std::chrono::steady_clock::now();
  }
  if (r.worker < st.workers.size()) ++st.workers[r.worker].steps;
  event e;
  e.kind = event_kind::step_done;
  e.epoch = st.epoch;
  e.pipeline = r.step.pipeline;
  e.position = r.step.position;
  e.worker = r.worker;
  e.generation = r.generation;
  e.loss = shown_loss;
  e.round = round;
  e.examples = r.example_count;
  e.staleness = r.max_staleness;
  e.batch_us = r.timings.batch_us;
  e.pull_us = r.timings.pull_us;
  e.compute_us = r.timings.compute_us;
  e.push_us = r.timings.push_us;
  e.count = st.applied_epoch;
  e.total = st.steps_total;
  e.values = st.train_acc.values();
  emit(st, std::move(e));
}

void on_task_result(self_ptr self, uint32_t wid, uint64_t id, task_result& res) {
  auto& st = self->state;
  auto pt = take_pending(st, wid, id);
  if (!pt) return;  // a stale answer (the task was given up after a timeout or a loss)
  if (!pt->eval) {
    if (pt->speculated) drop_twins(st, pt->id);
    st.task_seconds.push_back(std::chrono::duration<double>(self->clock().now() - pt->sent).count());
    if (st.task_seconds.size() > 64) st.task_seconds.pop_front();
  }
  bool eval = pt->eval;
  for (auto& r : res.steps) {
    auto& pipes = eval ? st.eval_pipes : st.pipes;
    if (r.step.pipeline >= pipes.size()) continue;
    auto& ps = pipes[r.step.pipeline];
    if (r.end_of_data) {
      ps.end = std::min(ps.end, r.step.position);
      if (!eval) st.round.past_the_data(r.step);
      continue;
    }
    if (eval) {
      if (st.eval_outputs)
        st.outputs[r.step] = std::move(r.outputs);  // a re-run batch replaces its first answer
      else
        st.eval_acc.add(r);
      continue;
    }
    if (round_size(st) > 0) {
      // Held on the shards until the round closes; the first answer of a step counts.
      st.round.answered(r.step, std::move(r));
      continue;
    }
    st.round.settle(r.step);
    count_step(self, r, r.loss, 0);
  }
  // Positions handed out past a pipeline's end come back as end_of_data; nothing to redo.
  dispatch(self);
}

void on_task_error(self_ptr self, uint32_t wid, uint64_t id, caf::error& err) {
  auto& st = self->state;
  // The worker is gone (its mailbox bounced the task): handle it as its down message
  // would, once, instead of counting a failure against each of its steps.
  // A bounce of a task that is no longer pending (its worker was lost and replaced
  // since) says nothing about the worker now in the slot.
  if (err == caf::sec::request_receiver_down) {
    bool current = false;
    if (auto t = st.work.held(wid, id); t && wid < st.workers.size())
      current = t->task.f.worker_generation == st.workers[wid].generation;
    if (current) on_worker_down(self, wid, err);
    return;
  }
  auto found = take_pending(st, wid, id);
  if (!found) return;
  auto pt = std::move(*found);
  if (pt.speculated && st.work.has_twin(pt.id)) return;  // the other copy may still answer
  if ((code_of(err) == error_code::source_lost || code_of(err) == error_code::shard_lost) && !pt.eval) {
    st.work.requeue(std::move(pt.task));  // not the step's fault: no failure counted
    dispatch(self);
    return;
  }
  if (is_application_error(err)) {
    fail_run(self, std::move(err));
    return;
  }
  if (pt.eval && st.standalone_eval && code_of(err) == error_code::source_lost) {
    fail_run(self, std::move(err));  // nothing rebuilds the shards of a standalone evaluation
    return;
  }
  if (pt.eval) {
    // Evaluation is read-only: run the batches again.
    auto& ps = st.eval_pipes[pt.task.steps.front().pipeline];
    ps.next = std::min(ps.next, pt.task.steps.front().position);
  } else {
    requeue(self, std::move(pt.task), err);
  }
  dispatch(self);
}

// Per pipeline, the lowest position of the run that is not known applied: below it every
// step is applied on every shard it touches, so shards may forget those step ids.
std::vector<uint64_t> watermark(const coord_state& st) {
  std::vector<uint64_t> w;
  w.reserve(st.pipes.size());
  // Positions at or past a pipeline's end were not applied: the next epoch uses them.
  for (auto& p : st.pipes) w.push_back(std::min(p.next, p.end));
  return st.work.watermark(std::move(w));
}

void send_task(self_ptr self, worker_slot& w, pending_task t) {
  auto& st = self->state;
  ++w.outstanding;
  auto wid = w.id;
  t.task.f.worker = wid;
  t.task.f.worker_generation = w.generation;
  if (t.id == 0) t.id = ++st.next_task_id;
  t.sent = self->clock().now();
  if (!t.eval && !t.speculated && st.opts.speculate_after > 0 && st.task_seconds.size() >= 8) {
    std::vector<double> d(st.task_seconds.begin(), st.task_seconds.end());
    std::nth_element(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(d.size() / 2), d.end());
    auto wait = std::chrono::duration<double>(st.opts.speculate_after * std::max(d[d.size() / 2], 1e-3));
    self->delayed_send(self, std::chrono::duration_cast<caf::timespan>(wait), slow_atom::value, t.id);
  }
  bool eval = t.eval;
  auto task = t.task;
  auto id = t.id;
  st.work.sent(wid, std::move(t));
  if (!eval) task.watermark = watermark(st);  // with this task in flight: it is not applied yet
  task.ps.reserve(st.opts.ps.size());
  for (auto& p : st.opts.ps) task.ps.push_back(caf::actor_cast<caf::actor>(p));
  // A task may run steps_per_execution steps: give it that many timeouts.
  auto timeout = st.opts.timeout * std::max<int64_t>(1, static_cast<int64_t>(task.steps.size()));
  st.opts.seam->request(self, w.handle, timeout, step_atom::value, std::move(task))
    .then([self, wid, id](task_result& r) { on_task_result(self, wid, id, r); },
          [self, wid, id](caf::error& e) { on_task_error(self, wid, id, e); });
}

bool phase_complete(const coord_state& st) {
  if (!st.work.idle() || !st.round.empty()) return false;
  if (st.ph == phase::evaluating) {
    for (auto& p : st.eval_pipes)
      if (!p.ended()) return false;
    return true;
  }
  if (st.spec.steps_per_epoch > 0 && st.applied_epoch >= st.spec.steps_per_epoch) return true;
  for (auto& p : st.pipes)
    if (!p.ended()) return false;
  return true;
}

// True when no more steps can join the open synchronous round: the epoch has none left
// (its budget is spent or every pipeline's data ended).
bool epoch_dispatched(const coord_state& st) {
  if (st.ph != phase::training) return true;
  if (st.spec.steps_per_epoch > 0 && st.dispatched_epoch >= st.spec.steps_per_epoch) return true;
  for (auto& p : st.pipes)
    if (!p.ended()) return false;  // a lost pipeline's steps wait for its new shard
  return true;
}

// The open round is complete: every step answered (pushes held) and no more to come.
bool round_ready(const coord_state& st) { return st.round.ready(round_size(st), epoch_dispatched(st)); }

// Every shard applied the round: its steps count as applied, each reporting the round's
// loss (the example-weighted mean, what every replica of a synchronous strategy sees).
void round_applied(self_ptr self, uint64_t staleness) {
  auto& st = self->state;
  auto round = st.round.applied();
  for (auto& [s, r] : round.results) {
    r.max_staleness = std::max(r.max_staleness, staleness);
    count_step(self, r, round.loss, round.number);
  }
  dispatch(self);
}

// What the shards of a closing round have answered.
struct round_close {
  uint64_t attempt = 0;
  round_request req;
  size_t remaining = 0;
  uint64_t staleness = 0;
};

// Sends shard `i` the round's manifest (ask_shard: a timeout is retried; a manifest is
// idempotent, a shard applies what it holds for the steps once); a shard that is gone
// starts a recovery; other errors end the run.
void send_manifest(self_ptr self, std::shared_ptr<round_close> rc, size_t i) {
  ask_shard<round_reply>(
    self, i, fmt::format("the manifest of synchronous round {}", rc->req.round),
    [self, rc] { return self->state.round.current(rc->attempt); },
    [self, rc](round_reply& r) {
      if (!self->state.round.current(rc->attempt)) return;
      rc->staleness = std::max(rc->staleness, r.max_staleness);
      if (--rc->remaining == 0) round_applied(self, rc->staleness);
    },
    [self, rc, i](caf::error& e) {
      if (!self->state.round.current(rc->attempt)) return;
      ps_failed(self, i, e, fmt::format("ps shard {} did not apply synchronous round {}: ", i, rc->req.round));
    },
    1, round_atom::value, rc->req);
}

// Sends the round's manifest to every shard; once all applied it, round_applied.
void close_round(self_ptr self) {
  auto& st = self->state;
  auto m = st.round.close();
  auto rc = std::make_shared<round_close>();
  rc->attempt = m.attempt;
  rc->req.f = current_fence(st);
  rc->req.round = m.number;
  rc->req.steps = std::move(m.steps);
  rc->req.example_count = m.example_count;
  rc->remaining = st.opts.ps.size();
  for (size_t i = 0; i < st.opts.ps.size(); ++i) send_manifest(self, rc, i);
}

void dispatch(self_ptr self) {
  auto& st = self->state;
  if (st.recovering || st.checkpointing || st.ph == phase::gated) return;
  if (!st.extra_ckpts.empty() && nothing_in_flight(st) && st.ph != phase::idle && st.ph != phase::initializing) {
    write_extra_checkpoint(self, [self] { dispatch(self); });
    return;
  }
  if (st.quiescing && nothing_in_flight(st)) {
    // Nothing in flight or queued: every shard's state is at one step.
    if (st.clean_since_commit && static_cast<int64_t>(st.steps_total) == st.last_committed &&
        st.restore_dir == st.opts.checkpoint_dir) {
      st.quiescing = false;  // that step is committed already (a resumed or restored run)
      st.time_due = false;
    } else {
      write_checkpoint_now(self, [self] {
        auto& st = self->state;
        st.quiescing = false;
        if (st.time_due) {
          st.time_due = false;
          schedule_tick(self);
        }
        next_checkpoint_after(st);
        dispatch(self);
      });
      return;
    }
  }
  for (;;) {
    if (st.ph != phase::training && st.ph != phase::evaluating) return;
    bool any = false;
    // The least busy workers first, ties taken in turn: when the gate lets only a few
    // steps out (bounded staleness, rounds), they go to idle workers, a newcomer too.
    std::vector<size_t> order(st.workers.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = (st.first_worker + k) % order.size();
    std::stable_sort(order.begin(), order.end(),
                     [&st](size_t a, size_t b) { return st.workers[a].outstanding < st.workers[b].outstanding; });
    for (auto k : order) {
      auto& w = st.workers[k];
      if (!w.alive || w.outstanding >= st.opts.tasks_per_worker || w.isolating != 0) continue;
      auto t = next_task(st, w);
      if (!t) continue;  // another worker may still get one (re-queued steps avoid some)
      if (t->task.steps.empty()) continue;
      if (!t->eval && st.work.suspect(t->task)) {
        if (t->id == 0) t->id = ++st.next_task_id;
        w.isolating = t->id;
      }
      send_task(self, w, std::move(*t));
      st.first_worker = (k + 1) % st.workers.size();
      any = true;
    }
    if (round_ready(st)) {
      close_round(self);
      return;
    }
    if (phase_complete(st)) {
      if (st.ph == phase::evaluating && st.standalone_eval) {
        st.ph = phase::idle;
        st.standalone_eval = false;
        eval_summary s;
        if (st.eval_outputs) {
          for (auto& [step, out] : st.outputs) s.outputs.push_back(std::move(out));
          st.outputs.clear();
          st.eval_outputs = false;
        } else {
          for (auto& [k, v] : st.eval_acc.values()) {
            s.keys.push_back(k);
            s.values.push_back(v);
          }
        }
        event e;
        e.kind = event_kind::evaluation_done;
        e.values = st.eval_acc.values();
        emit(st, std::move(e));
        st.eval_rp.deliver(std::move(s));
        return;
      }
      end_epoch(self);
      if (st.checkpointing) return;  // the run's final checkpoint: finish_run again once written
      continue;  // the next epoch (or evaluation) may dispatch at once
    }
    if (!any) return;
  }
}

bool alive_workers(const coord_state& st) {
  for (auto& w : st.workers)
    if (w.alive) return true;
  return false;
}

// A worker is gone: fence it out on every shard, then give its steps to others.
void on_worker_down(self_ptr self, uint32_t wid, const caf::error& reason) {
  auto& st = self->state;
  if (wid >= st.workers.size() || !st.workers[wid].alive) return;
  auto& w = st.workers[wid];
  w.alive = false;
  w.outstanding = 0;
  w.isolating = 0;
  event lost;
  lost.kind = event_kind::worker_lost;
  lost.worker = wid;
  lost.generation = w.generation;
  lost.text = describe(reason);
  emit(st, std::move(lost));
  std::vector<pending_task> lost_tasks = st.work.take_all(wid);
  if (!alive_workers(st) && st.ph != phase::idle) {
    // Wait for a worker to join (a restart, a newcomer); fail the run if none does.
    auto id = ++st.outages;
    st.outage_reason = fmt::format("all workers are lost (last: worker {}: {})", wid, describe(reason));
    event warn;
    warn.kind = event_kind::warning;
    warn.text = st.outage_reason + fmt::format("; waiting {} s for a worker to join",
                                               std::chrono::duration_cast<std::chrono::seconds>(st.opts.worker_wait).count());
    emit(st, std::move(warn));
    self->delayed_send(self, st.opts.worker_wait, outage_atom::value, id);
  }
  std::vector<step_task> tasks;
  for (auto& pt : lost_tasks) {
    if (pt.speculated && st.work.has_twin(pt.id)) continue;  // its copy runs elsewhere
    if (pt.eval) {
      // Evaluation is read-only: run those batches again.
      auto& ps = st.eval_pipes[pt.task.steps.front().pipeline];
      ps.next = std::min(ps.next, pt.task.steps.front().position);
    } else {
      tasks.push_back(std::move(pt.task));
    }
  }
  if (tasks.empty()) {
    dispatch(self);
    return;
  }
  // Kept in the state meanwhile: they hold the watermark down and the phase open. This
  // round's acknowledgements release what is being fenced for this worker; an older
  // round's (superseded by a newer loss, or of a failed run) release nothing.
  auto round = st.work.fence(wid, std::move(tasks));
  auto remaining = std::make_shared<size_t>(st.opts.ps.size());
  fence f = current_fence(st);
  f.worker = wid;
  f.worker_generation = w.generation + 1;
  auto current = [self, wid, round] { return self->state.work.fence_current(wid, round); };
  auto requeue_now = [self, wid, round] {
    auto& st = self->state;
    auto released = st.work.release(wid, round);
    if (!released) return;
    auto fenced = std::move(*released);
    event e;
    e.kind = event_kind::steps_requeued;
    e.worker = wid;
    for (auto& t : fenced) e.count += static_cast<int64_t>(t.steps.size());
    emit(st, std::move(e));
    // Every task the worker held counts a failure: which one killed it is not known.
    // Each then runs alone (see next_task), so an innocent one is cleared at once and a
    // poison record is found by its own failures.
    for (auto& t : fenced) {
      requeue(self, std::move(t), make_error(error_code::worker_lost, fmt::format("worker {} was lost", wid)));
      if (st.ph == phase::idle) return;  // that was some step's poison_limit-th failure
    }
    dispatch(self);
  };
  for (size_t i = 0; i < st.opts.ps.size(); ++i)
    ask_shard<fence>(
      self, i, fmt::format("the fence of worker {} (generation {})", wid, w.generation), current,
      [remaining, requeue_now](fence&) {
        if (--*remaining == 0) requeue_now();
      },
      [self, i, current](caf::error& e) {
        if (!current()) return;
        ps_failed(self, i, e, fmt::format("ps shard {} did not acknowledge a worker fence: ", i));
      },
      1, fence_atom::value, fence_request{f, 0});
}

coordinator_actor::behavior_type coordinator_impl(self_ptr self, coordinator_options opts) {
  if (opts.detached) detail::name_this_thread("at.coordinator");
  auto& st = self->state;
  st.opts = std::move(opts);
  if (st.opts.optimizer) st.optimizer = st.opts.optimizer->clone();
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
    [self](fit_atom, run_spec& spec) -> caf::result<run_summary> {
      auto& st = self->state;
      if (st.ph != phase::idle)
        return make_error(error_code::invalid_request, "a run is in progress: fit calls do not overlap");
      if (spec.pipelines.empty()) return make_error(error_code::invalid_request, "fit without dataset shards");
      if (spec.epochs < 0) return make_error(error_code::invalid_request, fmt::format("epochs = {} < 0", spec.epochs));
      if (!alive_workers(st)) return make_error(error_code::no_workers, "the cluster has no live worker");
      ++st.run;
      st.spec = std::move(spec);
      st.resuming = !st.spec.resume_from.empty();
      if (st.resuming) st.restore_dir = st.spec.resume_from;  // also what a lost shard rolls back to
      st.run_rp = self->make_response_promise<run_summary>();
      st.epoch = 0;
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
      event e;
      e.kind = event_kind::run_begin;
      e.count = st.spec.epochs;
      emit(st, std::move(e));
      st.ph = phase::initializing;
      // A shard lost meanwhile: the run starts once it is replaced (at most worker_wait).
      if (!st.lost_ps.empty()) self->delayed_send(self, st.opts.worker_wait, recover_atom::value, ++st.recoveries);
      start_run(self);
      return st.run_rp;
    },
    [self](eval_atom, eval_spec& spec) -> caf::result<eval_summary> {
      auto& st = self->state;
      if (st.ph != phase::idle) return make_error(error_code::invalid_request, "evaluate while a run is in progress");
      if (spec.pipelines.empty()) return make_error(error_code::invalid_request, "evaluate without dataset shards");
      if (!alive_workers(st)) return make_error(error_code::no_workers, "the cluster has no live worker");
      st.eval_rp = self->make_response_promise<eval_summary>();
      st.standalone_eval = true;
      st.eval_outputs = spec.outputs;
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
    },
    [self](hyper_atom, hyperparams_request& req) -> caf::result<caf::ok_atom> {
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
    },
    [self](gate_atom, uint64_t run, int64_t epoch, gate_decision& d) -> caf::result<caf::ok_atom> {
      auto& st = self->state;
      // A repeat (the application retried, or the message came twice): carried out once.
      if (d.gate != 0 && d.gate == st.released_gate) return caf::ok_atom::value;
      if (st.ph != phase::gated || run != st.run || epoch != st.gate_epoch || (d.gate != 0 && d.gate != st.gate_seq))
        return make_error(error_code::invalid_request,
                          fmt::format("no epoch gate is open for epoch {} of run {}", epoch + 1, run));
      ++st.gate_id;  // its timeout is void
      st.released_gate = st.gate_seq;
      auto rp = self->make_response_promise<caf::ok_atom>();
      release_gate(self, std::move(d), rp);
      return rp;
    },
    [self](gate_atom, uint64_t id) {
      auto& st = self->state;
      if (st.ph != phase::gated || id != st.gate_id) return;
      event w;
      w.kind = event_kind::warning;
      w.text = fmt::format("the application did not answer the gate of epoch {} within {} ms: training goes on",
                           st.gate_epoch + 1, std::chrono::duration_cast<std::chrono::milliseconds>(st.opts.timeout).count());
      emit(st, std::move(w));
      ++st.gate_id;  // a late decision is void
      release_gate(self, gate_decision{}, std::nullopt);
    },
    [self](ckpt_atom, const checkpoint_target& t, int32_t keep) -> caf::result<std::string> {
      auto& st = self->state;
      if (st.ph == phase::idle || st.ph == phase::initializing)
        return make_error(error_code::invalid_request, "a checkpoint asked for while no run is in progress");
      if (t.dir.empty()) return make_error(error_code::invalid_request, "a checkpoint asked for without a directory");
      if (!st.opts.checkpoint_dir.empty() && t.dir == st.opts.checkpoint_dir)
        return make_error(error_code::invalid_request,
                          fmt::format("{} is the cluster's own checkpoint directory: ask for another", t.dir));
      auto rp = self->make_response_promise<std::string>();
      st.extra_ckpts.push_back(extra_checkpoint{ckpt_target{t.dir, static_cast<size_t>(std::max(1, keep)), false}, rp});
      dispatch(self);
      return rp;
    },
    [self](source_atom, uint32_t p, caf::actor shard, bool eval) -> caf::result<caf::ok_atom> {
      auto& st = self->state;
      if (p >= (eval ? st.spec.eval_pipelines.size() : st.pipes.size()))
        return make_error(error_code::invalid_request,
                          fmt::format("no {}pipeline {} in this run", eval ? "validation " : "", p));
      if (eval) {
        st.spec.eval_pipelines[p] = shard;  // later epochs evaluate with it too
        st.eval_lost.erase(p);
        if (p < st.eval_pipes.size()) {
          st.eval_pipes[p].shard = shard;
          st.eval_pipes[p].lost = false;
        }
      } else {
        st.pipes[p].shard = shard;
        st.pipes[p].lost = false;
      }
      self->monitor(shard);  // re-queued steps take the pipeline's shard when dispatched
      event e;
      e.kind = event_kind::dataset_rebuilt;
      e.pipeline = p;
      e.count = eval ? 1 : 0;
      emit(st, std::move(e));
      dispatch(self);
      return caf::ok_atom::value;
    },
    [self](slow_atom, uint64_t id) {
      auto& st = self->state;
      if (st.ph != phase::training) return;
      auto [slow, owner] = st.work.straggler(id);
      if (!slow) return;  // answered (or given up) meanwhile
      for (auto& w : st.workers) {
        if (!w.alive || w.id == owner || w.outstanding >= st.opts.tasks_per_worker || w.isolating != 0) continue;
        slow->speculated = true;
        pending_task copy = *slow;  // same id: the first answer settles both
        event e;
        e.kind = event_kind::warning;
        e.text = fmt::format("step {} on worker {} is slow: also running it on worker {}",
                             to_string(copy.task.steps.front()), owner, w.id);
        emit(st, std::move(e));
        send_task(self, w, std::move(copy));
        return;
      }
    },
    [self](replace_atom, uint32_t index, caf::actor shard) -> caf::result<caf::ok_atom> {
      auto& st = self->state;
      if (index >= st.opts.ps.size())
        return make_error(error_code::invalid_request, fmt::format("no ps shard {} (there are {})", index, st.opts.ps.size()));
      if (!st.lost_ps.count(index))
        return make_error(error_code::invalid_request, fmt::format("ps shard {} is not lost", index));
      st.opts.ps[index] = caf::actor_cast<ps_shard_actor>(shard);
      self->monitor(shard);
      st.lost_ps.erase(index);
      if (!st.lost_ps.empty()) return caf::ok_atom::value;  // another one is still missing
      ++st.recoveries;  // the replacement deadline is met
      recover(self);
      return caf::ok_atom::value;
    },
    [self](ckpt_atom, uint64_t id) {
      auto& st = self->state;
      if (id != st.tick || st.ph == phase::idle) return;
      st.time_due = true;  // the next applied step starts the checkpoint
    },
    [self](recover_atom, uint64_t id) {
      auto& st = self->state;
      if (id != st.recoveries || st.lost_ps.empty()) return;
      st.ps_ready = false;
      st.recovering = false;  // a later fit waits for the replacement again
      fail_run(self, make_error(error_code::worker_lost,
                                fmt::format("ps shard {} was lost and not replaced within {} s", *st.lost_ps.begin(),
                                            std::chrono::duration_cast<std::chrono::seconds>(st.opts.worker_wait).count())));
    },
    [self](outage_atom, uint64_t id) {
      auto& st = self->state;
      if (id != st.outages || alive_workers(st)) return;
      fail_run(self, make_error(error_code::worker_lost, st.outage_reason + ", and none joined in time"));
    },
    // The status report: asks every shard for its counters (bounded), then answers.
    [self](report_atom) -> caf::result<status_report> {
      auto& st = self->state;
      auto now = std::chrono::duration<double>(std::chrono::steady_clock::now() - st.started).count();
      status_report r;
      r.run = st.run;
      r.training = st.ph != phase::idle;
      r.epoch = st.epoch;
      r.steps_applied = st.applied_run;
      r.uptime = now;
      for (auto& w : st.workers) {
        worker_report wr{w.id, w.generation, w.alive, w.outstanding > 0, w.steps, 0, 0};
        if (auto i = st.recent_steps.find(w.id); i != st.recent_steps.end() && !i->second.empty()) {
          std::vector<std::pair<double, uint64_t>> last;  // within the last 10 s
          for (auto& s : i->second)
            if (now - s.first <= 10) last.push_back(s);
          double sum = 0;
          for (auto& s : last) sum += static_cast<double>(s.second);
          if (!last.empty()) wr.mean_staleness = sum / static_cast<double>(last.size());
          // Steps per second: the steps after the first over their span, or over the
          // time since the first when they are few.
          if (last.size() >= 2 && last.back().first > last.front().first)
            wr.steps_per_second = static_cast<double>(last.size() - 1) / (last.back().first - last.front().first);
        }
        r.workers.push_back(wr);
      }
      r.checkpoint_step = st.checkpoint_step;
      r.checkpoint_dir = st.checkpoint_dir;
      r.checkpoint_age = st.checkpoint_step >= 0 ? now - st.checkpoint_at : 0;
      r.recent.assign(st.recent_events.begin(), st.recent_events.end());
      auto rp = self->make_response_promise<status_report>();
      auto n = st.opts.ps.size();
      if (n == 0) {
        rp.deliver(std::move(r));
        return rp;
      }
      auto report = std::make_shared<status_report>(std::move(r));
      report->shards.resize(n);
      auto left = std::make_shared<size_t>(n);
      auto placement = st.opts.placement;
      auto timeout = std::min<caf::timespan>(st.opts.timeout, std::chrono::seconds(5));
      for (size_t i = 0; i < n; ++i) {
        report->shards[i].shard = static_cast<uint32_t>(i);
        auto done = [report, left, rp]() mutable {
          if (--*left == 0) rp.deliver(std::move(*report));
        };
        st.opts.seam->request(self, st.opts.ps[i], timeout, stats_atom::value)
          .then(
            [report, i, placement, done](ps_stats& s) mutable {
              auto& sr = report->shards[i];
              sr.applied = s.applied;
              sr.base = s.base;
              std::map<std::pair<int32_t, int32_t>, uint64_t> versions;
              for (auto& v : s.versions) versions[{v.key.variable, v.key.index}] = v.version;
              if (placement)
                for (auto& vp : placement->variables())
                  for (auto& part : vp.partitions)
                    if (static_cast<size_t>(part.ps) == i) {
                      auto k = versions.find({vp.variable, part.index});
                      sr.partitions.push_back(partition_report{vp.name, part.index, part.row_begin,
                                                               part.row_begin + part.rows(), vp.shape.cols,
                                                               k == versions.end() ? 0 : k->second});
                    }
              done();
            },
            [report, i, done](caf::error& e) mutable {
              report->shards[i].error = describe(e);
              done();
            });
      }
      return rp;
    },
    [self](join_atom, caf::actor handle, uint32_t id) -> caf::result<uint64_t> {
      auto& st = self->state;
      auto typed = caf::actor_cast<worker_actor>(handle);
      if (id < st.workers.size()) {
        auto& w = st.workers[id];
        if (w.alive) return make_error(error_code::invalid_request, fmt::format("worker {} is already a member", id));
        w.handle = typed;
        w.alive = true;
        w.outstanding = 0;
        w.isolating = 0;
        ++w.generation;
      } else if (id == st.workers.size()) {
        worker_slot w;
        w.handle = typed;
        w.id = id;
        st.workers.push_back(w);
      } else {
        return make_error(error_code::invalid_request,
                          fmt::format("worker id {} leaves a gap (next is {})", id, st.workers.size()));
      }
      self->monitor(typed);
      ++st.outages;  // a pending outage check finds a member
      event e;
      e.kind = event_kind::worker_joined;
      e.worker = id;
      e.generation = st.workers[id].generation;
      emit(st, std::move(e));
      dispatch(self);
      return st.workers[id].generation;
    },
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
