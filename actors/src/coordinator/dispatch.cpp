// The coordinator's dispatch: the next task for a free worker under the gate, sending it,
// its answer or error, re-queues and speculative twins, synchronous rounds (state.hpp).
#include "state.hpp"

#include "../core/planted.hpp"

namespace actortrain::coord {

// Worker `wid` no longer holds task `id`.
void settled(coord_state& st, uint32_t wid, uint64_t id) {
  --st.workers[wid].outstanding;
  if (st.workers[wid].isolating == id) st.workers[wid].isolating = 0;
}

namespace {

// Removes and returns task `id` of worker `wid` (step_queue::take).
std::optional<pending_task> take_pending(coord_state& st, uint32_t wid, uint64_t id) {
  auto out = st.work.take(wid, id);
  if (out) settled(st, wid, id);
  return out;
}

// A task of up to `k` steps at the next positions of pipeline `p` (fewer where its data
// ends).
pending_task steps_at(coord_state& st, size_t p, int64_t k) {
  auto& ps = st.pipes[p];
  pending_task t;
  t.task.f = current_fence(st);
  t.task.source = ps.shard;
  t.task.epoch = st.spec.steps_per_epoch > 0 ? 0 : static_cast<uint64_t>(st.epoch);
  t.task.epoch_begin = ps.epoch_begin;
  for (int64_t j = 0; j < k && ps.next < ps.end; ++j) {
    step_id s{st.run, static_cast<uint32_t>(p), ps.next++};
    st.round.dispatch(s, round_size(st) > 0);
    t.task.steps.push_back(s);
  }
  st.dispatched_epoch += static_cast<int64_t>(t.task.steps.size());
  st.dispatched_run += t.task.steps.size();
  return t;
}

// The training pipeline a free worker takes its next steps from. With pipeline affinity
// a worker takes its own (id modulo their number) while that has steps, so a replica of
// it in the worker's process serves its batches in order; then the others in turn.
// None when every pipeline ended or waits for its new shard, or, with `wait_for_lost`,
// when the one whose turn it is waits for its new shard.
std::optional<size_t> pick_pipeline(coord_state& st, const worker_slot& to, bool wait_for_lost) {
  if (st.pipes.empty()) return std::nullopt;
  const size_t own = to.id % st.pipes.size();
  if (st.opts.pipeline_affinity && !st.pipes[own].ended() && !st.pipes[own].lost) return own;
  for (size_t n = 0; n < st.pipes.size(); ++n) {
    auto p = (st.rr + n) % st.pipes.size();
    auto& ps = st.pipes[p];
    if (ps.lost && !ps.ended() && wait_for_lost) return std::nullopt;
    if (ps.ended() || ps.lost) continue;
    st.rr = p + 1;
    return p;
  }
  return std::nullopt;
}

// Every pipeline counts as at its end where it is now: the epoch of a run of scheduled
// steps closes there (an epoch mark, or the run's end).
void close_pipelines(coord_state& st) {
  for (auto& p : st.pipes) p.end = std::min(p.end, p.next);
}

// Scheduled step `ticket` has no batch: its pipeline's data ended in this epoch.
void no_data(coord_state& st, uint64_t ticket, uint32_t pipeline) {
  event e;
  e.kind = event_kind::step_no_data;
  e.epoch = st.epoch;
  e.ticket = ticket;
  e.pipeline = pipeline;
  emit(st, std::move(e));
}

// A run of scheduled steps (run_spec::on_demand): the next granted step, one per task.
// A step for a given pipeline whose data ended in this epoch is answered at once with
// step_no_data; an epoch mark waits until the steps before it are applied, then ends the
// epoch (every pipeline counts as at its end: dispatch's phase_complete turns the epoch).
std::optional<pending_task> next_scheduled(coord_state& st, const worker_slot& to) {
  if (st.closing_epoch) return std::nullopt;  // an epoch mark ended it: the next one begins first
  for (;;) {
    auto ticket = st.grants.front();
    if (!ticket) return std::nullopt;
    auto g = st.grants.at(*ticket);
    if (g.step_fn == step_grants::epoch_mark) {
      if (!st.work.idle() || !st.round.empty()) return std::nullopt;
      st.grants.pop();
      if (st.dispatched_epoch == 0) continue;  // the epoch has not begun: it stays the one to come
      close_pipelines(st);
      st.closing_epoch = true;
      return std::nullopt;
    }
    std::optional<size_t> chosen;
    if (g.replica >= 0) {
      auto p = static_cast<size_t>(g.replica);
      // A stray replica (the cluster checks it) or one whose data ended finds no batch.
      if (p >= st.pipes.size() || st.pipes[p].ended()) {
        st.grants.pop();
        no_data(st, *ticket, static_cast<uint32_t>(p));
        continue;
      }
      if (st.pipes[p].lost) return std::nullopt;  // waits for its new shard
      chosen = p;
    } else {
      chosen = pick_pipeline(st, to, /*wait_for_lost=*/false);
      if (!chosen) return std::nullopt;  // every pipeline ended (the epoch turns) or waits for its shard
    }
    st.grants.pop();
    auto t = steps_at(st, *chosen, 1);
    t.task.step_fn = g.step_fn;
    t.task.ticket = *ticket;
    return t;
  }
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
  if (st.spec.on_demand) return next_scheduled(st, to);
  // An ordered gate waits for a lost pipeline whose turn it is.
  auto p = pick_pipeline(st, to, /*wait_for_lost=*/st.opts.gate->ordered());
  if (!p) return std::nullopt;
  int64_t k = std::min<int64_t>(st.opts.steps_per_execution, budget);
  if (room < static_cast<uint64_t>(k)) k = static_cast<int64_t>(room);
  if (room != UINT64_MAX) {
    // A bounded window is shared: a task takes at most one worker's share of it (a step
    // at least), so tasks of several steps do not hand all of it to the first worker.
    int64_t live = 0;
    for (auto& w : st.workers) live += w.alive ? 1 : 0;
    k = std::max<int64_t>(1, std::min<int64_t>(k, static_cast<int64_t>(room) / std::max<int64_t>(1, live)));
  }
  return steps_at(st, *p, k);
}

}  // namespace

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

namespace {

// Removes the other copy of a speculated task (its answer, if it comes, is stale).
void drop_twins(coord_state& st, uint64_t id) {
  for (auto wid : st.work.drop_twins(id)) settled(st, wid, id);
}

// Step `r` is applied on every shard: into the epoch's means, the visitation log and the
// counters (a checkpoint may fall due), and a step_done event. `shown_loss` is what the
// event reports (a synchronous round's loss for each of its steps); `round` is 0 outside
// synchronous rounds.
void count_step(self_ptr self, const step_result& r, double shown_loss, uint64_t round, uint64_t ticket = 0) {
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
  e.ticket = ticket;
  for (auto& [k, v] : r.logs) e.logs[k] = v;
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
      if (!eval && pt->task.ticket != 0) {
        // A scheduled step past its pipeline's data: one for any pipeline takes the next
        // batch there is (another pipeline's, or the next epoch's); one for this
        // pipeline has none.
        if (st.grants.at(pt->task.ticket).replica < 0)
          st.grants.put_back(pt->task.ticket);
        else
          no_data(st, pt->task.ticket, r.step.pipeline);
      }
      continue;
    }
    if (eval) {
      if (st.eval_outputs)
        st.outputs[r.step] = std::move(r.outputs);  // a re-run batch replaces its first answer
      else
        st.eval_acc.add(r);
      if (st.standalone_eval && st.eval_batch_events) {
        // Begun and done together: only an answered batch is known to exist (the
        // positions handed out past the data's end come back without one).
        event b;
        b.kind = event_kind::eval_batch_begun;
        b.count = st.eval_done;
        b.worker = r.worker;
        emit(st, std::move(b));
        event e;
        e.kind = event_kind::eval_batch_done;
        e.count = st.eval_done++;
        e.worker = r.worker;
        if (!st.eval_outputs) e.values = st.eval_acc.values();
        emit(st, std::move(e));
      }
      continue;
    }
    if (round_size(st) > 0) {
      // Held on the shards until the round closes; the first answer of a step counts.
      st.round.answered(r.step, std::move(r));
      continue;
    }
    st.round.settle(r.step);
    count_step(self, r, r.loss, 0, pt->task.ticket);
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

}  // namespace

// Per pipeline, the lowest position of the run that is not known applied: below it every
// step is applied on every shard it touches, so shards may forget those step ids.
std::vector<uint64_t> watermark(const coord_state& st) {
  std::vector<uint64_t> w;
  w.reserve(st.pipes.size());
  // Positions at or past a pipeline's end were not applied: the next epoch uses them.
  for (auto& p : st.pipes) w.push_back(std::min(p.next, p.end));
  return st.work.watermark(std::move(w));
}

namespace {

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
  if (!eval && !t.speculated && st.spec.step_begin_events)  // a speculative copy began already
    for (size_t k = 0; k < t.task.steps.size(); ++k) {
      const auto& s = t.task.steps[k];
      event e;
      e.kind = event_kind::step_begun;
      e.epoch = st.epoch;
      e.pipeline = s.pipeline;
      e.position = s.position;
      e.worker = wid;
      e.generation = w.generation;
      e.total = st.steps_total + k;  // the steps applied, and those before it in the task
      emit(st, std::move(e));
    }
  auto task = t.task;
  auto id = t.id;
  st.work.sent(wid, std::move(t));
  if (!eval) task.watermark = watermark(st);  // with this task in flight: it is not applied yet
  task.ps = st.opts.ps;
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

}  // namespace

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
    if (st.ph == phase::training && st.spec.on_demand && st.grants.exhausted() && nothing_in_flight(st)) {
      // Every scheduled step is applied and no more will come: the run ends, closing its
      // epoch if a step of it was applied.
      if (st.applied_epoch > 0) {
        close_pipelines(st);
        st.spec.epochs = st.epoch + 1;
        end_epoch(self);
      } else {
        finish_run(self);
      }
      return;
    }
    if (!any) return;
  }
}

// A task is slow: a twin runs on an idle worker (speculate_after).
void on_slow(self_ptr self, uint64_t id) {
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
}

}  // namespace actortrain::coord
