#include <actortrain/actors/coordinator/coordinator.hpp>
#include <actortrain/actors/core/errors.hpp>

#include <actortrain/model/checkpoint/checkpoint.hpp>

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <set>

#include <fmt/format.h>

#include "step_queue.hpp"
#include "run_state.hpp"
#include "sync_round.hpp"
#include "../core/planted.hpp"
#include "../core/thread_name.hpp"

namespace actortrain {

namespace {

struct worker_slot {
  worker_actor handle;
  uint32_t id = 0;
  uint64_t generation = 1;
  bool alive = true;
  int outstanding = 0;  // tasks sent and not answered (the worker queues them)
  uint64_t isolating = 0;  // a suspect task runs here alone (its id); nothing else is sent
  uint64_t steps = 0;
};

struct pipeline_slot {
  caf::actor shard;
  uint64_t next = 0;         // next position to dispatch
  uint64_t epoch_begin = 0;  // first position of the current epoch
  uint64_t end = UINT64_MAX; // first position known to be past the data
  bool lost = false;         // the shard is gone: nothing is dispatched until a new one comes
  bool ended() const { return next >= end; }
};

// A task handed to a worker, remembered until its result arrives (step_queue.hpp).
using pending_task = pending_work<step_task>;
static_assert(std::is_same<caf::actor_clock::time_point, std::chrono::steady_clock::time_point>::value,
              "step_queue keeps send times as steady_clock time points");

// Accumulates loss and metrics over steps (training) or batches (evaluation).
struct accumulator {
  double loss_sum = 0;
  int64_t examples = 0;
  std::vector<std::unique_ptr<model::metric>> metrics;
  void reset(const std::vector<std::shared_ptr<const model::metric>>& protos) {
    loss_sum = 0;
    examples = 0;
    metrics.clear();
    for (auto& p : protos) metrics.push_back(p->clone());
  }
  void add(const step_result& r) {
    loss_sum += r.loss * static_cast<double>(r.example_count);
    examples += r.example_count;
    for (size_t i = 0; i < metrics.size() && i < r.metric_states.size(); ++i) metrics[i]->merge(r.metric_states[i]);
  }
  std::map<std::string, double> values() const {
    std::map<std::string, double> v;
    v["loss"] = examples > 0 ? loss_sum / static_cast<double>(examples) : 0.0;
    for (auto& m : metrics) v[m->name()] = m->result();
    return v;
  }
};

// gated: an epoch ended and the application's gate_decision is awaited (run_spec::epoch_gate).
enum class phase { idle, initializing, training, evaluating, gated };

// Where a checkpoint goes: the cluster's own directory (restores roll back to it) or one
// a callback asked for (cluster::checkpoint_async, model_checkpoint).
struct ckpt_target {
  std::string dir;
  size_t keep = 1;
  bool run_dir = true;
  bool kept = false;  // the state the shards keep at an epoch gate (<checkpoint_dir>/kept)
};

struct extra_checkpoint {
  ckpt_target target;
  std::optional<caf::typed_response_promise<std::string>> rp;
};

struct coord_state {
  // What the status report shows: per worker its last applied steps (seconds since
  // start, staleness), the recent failures and recoveries, the last checkpoint.
  std::map<uint32_t, std::deque<std::pair<double, uint64_t>>> recent_steps;
  std::deque<std::pair<double, std::string>> recent_events;
  int64_t checkpoint_step = -1;
  std::string checkpoint_dir;
  double checkpoint_at = 0;
  std::unique_ptr<model::optimizer> optimizer;  // opts.optimizer's copy (hyperparameters kept current)
  coordinator_options opts;
  std::vector<worker_slot> workers;
  bool ps_ready = false;
  uint64_t run = 0;
  phase ph = phase::idle;
  // The current run.
  run_spec spec;
  int32_t epoch = 0;
  std::vector<pipeline_slot> pipes;
  std::vector<pipeline_slot> eval_pipes;
  std::set<uint32_t> eval_lost;  // validation pipelines of the run whose shard is gone
  size_t rr = 0;  // round-robin pointer over pipelines
  // Tasks in flight, of lost workers being fenced out, re-queued; failed attempts.
  step_queue<step_task> work;
  int64_t dispatched_epoch = 0, applied_epoch = 0;
  uint64_t dispatched_run = 0, applied_run = 0, steps_total = 0;
  accumulator train_acc, eval_acc;
  std::map<std::string, std::vector<double>> history;
  std::map<std::string, double> epoch_values;
  bool ran_out = false;
  bool standalone_eval = false;
  std::vector<visit> visits;  // the run's applied steps, with run_spec::visitation_log
  uint64_t next_task_id = 0;
  size_t first_worker = 0;  // where the next dispatch pass starts among equally busy workers
  // The dispatch order of the training steps not applied yet (the bounded-staleness gate
  // looks at the oldest), and the synchronous round.
  sync_round<step_result> round;
  // Checkpoints: due once steps_total reaches next_checkpoint; dispatch pauses until the
  // steps in flight are answered, then every shard's state is written at once.
  uint64_t next_checkpoint = 0;
  bool quiescing = false, checkpointing = false;
  // The run's start: a roll-back of this run goes back to its own checkpoints only, the
  // first of which is committed (or the previous run's final one marked as this run's
  // start) before its first step. Until then a lost shard restores the newest good
  // checkpoint of any run (the run has applied nothing yet), or the initial values on
  // a cluster that never applied a step.
  bool run_start_committed = false;
  uint64_t start_attempt = 0;  // the run's start-up fence (a superseded one is void)
  // The shards' state is the newest committed checkpoint's (nothing applied since, no
  // failed run's late push possible), so the next run may mark it as its start.
  bool clean_since_commit = false;
  uint64_t control_id = 0;  // ids of keep, restore, hyperparameter and snapshot requests
  bool time_due = false;     // checkpoint_interval passed: due at the next applied step
  uint64_t tick = 0;         // the pending interval tick's id
  uint64_t ckpt_attempt = 0; // snapshot answers of an abandoned checkpoint are ignored
  int64_t last_committed = -1;  // step of the newest committed checkpoint (-1: none)
  std::string restore_dir;      // where it is (checkpoint_dir, or the resumed directory)
  std::chrono::steady_clock::time_point quiesce_began;
  std::deque<extra_checkpoint> extra_ckpts;  // written, in order, once nothing is in flight
  std::string extra_dir, extra_path;         // the last one written, and at which step
  int64_t extra_step = -1;
  // The epoch gate: its id (a timeout or a late decision of another is void), the epoch
  // that ended, whether it was the last; the epoch whose state the shards keep, and
  // whether the run ends with it restored.
  uint64_t gate_id = 0;
  int64_t gate_epoch = -1;
  bool gate_last = false;
  int64_t kept_epoch = -1;
  std::string kept_checkpoint;  // the kept state, committed (a lost shard's copy comes back from it)
  bool restore_at_end = false;
  uint64_t gate_seq = 0;       // the id of the newest gate (event::gate)
  uint64_t released_gate = 0;  // the gate whose decision was taken last
  int64_t stopped_epoch = -1, restored_epoch = -1;
  // Parameter-server loss: nothing is dispatched until every lost shard is replaced and
  // every shard restored.
  uint64_t recovery_epoch = 0;
  bool recovering = false;
  bool resuming = false;  // a fit with resume_from that has not restored its state yet
  std::set<uint32_t> lost_ps;
  uint64_t recoveries = 0;  // id of the pending replacement deadline
  uint64_t restore_attempt = 0;
  uint64_t steps_at_loss = 0;
  std::chrono::steady_clock::time_point lost_at;
  std::deque<double> task_seconds;  // the last 64 answered training tasks' durations
  uint64_t outages = 0;  // times every worker was lost; a join ends the current one
  std::string outage_reason;
  bool eval_outputs = false;              // the standalone evaluation is a predict
  std::map<step_id, tensor> outputs;      // its outputs so far, by step
  caf::typed_response_promise<run_summary> run_rp;
  caf::typed_response_promise<eval_summary> eval_rp;
  std::chrono::steady_clock::time_point started;
  static inline const char* name = "coordinator";
};

using self_ptr = coordinator_actor::stateful_pointer<coord_state>;

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

// Control requests to the shards (fences, snapshots, inits, stats, keep and restore,
// hyperparameters, round manifests) are retried on a transport error — a timeout: the
// request or its answer may have been lost — up to this many attempts in all; each is
// idempotent at the shard (ps_shard.hpp), so a late original or a duplicate changes
// nothing. Application errors and a shard that is gone are not retried.
constexpr int control_attempts = 3;

// Asks ps shard `i` (xs...) and calls `ok` with its reply or `err` once with the final
// error: after control_attempts timeouts, an error of code timeout naming the shard,
// `what` and the attempts. `retry()` is asked before each retry (false: give up at
// once, as when the request was superseded). The shard is looked up at each attempt (a
// respawned one gets the retry).
template <class Reply, class... Ts>
void ask_shard(self_ptr self, size_t i, std::string what, std::function<bool()> retry, std::function<void(Reply&)> ok,
               std::function<void(caf::error&)> err, int attempt, Ts... xs) {
  auto& st = self->state;
  st.opts.seam->request(self, st.opts.ps[i], st.opts.timeout, xs...)
    .then([ok](Reply& r) mutable { ok(r); },
          [=](caf::error& e) mutable {
            if (e == caf::sec::request_timeout) {
              if (attempt < control_attempts && retry()) {
                ask_shard<Reply>(self, i, what, retry, ok, err, attempt + 1, xs...);
                return;
              }
              caf::error out = make_error(error_code::timeout, fmt::format("ps shard {} did not answer {} after {} attempt(s): {}",
                                                                           i, what, attempt, describe(e)));
              err(out);
              return;
            }
            err(e);
          });
}
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

void start_eval(self_ptr self, const std::vector<caf::actor>& shards) {
  auto& st = self->state;
  st.ph = phase::evaluating;
  st.eval_acc.reset(st.opts.metrics);
  st.eval_pipes.clear();
  for (auto& s : shards) st.eval_pipes.push_back(pipeline_slot{s, 0, 0, UINT64_MAX});
  if (!st.standalone_eval)
    for (auto p : st.eval_lost)
      if (p < st.eval_pipes.size()) st.eval_pipes[p].lost = true;  // waits for its new shard
  st.rr = 0;
}

void begin_epoch(self_ptr self) {
  auto& st = self->state;
  st.ph = phase::training;
  st.applied_epoch = 0;
  st.dispatched_epoch = 0;
  st.train_acc.reset(st.opts.metrics);
  // Each pass begins its round-robin at pipeline 0: where the last one left it depends
  // on how many end-of-data probes went out before the ends were known (timing), and the
  // order of batches must not (synchronous rounds are formed in that order).
  if (st.spec.steps_per_epoch == 0) st.rr = 0;
  for (auto& p : st.pipes) {
    if (st.spec.steps_per_epoch == 0) {
      // A new pass: positions continue where the last epoch's data ended.
      auto begin = p.end == UINT64_MAX ? p.next : p.end;
      p.epoch_begin = begin;
      p.next = begin;
      p.end = UINT64_MAX;
    }
  }
  event e;
  e.kind = event_kind::epoch_begin;
  e.epoch = st.epoch;
  e.count = st.spec.steps_per_epoch > 0 ? st.spec.steps_per_epoch : -1;
  emit(st, std::move(e));
}

void end_epoch(self_ptr self) {
  auto& st = self->state;
  if (st.ph == phase::training) {
    st.epoch_values = st.train_acc.values();
    if (st.spec.steps_per_epoch > 0 && st.applied_epoch < st.spec.steps_per_epoch) {
      st.ran_out = true;
      event w;
      w.kind = event_kind::warning;
      w.text = fmt::format("the input ran out of data after {} steps of epoch {}; training stops", st.applied_epoch,
                           st.epoch + 1);
      emit(st, std::move(w));
    }
    if (!st.spec.eval_pipelines.empty() && st.applied_epoch > 0) {
      start_eval(self, st.spec.eval_pipelines);
      return;
    }
  } else if (st.ph == phase::evaluating) {
    for (auto& [k, v] : st.eval_acc.values()) st.epoch_values["val_" + k] = v;
  }
  if (st.applied_epoch == 0 && st.spec.steps_per_epoch == 0 && st.epoch == 0) {
    fail_run(self, make_error(error_code::invalid_request, "the training data is empty: no step in the first epoch"));
    return;
  }
  bool ended = st.applied_epoch > 0;
  if (ended) {
    for (auto& [k, v] : st.epoch_values) st.history[k].push_back(v);
    event e;
    e.kind = event_kind::epoch_done;
    e.epoch = st.epoch;
    e.count = st.applied_epoch;
    e.values = st.epoch_values;
    if (st.spec.epoch_gate) e.gate = ++st.gate_seq;  // the gate that opens below
    emit(st, std::move(e));
  }
  ++st.epoch;
  bool last = st.epoch >= st.spec.epochs || st.ran_out;
  if (ended && st.spec.epoch_gate) {
    // Nothing is in flight: the shards hold exactly this epoch's state until the
    // application decides (or the request timeout passes).
    st.ph = phase::gated;
    st.gate_epoch = st.epoch - 1;
    st.gate_last = last;
    self->delayed_send(self, st.opts.timeout, gate_atom::value, ++st.gate_id);
    return;
  }
  if (last) {
    finish_run(self);
    return;
  }
  begin_epoch(self);
}

// Sends (xs...) to every ps shard (ask_shard: timeouts retried); `ok` once each
// answered, else `err` with the first error.
template <class Reply, class... Ts>
void ask_every_shard(self_ptr self, std::string what, std::function<bool()> retry, std::function<void()> ok,
                     std::function<void(caf::error&)> err, Ts... xs) {
  auto& st = self->state;
  auto remaining = std::make_shared<size_t>(st.opts.ps.size());
  auto failed = std::make_shared<bool>(false);
  for (size_t i = 0; i < st.opts.ps.size(); ++i)
    ask_shard<Reply>(
      self, i, what, retry,
      [remaining, failed, ok](Reply&) {
        if (*failed || --*remaining > 0) return;
        ok();
      },
      [failed, err](caf::error& e) {
        if (*failed) return;
        *failed = true;
        err(e);
      },
      1, xs...);
}

// Carries out the application's decision at the open epoch gate: keep,
// hyperparameters, then the next epoch; or, when stopping or after the last epoch, the
// restore and the end of the run. A ps restore meanwhile supersedes the rest.
void release_gate(self_ptr self, gate_decision d, std::optional<caf::typed_response_promise<caf::ok_atom>> rp) {
  auto& st = self->state;
  auto attempt = st.gate_id;
  auto live = [self, attempt, rp]() mutable {
    auto& st = self->state;
    if (st.ph == phase::gated && st.gate_id == attempt) return true;
    if (rp) rp->deliver(make_error(error_code::invalid_request, "the epoch gate was superseded (a restore or the run's end)"));
    return false;
  };
  auto warn = [self](std::string text) {
    event w;
    w.kind = event_kind::warning;
    w.text = std::move(text);
    emit(self->state, std::move(w));
  };
  if (d.restore_at_end) st.restore_at_end = true;
  // Retried only while the gate is still the one open.
  std::function<bool()> open = [self, attempt] { return self->state.ph == phase::gated && self->state.gate_id == attempt; };
  auto carry_on = [self, d, rp, live, warn, open]() mutable {
    if (!live()) return;
    auto& st = self->state;
    if (d.stop || st.gate_last) {
      if (d.stop && !st.gate_last) st.stopped_epoch = st.gate_epoch;
      auto end = [self, rp]() mutable {
        self->state.ph = phase::training;  // finish_run writes what is due first
        finish_run(self);
        if (rp) rp->deliver(caf::ok_atom::value);
      };
      if (st.restore_at_end && st.kept_epoch >= 0 && st.kept_epoch != st.gate_epoch) {
        auto kept = st.kept_epoch;
        ask_every_shard<caf::ok_atom>(
          self, "the restore of the kept state", open,
          [self, end, live, kept]() mutable {
            if (!live()) return;
            self->state.restored_epoch = kept;
            // The shards' values changed (no step counted): the newest checkpoint is not
            // their state any more, so the run's end commits this one.
            self->state.clean_since_commit = false;
            end();
          },
          [end, live, warn, kept](caf::error& e) mutable {
            if (!live()) return;
            warn(fmt::format("the run ends with its last state: restoring epoch {}'s failed: {}", kept + 1, describe(e)));
            end();
          },
          restore_atom::value, fence_request{current_fence(st), ++st.control_id});
      } else {
        if (st.restore_at_end && st.kept_epoch == st.gate_epoch) st.restored_epoch = st.kept_epoch;  // it is the kept state
        if (st.restore_at_end && st.kept_epoch < 0)
          warn("the run ends with its last state: no kept state to restore (a ps restore dropped it, or none was kept)");
        end();
      }
      return;
    }
    auto next = [self, rp]() mutable {
      begin_epoch(self);
      dispatch(self);
      if (rp) rp->deliver(caf::ok_atom::value);
    };
    if (d.hyperparams.empty()) {
      next();
      return;
    }
    hyperparams_request req{current_fence(st), d.hyperparams, ++st.control_id};
    ask_every_shard<caf::ok_atom>(
      self, "the epoch's hyperparameters", open,
      [self, next, live, req]() mutable {
        if (!live()) return;
        if (auto& o = self->state.optimizer)
          for (auto& [k, v] : req.values) o->set_hyperparam(k, v);
        next();
      },
      [self, live, rp](caf::error& e) mutable {
        if (!live()) return;
        if (rp) rp->deliver(e);
        fail_run(self, make_error(error_code::invalid_request, "set_hyperparams at the epoch's start: " + describe(e)));
      },
      hyper_atom::value, req);
  };
  if (!d.keep) {
    carry_on();
    return;
  }
  auto epoch = st.gate_epoch;
  ask_every_shard<caf::ok_atom>(
    self, "keep", open,
    [self, carry_on, epoch, open]() mutable {
      auto& st = self->state;
      if (!open()) return;
      st.kept_epoch = epoch;
      st.kept_checkpoint.clear();
      if (st.opts.checkpoint_dir.empty()) {
        carry_on();
        return;
      }
      // The kept state committed too (nothing is in flight at the gate), so that a shard
      // lost later gets its copy back with the restore.
      write_checkpoint_to(self, ckpt_target{model::join_path(st.opts.checkpoint_dir, "kept"), 1, false, true},
                          [self, carry_on](const std::string& path) mutable {
                            self->state.kept_checkpoint = path;
                            carry_on();
                          });
    },
    [self, carry_on, warn, epoch](caf::error& e) mutable {
      self->state.kept_epoch = -1;
      warn(fmt::format("the shards could not keep epoch {}'s state: {}", epoch + 1, describe(e)));
      carry_on();
    },
    keep_atom::value, fence_request{current_fence(st), ++st.control_id});
}

// Forgets every task sent, queued or being fenced (a restore supersedes them; their
// late answers find nothing pending).
void forget_work(coord_state& st) {
  forget_round(st);
  st.work.forget_work();
  for (auto& w : st.workers) {
    w.outstanding = 0;
    w.isolating = 0;
  }
}

// The run as a checkpoint records it (manifest "extra"): taken with nothing in flight,
// queued or being fenced, so every position below a pipeline's `next` is applied.
nlohmann::json save_run(const coord_state& st) {
  run_state r;
  r.run = st.run;
  r.epoch = st.epoch;
  r.epochs = st.spec.epochs;
  r.steps_per_epoch = st.spec.steps_per_epoch;
  r.applied_epoch = st.applied_epoch;
  r.dispatched_epoch = st.dispatched_epoch;
  r.applied_run = st.applied_run;
  r.dispatched_run = st.dispatched_run;
  r.steps_total = st.steps_total;
  r.round_robin = st.rr;
  r.sync_round = st.round.number();
  r.ran_out = st.ran_out;
  for (auto& p : st.pipes) r.pipelines.push_back(run_state::pipeline{p.next, p.epoch_begin, p.end});
  r.watermark = watermark(st);
  r.loss_sum = st.train_acc.loss_sum;
  r.examples = st.train_acc.examples;
  for (auto& m : st.train_acc.metrics) r.metrics.emplace_back(m->name(), m->state());
  r.history = st.history;
  r.visitation_log = st.spec.visitation_log;
  if (st.spec.visitation_log) r.visits = st.visits;
  r.coordinator_epoch = st.opts.coordinator_epoch;
  r.recovery_epoch = st.recovery_epoch;
  r.kept_epoch = st.kept_epoch;
  r.kept_checkpoint = st.kept_checkpoint;
  if (st.optimizer) r.hyperparams = st.optimizer->hyperparams();
  return to_json(r);
}

// Puts the run of `j` (save_run's) back: positions, counters, the epoch's running
// means, history, visits. Throws nlohmann::json::exception or std::runtime_error naming
// the field that is missing or wrong.
void load_run(coord_state& st, const nlohmann::json& j) {
  auto r = run_state_from(j, st.pipes.size(), st.spec.steps_per_epoch, st.spec.epochs);
  st.run = r.run;
  st.epoch = r.epoch;
  st.applied_epoch = r.applied_epoch;
  st.dispatched_epoch = r.dispatched_epoch;
  st.applied_run = r.applied_run;
  st.dispatched_run = r.dispatched_run;
  st.steps_total = r.steps_total;
  st.rr = r.round_robin;
  st.round.continue_at(r.sync_round);
  st.ran_out = r.ran_out;
  for (size_t p = 0; p < r.pipelines.size(); ++p) {
    auto& slot = st.pipes[p];
    slot.next = r.pipelines[p].next;
    slot.epoch_begin = r.pipelines[p].epoch_begin;
    slot.end = r.pipelines[p].end;
  }
  st.train_acc.reset(st.opts.metrics);
  st.train_acc.loss_sum = r.loss_sum;
  st.train_acc.examples = r.examples;
  for (size_t i = 0; i < r.metrics.size() && i < st.train_acc.metrics.size(); ++i)
    if (r.metrics[i].first == st.train_acc.metrics[i]->name()) st.train_acc.metrics[i]->merge(r.metrics[i].second);
  st.history = std::move(r.history);
  st.visits = std::move(r.visits);
  st.kept_epoch = r.kept_epoch;
  st.kept_checkpoint = r.kept_checkpoint;
  forget_work(st);
  st.work.forget_failures();
  st.ph = phase::training;
}

model::file_system& checkpoint_fs(coord_state& st) {
  return st.opts.checkpoint_fs ? *st.opts.checkpoint_fs : model::posix_file_system();
}

void on_ps_down(self_ptr self, uint32_t index, const caf::error& reason);

// A request to ps shard `i` failed: a shard that is gone starts a recovery; any other
// failure ends the run with `what`.
// `even_recovering`: the request is part of the restore itself, so its failure counts.
void ps_failed(self_ptr self, size_t i, const caf::error& e, const std::string& what, bool even_recovering = false) {
  if (e == caf::sec::request_receiver_down) {
    on_ps_down(self, static_cast<uint32_t>(i), e);
    return;
  }
  if (self->state.recovering && !even_recovering) return;  // superseded by the restore
  if (code_of(e) == error_code::timeout) {
    fail_run(self, e);  // ask_shard's: it names the shard, the request and the attempts
    return;
  }
  fail_run(self, make_error(code_of(e) == error_code::none ? error_code::timeout : code_of(e), what + describe(e)));
}

// The next multiple of checkpoint_every after steps_total: steps that were in flight
// when a checkpoint fell due (applied before it was written), or a restored step that
// is not a multiple, do not shift the schedule.
void next_checkpoint_after(coord_state& st) {
  auto every = static_cast<uint64_t>(std::max<int64_t>(1, st.opts.checkpoint_every));
  st.next_checkpoint = st.opts.checkpoint_every > 0 ? (st.steps_total / every + 1) * every : UINT64_MAX;
}

void schedule_tick(self_ptr self) {
  auto& st = self->state;
  if (st.opts.checkpoint_interval.count() <= 0 || st.opts.checkpoint_dir.empty()) return;
  self->delayed_send(self, st.opts.checkpoint_interval, ckpt_atom::value, ++st.tick);
}

// Commits a checkpoint with `write` (which returns its path), keeps the newest
// checkpoint_keep, says so (with the tensor bytes the shards sent here for it), then runs
// `then`. A failure to write ends the run.
void finish_checkpoint(self_ptr self, const ckpt_target& target, int64_t step, double received_bytes,
                       const std::function<std::string(model::file_system&)>& write,
                       const std::function<void(const std::string&)>& then) {
  auto& st = self->state;
  std::string path;
  try {
    auto& fs = checkpoint_fs(st);
    path = write(fs);
    if (target.run_dir) {
      st.last_committed = step;
      st.restore_dir = target.dir;
      st.clean_since_commit = true;
      if (st.ph != phase::idle) st.run_start_committed = true;  // the run can roll back to it
    }
    model::prune_checkpoints(fs, target.dir, std::max<size_t>(1, target.keep));
    event e;
    e.kind = event_kind::checkpoint_done;
    e.count = step;
    e.text = path;
    e.values["pause_seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - st.quiesce_began).count();
    e.values["bytes_to_coordinator"] = received_bytes;
    if (target.kept)
      e.values["kept"] = 1;  // the state kept at an epoch gate
    else if (!target.run_dir)
      e.values["asked"] = 1;  // by a callback, into its own directory
    emit(st, std::move(e));
  } catch (const std::exception& ex) {
    st.checkpointing = false;
    fail_run(self, make_error(error_code::checkpoint_failed, fmt::format("checkpoint at step {}: {}", step, ex.what())));
    return;
  }
  st.checkpointing = false;
  then(path);
}

// A shard did not give its part of checkpoint `attempt`: a lost one rolls the run back
// (the checkpoint is retried after), anything else ends the run.
std::function<void(caf::error&)> checkpoint_refused(self_ptr self, size_t i, uint64_t attempt) {
  return [self, i, attempt](caf::error& e) {
    auto& st = self->state;
    if (attempt != st.ckpt_attempt) return;
    ++st.ckpt_attempt;  // the other answers are not needed any more
    st.checkpointing = false;
    if (e == caf::sec::request_receiver_down) {
      on_ps_down(self, static_cast<uint32_t>(i), e);  // rolls back; the checkpoint is retried after
      return;
    }
    fail_run(self, make_error(error_code::checkpoint_failed,
                              code_of(e) == error_code::timeout ? fmt::format("checkpoint at step {}: {}", st.steps_total, describe(e))
                                                                : fmt::format("checkpoint: ps shard {} did not answer: {}", i, describe(e))));
  };
}

// A committed checkpoint of `step` under `root` that is not of the state about to be
// written there (a failed run's, or one from before a roll-back to an older checkpoint)
// gives way to it.
void replace_same_step(model::file_system& fs, const std::string& root, int64_t step) {
  auto dir = model::join_path(root, model::checkpoint_dir_name(step));
  if (fs.exists(model::join_path(dir, "manifest.json"))) model::remove_checkpoint(fs, root, dir);
}

// The shards' answers for a checkpoint (ps_snapshot or ps_files), their partitions per
// variable in row order: how the manifest lists them.
template <class Reply>
auto partitions_by_variable(std::vector<Reply>& replies) {
  using part = typename decltype(Reply::partitions)::value_type;
  std::map<int32_t, std::vector<part*>> out;
  for (auto& r : replies)
    for (auto& p : r.partitions) out[p.key.variable].push_back(&p);
  for (auto& [v, parts] : out)
    std::sort(parts.begin(), parts.end(), [](const part* a, const part* b) { return a->row_begin < b->row_begin; });
  return out;
}

// The partitions' ledgers as a checkpoint's manifest keeps them (its "extra"), by
// variable name and row range, so that a restore into another placement finds them.
template <class Part, class RowEnd>
nlohmann::json ledgers_for_manifest(const coord_state& st, std::map<int32_t, std::vector<Part*>>& by_var, RowEnd row_end) {
  auto out = nlohmann::json::array();
  for (auto& vp : st.opts.placement->variables())
    for (auto* p : by_var[vp.variable])
      out.push_back({{"variable", vp.name}, {"row_begin", p->row_begin}, {"row_end", row_end(*p)}, {"ledger", to_json(p->ledger)}});
  return out;
}

// The ledger a checkpoint holds for the partition of `variable` that begins at `row`
// (the saved partition that covers that row; empty for a checkpoint without ledgers).
// At a checkpoint nothing is in flight, so every saved partition holds the same steps.
ledger_data saved_ledger(const nlohmann::json& extra, const std::string& variable, int64_t row) {
  if (!extra.contains("ledgers")) return {};
  for (auto& l : extra.at("ledgers"))
    if (l.at("variable").get<std::string>() == variable && l.at("row_begin").get<int64_t>() <= row &&
        row < l.at("row_end").get<int64_t>())
      return ledger_from_json(l.at("ledger"));
  return {};
}

// checkpoint.shared: every shard writes its own partitions into the directory begun
// here; only their files' records come back, and the manifest commits them.
void write_shared_checkpoint(self_ptr self, ckpt_target target, std::function<void(const std::string&)> then) {
  auto& st = self->state;
  auto attempt = st.ckpt_attempt;
  auto step = static_cast<int64_t>(st.steps_total);
  std::string dir;
  try {
    replace_same_step(checkpoint_fs(st), target.dir, step);
    dir = model::begin_checkpoint(checkpoint_fs(st), target.dir, step);
  } catch (const std::exception& ex) {
    st.checkpointing = false;
    fail_run(self, make_error(error_code::checkpoint_failed, fmt::format("checkpoint at step {}: {}", step, ex.what())));
    return;
  }
  auto files = std::make_shared<std::vector<ps_files>>(st.opts.ps.size());
  auto remaining = std::make_shared<size_t>(st.opts.ps.size());
  auto live = [self, attempt] { return attempt == self->state.ckpt_attempt; };
  for (size_t i = 0; i < st.opts.ps.size(); ++i)
    ask_shard<ps_files>(
        self, i, fmt::format("the snapshot for the checkpoint at step {}", step), live,
        [self, files, remaining, i, then, attempt, step, target](ps_files& f) {
          auto& st = self->state;
          if (attempt != st.ckpt_attempt) return;  // abandoned (a shard was lost, the run ended)
          (*files)[i] = std::move(f);
          if (--*remaining > 0) return;
          auto by_var = partitions_by_variable(*files);
          auto record = [](const file_entry& e) { return model::file_record{e.name, e.bytes, e.crc32}; };
          model::checkpoint_record r;
          r.step = step;
          for (auto& vp : st.opts.placement->variables()) {
            model::variable_record v{vp.name, vp.shape, {}};
            for (auto* p : by_var[vp.variable]) {
              model::partition_record pr;
              pr.row_begin = p->row_begin;
              pr.row_end = p->row_end;
              pr.iterations = p->iterations;
              pr.values = record(p->values);
              for (size_t k = 0; k < p->slots.size() && k < p->slot_names.size(); ++k)
                pr.slots[p->slot_names[k]] = record(p->slots[k]);
              v.partitions.push_back(std::move(pr));
            }
            r.variables.push_back(std::move(v));
          }
          r.extra = save_run(st);
          r.extra["ledgers"] = ledgers_for_manifest(st, by_var, [](const partition_files& p) { return p.row_end; });
          if (st.optimizer) {
            r.optimizer = st.optimizer->describe();
            r.hyperparams = st.optimizer->hyperparams();
          }
          finish_checkpoint(
            self, target, step, 0.0, [&](model::file_system& fs) { return model::commit_checkpoint(fs, target.dir, r); },
            then);
        },
        checkpoint_refused(self, i, attempt), 1, snapshot_atom::value, fence_request{current_fence(st), attempt},
        checkpoint_target{dir});
}

// Asks every shard for its state, writes one checkpoint at steps_total (values, slots,
// iterations per partition; the run state in `extra`), keeps the newest
// checkpoint_keep, then runs `then`. A failure to write ends the run.
void write_checkpoint_now(self_ptr self, std::function<void()> then) {
  auto& st = self->state;
  write_checkpoint_to(self, ckpt_target{st.opts.checkpoint_dir, std::max<size_t>(1, st.opts.checkpoint_keep), true},
                      [then](const std::string&) { then(); });
}

void write_checkpoint_to(self_ptr self, ckpt_target target, std::function<void(const std::string&)> then) {
  auto& st = self->state;
  st.checkpointing = true;
  auto attempt = ++st.ckpt_attempt;
  if (st.opts.checkpoint_shared) {
    write_shared_checkpoint(self, std::move(target), std::move(then));
    return;
  }
  auto snaps = std::make_shared<std::vector<ps_snapshot>>(st.opts.ps.size());
  auto remaining = std::make_shared<size_t>(st.opts.ps.size());
  auto live = [self, attempt] { return attempt == self->state.ckpt_attempt; };
  for (size_t i = 0; i < st.opts.ps.size(); ++i)
    ask_shard<ps_snapshot>(
        self, i, fmt::format("the snapshot for the checkpoint at step {}", st.steps_total), live,
        [self, snaps, remaining, i, then, attempt, target](ps_snapshot& s) {
          auto& st = self->state;
          if (attempt != st.ckpt_attempt) return;  // abandoned (a shard was lost, the run ended)
          (*snaps)[i] = std::move(s);
          if (--*remaining > 0) return;
          const auto& pl = *st.opts.placement;
          model::checkpoint_data data;
          data.step = static_cast<int64_t>(st.steps_total);
          auto by_var = partitions_by_variable(*snaps);
          double received = 0;
          for (auto& sn : *snaps)
            for (auto& p : sn.partitions)
              received += static_cast<double>(p.value.rows() * p.value.cols()) * (1.0 + static_cast<double>(p.slots.size()));
          received *= sizeof(float);
          for (auto& vp : pl.variables()) {
            model::variable_data v;
            v.name = vp.name;
            v.shape = vp.shape;
            for (auto* p : by_var[vp.variable]) {
              model::partition_data d;
              d.row_begin = p->row_begin;
              d.row_end = p->row_begin + p->value.rows();
              d.values = *p->value.value;
              d.iterations = p->iterations;
              for (size_t k = 0; k < p->slots.size(); ++k) d.slots[p->slot_names[k]] = *p->slots[k].value;
              v.partitions.push_back(std::move(d));
            }
            data.variables.push_back(std::move(v));
          }
          data.extra = save_run(st);
          data.extra["ledgers"] = ledgers_for_manifest(
            st, by_var, [](const partition_snapshot& p) { return p.row_begin + p.value.rows(); });
          if (st.optimizer) {
            data.optimizer = st.optimizer->describe();
            data.hyperparams = st.optimizer->hyperparams();
          }
          finish_checkpoint(
            self, target, data.step, received,
            [&](model::file_system& fs) {
              replace_same_step(fs, target.dir, data.step);
              return model::write_checkpoint(fs, target.dir, data);
            },
            then);
        },
        checkpoint_refused(self, i, attempt), 1, snapshot_atom::value, fence_request{current_fence(st), attempt});
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

// The worker fences a shard must enforce: for each worker, its current generation if it
// is alive, else the one after it.
std::vector<std::pair<uint32_t, uint64_t>> min_generations(const coord_state& st) {
  std::vector<std::pair<uint32_t, uint64_t>> out;
  for (auto& w : st.workers) out.emplace_back(w.id, w.alive ? w.generation : w.generation + 1);
  return out;
}

// The error path of restore attempt `attempt`'s request to shard `i`: a shard that is
// gone starts the recovery over once it is replaced; anything else ends the run.
std::function<void(caf::error&)> restore_failed(self_ptr self, size_t i, uint64_t attempt, std::string what) {
  return [self, i, attempt, what](caf::error& e) {
    if (attempt == self->state.restore_attempt) ps_failed(self, i, e, what + ": ", /*even_recovering=*/true);
  };
}

// Sends every shard its partitions of `data` (cut to this placement; the values move
// into the messages) with their ledgers and the de-duplication state `run`/`watermark`
// under the current fence; `then()` once all took them. A shard that is gone starts
// (another) recovery. The fence's epochs are this restore's own, so a retried init that
// arrives late or twice is not redone.
void send_state(self_ptr self, model::checkpoint_data data, uint64_t run, const std::vector<uint64_t>& wm,
                std::function<void()> then, std::optional<model::checkpoint_data> kept = std::nullopt) {
  auto& st = self->state;
  const auto& pl = *st.opts.placement;
  auto attempt = st.restore_attempt;
  std::vector<init_request> reqs(static_cast<size_t>(pl.num_ps()));
  try {
    for (int p = 0; p < pl.num_ps(); ++p) {
      auto& req = reqs[static_cast<size_t>(p)];
      req.f = current_fence(st);
      req.run = run;
      req.watermark = wm;
      req.min_generations = min_generations(st);
      req.base = static_cast<uint64_t>(std::max<int64_t>(0, data.step));
      for (auto& part : pl.partitions_on(p)) {
        const auto& vp = pl.variable(part.variable);
        auto& pd = data.variables[static_cast<size_t>(part.variable)].partitions[static_cast<size_t>(part.index)];
        partition_init pi{partition_key{part.variable, part.index}, vp.name, part.row_begin, vp.sparse,
                          tensor{std::move(pd.values)}, {}, {}, 0, {}, {}, {}, 0};
        for (auto& [name, m] : pd.slots) {
          pi.slot_names.push_back(name);
          pi.slots.push_back(tensor{std::move(m)});
        }
        pi.iterations = pd.iterations;
        pi.ledger = saved_ledger(data.extra, vp.name, part.row_begin);
        if (kept) {
          auto& kd = kept->variables[static_cast<size_t>(part.variable)].partitions[static_cast<size_t>(part.index)];
          pi.kept = tensor{std::move(kd.values)};
          for (auto& name : pi.slot_names)
            if (auto s = kd.slots.find(name); s != kd.slots.end()) pi.kept_slots.push_back(tensor{std::move(s->second)});
          if (pi.kept_slots.size() != pi.slot_names.size()) pi.kept_slots.clear();
          pi.kept_iterations = kd.iterations;
        }
        req.partitions.push_back(std::move(pi));
      }
    }
  } catch (const std::exception& e) {
    fail_run(self, make_error(error_code::checkpoint_failed, fmt::format("restore: the checkpoint's ledgers: {}", e.what())));
    return;
  }
  auto remaining = std::make_shared<size_t>(st.opts.ps.size());
  auto live = [self, attempt] { return attempt == self->state.restore_attempt; };
  for (size_t i = 0; i < reqs.size(); ++i)
    ask_shard<caf::ok_atom>(
      self, i, "its state (init)", live,
      [self, remaining, then, attempt](caf::ok_atom) {
        if (attempt != self->state.restore_attempt) return;
        if (--*remaining == 0) then();
      },
      restore_failed(self, i, attempt, fmt::format("ps shard {} did not take its state", i)), 1, init_atom::value,
      std::move(reqs[i]));
}

// -- what a roll-back restores -----------------------------------------------------------
//
// A checkpoint's manifest holds the run state of its own run ("extra") and, when a later
// run began with nothing changed since, that run's starting state too ("run_starts":
// the previous run's final checkpoint marked as the next run's start).

// Which checkpoints a restore may use, and which run state it loads.
enum class restore_kind {
  this_run,  // a roll-back: the current run's own checkpoints, or the one marked as its start
  newest,    // a resumed run or a take-over: the newest checkpoint with its newest run state
  values,    // between runs, or before a run applied anything: the newest of any run, values only
};

// The run state `extra` offers to `kind` for run `run`, if any.
std::optional<nlohmann::json> state_for(const nlohmann::json& extra, restore_kind kind, uint64_t run) {
  auto starts = extra.contains("run_starts") ? extra.at("run_starts") : nlohmann::json::array();
  switch (kind) {
    case restore_kind::values:
      return extra;
    case restore_kind::newest:
      return starts.empty() ? extra : starts.back();
    case restore_kind::this_run:
      if (extra.contains("run") && extra.at("run").get<uint64_t>() == run) return extra;
      for (auto& s : starts)
        if (s.contains("run") && s.at("run").get<uint64_t>() == run) return s;
      return std::nullopt;
  }
  return std::nullopt;
}

struct restore_source {
  model::checkpoint_data data;  // cut to this placement
  std::string path;
  nlohmann::json state;  // the run state to load
};

// The newest checkpoint under `dir` that `kind` accepts and that reads back whole (every
// file's size and CRC), cut to this placement. Those skipped because they do not read
// back are listed in `skipped` ("path: why").
std::optional<restore_source> pick_checkpoint(coord_state& st, const std::string& dir, restore_kind kind,
                                              std::vector<std::string>& skipped) {
  auto& fs = checkpoint_fs(st);
  auto all = model::list_checkpoints(fs, dir);
  auto extra_of = [&fs](const std::string& path) {
    auto manifest = model::read_manifest(fs, path);
    return manifest.contains("extra") ? manifest.at("extra") : nlohmann::json::object();
  };
  // Resuming continues the newest run the directory holds: its own checkpoints only (a
  // fallback past a corrupt one must not land in an earlier run).
  uint64_t run = st.run;
  if (kind == restore_kind::newest && !all.empty()) {
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
      try {
        auto state = state_for(extra_of(it->path), restore_kind::newest, 0);
        if (state && state->contains("run")) {
          run = state->at("run").get<uint64_t>();
          kind = restore_kind::this_run;
          break;
        }
      } catch (const std::exception&) {
        // Its manifest does not parse: the next one says which run is newest.
      }
    }
  }
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    std::optional<nlohmann::json> state;
    try {
      state = state_for(extra_of(it->path), kind, run);
    } catch (const std::exception& e) {
      skipped.push_back(fmt::format("{}: {}", it->path, e.what()));
      continue;
    }
    if (!state) continue;
    try {
      restore_source out;
      out.data = model::repartition(model::read_checkpoint(fs, it->path), *st.opts.placement);
      out.path = it->path;
      out.state = std::move(*state);
      return out;
    } catch (const std::exception& e) {
      skipped.push_back(fmt::format("{}: {}", it->path, e.what()));
    }
  }
  return std::nullopt;
}

void init_shards(self_ptr self, std::function<void()> then);
void continue_start(self_ptr self);

void warn(coord_state& st, std::string text) {
  event w;
  w.kind = event_kind::warning;
  w.text = std::move(text);
  emit(st, std::move(w));
}

// Restores every shard from the checkpoint under `dir` that `kind` picks (the newest that
// reads back whole; each skipped one is named in a warning), loading its run state
// unless `kind` is values, under new epochs: a new coordinator epoch (`takeover`: a
// resumed run) or a new recovery epoch, each max(every shard's and the checkpoint's) + 1.
// Calls then(step, path) when every shard has its state. When no checkpoint serves, the
// run fails naming each one tried and its fault (between runs: the shards wait for the
// next fit to restore them).
void restore_all(self_ptr self, std::string dir, restore_kind kind, bool takeover,
                 std::function<void(int64_t, std::string)> then) {
  auto& st = self->state;
  auto attempt = ++st.restore_attempt;
  st.recovering = true;  // nothing is dispatched until every shard has its state
  std::vector<std::string> skipped;
  std::optional<restore_source> src;
  std::string problem;
  try {
    src = pick_checkpoint(st, dir, kind, skipped);
  } catch (const std::exception& ex) {
    problem = ex.what();
  }
  for (auto& s : skipped) warn(st, "restore: skipped " + s);
  if (!src) {
    if (problem.empty())
      problem = skipped.empty()
                  ? fmt::format("no committed checkpoint under {}{}", dir,
                                kind == restore_kind::this_run ? fmt::format(" of run {}", st.run) : std::string{})
                  : fmt::format("no checkpoint under {} validates: {}", dir, fmt::join(skipped, "; "));
    if (st.ph == phase::idle) {  // between runs: the next fit restores or initializes them
      st.recovering = false;
      st.ps_ready = false;
      warn(st, "restore: " + problem);
      return;
    }
    if (kind == restore_kind::values && st.ph == phase::initializing) {
      // A run about to start, and no good checkpoint: it starts from the initial values.
      warn(st, "restore: " + problem + "; every ps shard starts from the initial values");
      init_shards(self, [self] {
        auto& st = self->state;
        st.recovering = false;
        st.ps_ready = true;
        continue_start(self);
      });
      return;
    }
    fail_run(self, make_error(error_code::checkpoint_failed, "restore: " + problem));
    st.ps_ready = false;
    return;
  }
  auto data = std::make_shared<restore_source>(std::move(*src));
  // What every shard has seen, so the new epochs are above all of them.
  auto seen = std::make_shared<fence>();
  if (takeover && data->state.contains("coordinator_epoch"))
    seen->coordinator_epoch = data->state["coordinator_epoch"].get<uint64_t>();
  auto remaining = std::make_shared<size_t>(st.opts.ps.size());
  auto generations = std::make_shared<std::map<uint32_t, uint64_t>>();  // per worker, the highest fence
  bool load = kind != restore_kind::values;
  auto go = [self, data, takeover, load, then, seen, generations] {
    auto& st = self->state;
    if (takeover) {
      st.opts.coordinator_epoch = std::max(st.opts.coordinator_epoch, seen->coordinator_epoch + 1);
      st.recovery_epoch = 0;
      // A predecessor may have fenced workers up to some generation: ours start above it
      // (as workers registering with a new coordinator would), and its tasks to them
      // cannot be applied any more.
      for (auto& w : st.workers) {
        auto g = generations->count(w.id) ? generations->at(w.id) : 0;
        w.generation = std::max(w.generation, g) + 1;
      }
    } else {
      auto base = seen->coordinator_epoch == st.opts.coordinator_epoch ? seen->recovery_epoch : 0;
      st.recovery_epoch = std::max(st.recovery_epoch, base) + 1;
    }
    uint64_t run = 0;
    std::vector<uint64_t> wm;
    try {
      run = data->state.at("run").get<uint64_t>();
      wm = data->state.at("watermark").get<std::vector<uint64_t>>();
      if (load) load_run(st, data->state);
      // Test-only: a roll-back that forgets the checkpoint's last step of pipeline 0, so
      // the shards apply it again (their ledgers must say so).
      if (load && st.opts.plant && st.opts.plant->which == planted_defect::apply_twice_after_rollback && !st.pipes.empty() &&
          st.pipes[0].next > st.pipes[0].epoch_begin && !wm.empty() && wm[0] == st.pipes[0].next) {
        --st.pipes[0].next;
        --wm[0];
        st.opts.plant->fired();
      }
    } catch (const std::exception& ex) {
      fail_run(self, make_error(error_code::checkpoint_failed, fmt::format("restore from {}: {}", data->path, ex.what())));
      return;
    }
    st.last_committed = data->data.step;
    st.restore_dir = model::parent_path(data->path);
    st.clean_since_commit = true;
    // The state the run keeps (an epoch gate's), from its own checkpoint.
    std::optional<model::checkpoint_data> kept;
    if (!load) st.kept_epoch = -1;
    if (st.kept_epoch >= 0) {
      try {
        kept = model::repartition(model::read_checkpoint(checkpoint_fs(st), st.kept_checkpoint), *st.opts.placement);
      } catch (const std::exception& ex) {
        warn(st, fmt::format("restore: the kept state of epoch {} is lost: {}", st.kept_epoch + 1, ex.what()));
        st.kept_epoch = -1;
      }
    }
    auto step = data->data.step;
    auto path = data->path;
    // The hyperparameters of that point, when the run state has them, before any step.
    std::vector<std::pair<std::string, double>> hyper;
    if (load && data->state.contains("hyperparams"))
      for (auto& [k, v] : data->state.at("hyperparams").items()) hyper.emplace_back(k, v.get<double>());
    auto attempt = st.restore_attempt;
    auto done = [self, then, step, path, hyper, attempt] {
      auto& st = self->state;
      if (hyper.empty()) {
        then(step, path);
        return;
      }
      hyperparams_request req{current_fence(st), hyper, ++st.control_id};
      ask_every_shard<caf::ok_atom>(
        self, "the restored hyperparameters", [self, attempt] { return attempt == self->state.restore_attempt; },
        [self, then, step, path, req, attempt] {
          if (attempt != self->state.restore_attempt) return;
          if (auto& o = self->state.optimizer)
            for (auto& [k, v] : req.values) o->set_hyperparam(k, v);
          then(step, path);
        },
        [self, attempt](caf::error& e) {
          if (attempt != self->state.restore_attempt || e == caf::sec::request_receiver_down) return;
          fail_run(self, make_error(error_code::checkpoint_failed, "restore: setting its hyperparameters: " + describe(e)));
        },
        hyper_atom::value, req);
    };
    send_state(self, std::move(data->data), run, wm, done, std::move(kept));
  };
  auto live = [self, attempt] { return attempt == self->state.restore_attempt; };
  for (size_t i = 0; i < st.opts.ps.size(); ++i) {
    // The shard's counters carry what it has seen: epochs and worker fences.
    ask_shard<ps_stats>(
      self, i, "its counters (stats)", live,
      [self, remaining, seen, generations, go, attempt](ps_stats& s) {
        if (attempt != self->state.restore_attempt) return;
        if (epochs_older(*seen, s.seen)) {
          seen->coordinator_epoch = s.seen.coordinator_epoch;
          seen->recovery_epoch = s.seen.recovery_epoch;
        }
        for (auto& [w, g] : s.min_generations) (*generations)[w] = std::max((*generations)[w], g);
        if (--*remaining == 0) go();
      },
      restore_failed(self, i, attempt, fmt::format("ps shard {} did not answer", i)), 1, stats_atom::value);
  }
}

void start_run(self_ptr self);
void dispatch(self_ptr self);

// Continues the run saved in the newest checkpoint under restore_dir (fit with
// resume_from, or a coordinator taking a run over) under a new coordinator epoch.
void resume(self_ptr self) {
  restore_all(self, self->state.restore_dir, restore_kind::newest, /*takeover=*/true,
              [self](int64_t step, std::string path) {
                auto& st = self->state;
                st.recovering = false;
                st.resuming = false;
                st.ps_ready = true;
                st.run_start_committed = true;  // the checkpoint it resumed from is the run's
                next_checkpoint_after(st);
                event r;
                r.kind = event_kind::resumed;
                r.count = step;
                r.text = path;
                emit(st, std::move(r));
                event e;
                e.kind = event_kind::epoch_begin;
                e.epoch = st.epoch;
                e.count = st.spec.steps_per_epoch > 0 ? st.spec.steps_per_epoch : -1;
                emit(st, std::move(e));
                schedule_tick(self);
                dispatch(self);
              });
}

// The first state of every shard: the initial values (a step-0 state without optimizer
// state, with empty ledgers), sent as a restore is, under epochs of its own.
void init_shards(self_ptr self, std::function<void()> then) {
  auto& st = self->state;
  model::checkpoint_data data;
  for (auto& vp : st.opts.placement->variables()) {
    model::variable_data v;
    v.name = vp.name;
    v.shape = vp.shape;
    const auto& full = (*st.opts.initial)[vp.variable];
    for (auto& part : vp.partitions) {
      model::partition_data d;
      d.row_begin = part.row_begin;
      d.row_end = part.row_end;
      d.values = full.middleRows(part.row_begin, part.rows());
      v.partitions.push_back(std::move(d));
    }
    data.variables.push_back(std::move(v));
  }
  ++st.restore_attempt;
  ++st.recovery_epoch;
  send_state(self, std::move(data), /*run=*/0, {}, std::move(then));
}

// The state a run starts from, when the shards need one before its first step (a shard
// was lost, or a restore failed): the newest good checkpoint of any run, else the
// initial values. Then `then()`.
void restore_start_state(self_ptr self, std::function<void()> then) {
  auto& st = self->state;
  auto done = [self, then] {
    auto& st = self->state;
    st.recovering = false;
    st.ps_ready = true;
    then();
  };
  if (!st.restore_dir.empty()) {
    restore_all(self, st.restore_dir, restore_kind::values, /*takeover=*/false,
                [done](int64_t, std::string) mutable { done(); });
    return;
  }
  // Nothing to restore: every shard starts again from the initial values (empty
  // ledgers), so the cluster stays usable.
  if (st.steps_total > 0)
    warn(st, "every ps shard starts from the initial values: a shard lost its state and there is no committed "
             "checkpoint to restore it from (set checkpoint_dir)");
  st.recovering = true;
  init_shards(self, done);
}

// The event of a roll-back to the checkpoint at `step`; during a run (in_run) with how
// long the recovery took and how many applied steps it took back.
void emit_ps_restored(coord_state& st, int64_t step, std::string path, bool in_run) {
  event e;
  e.kind = event_kind::ps_restored;
  e.count = step;
  e.text = std::move(path);
  if (in_run) {
    e.values["recovery_seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - st.lost_at).count();
    e.values["steps_lost"] =
      static_cast<double>(st.steps_at_loss - std::min<uint64_t>(st.steps_at_loss, static_cast<uint64_t>(step)));
  }
  emit(st, std::move(e));
}

// After the shards got a state before the run's first step: take the start up again.
void continue_start(self_ptr self) {
  auto& st = self->state;
  if (st.ph == phase::initializing) {
    start_run(self);
    return;
  }
  if (st.ph == phase::idle) return;
  // The run's first checkpoint was being written: write it again.
  if (!st.opts.checkpoint_dir.empty()) {
    st.quiescing = true;
    st.quiesce_began = std::chrono::steady_clock::now();
    st.next_checkpoint = 0;
  }
  dispatch(self);
}

// Every lost shard has a replacement: roll back and go on. During a run, to the run's
// own newest good checkpoint; before its first step, to the state it starts from;
// between runs, the shards get the newest good checkpoint's values (or wait for the
// next fit when there is none).
void recover(self_ptr self) {
  auto& st = self->state;
  if (st.resuming) {
    resume(self);  // a shard was lost before the resumed run had its state: start it over
    return;
  }
  if (st.ph == phase::idle) {
    if (st.restore_dir.empty()) {
      st.recovering = false;
      st.ps_ready = false;  // the next fit initializes (or restores) every shard
      return;
    }
    restore_all(self, st.restore_dir, restore_kind::values, /*takeover=*/false, [self](int64_t step, std::string path) {
      auto& st = self->state;
      st.recovering = false;
      emit_ps_restored(st, step, std::move(path), /*in_run=*/false);
      // A fit asked for meanwhile waits for this restore to start.
      if (st.ph == phase::initializing) start_run(self);
    });
    return;
  }
  if (!st.run_start_committed) {
    restore_start_state(self, [self] { continue_start(self); });
    return;
  }
  restore_all(self, st.restore_dir, restore_kind::this_run, /*takeover=*/false, [self](int64_t step, std::string path) {
    auto& st = self->state;
    st.recovering = false;
    emit_ps_restored(st, step, std::move(path), /*in_run=*/true);
    next_checkpoint_after(st);
    dispatch(self);
  });
}

// A ps shard is gone: everything waits for its replacement (at most worker_wait), then
// rolls back (recover). A run that applied steps without a checkpoint to go back to
// cannot go on.
void on_ps_down(self_ptr self, uint32_t index, const caf::error& reason) {
  auto& st = self->state;
  bool fresh = st.lost_ps.insert(index).second;
  if (!fresh) return;
  event lost;
  lost.kind = event_kind::ps_lost;
  lost.count = index;
  lost.text = describe(reason);
  emit(st, std::move(lost));
  if (!st.recovering) {
    st.lost_at = std::chrono::steady_clock::now();
    st.steps_at_loss = st.steps_total;
  }
  st.recovering = true;
  ++st.restore_attempt;  // a restore under way starts over once this shard is back
  ++st.ckpt_attempt;     // a checkpoint under way is abandoned
  ++st.start_attempt;    // so is a run's start-up fence
  st.checkpointing = false;
  st.quiescing = false;
  forget_work(st);  // every step after the checkpoint runs again from its state
  if (st.ph != phase::idle && st.restore_dir.empty() && st.steps_total > 0) {
    st.ps_ready = false;
    fail_run(self, make_error(error_code::worker_lost,
                              fmt::format("ps shard {} was lost ({}) and there is no committed checkpoint to roll back "
                                          "to (set checkpoint_dir)",
                                          index, describe(reason))));
    return;
  }
  auto id = ++st.recoveries;
  self->delayed_send(self, st.opts.worker_wait, recover_atom::value, id);
}

// -- a run's start ----------------------------------------------------------------------

// The run's start-up, (re)entered after any recovery before its first step: the shards'
// state (a resumed run's checkpoint; the initial values or the newest good checkpoint
// when they have none), every shard fenced under new epochs (a failed run's late pushes
// are refused from here on), then begin_run.
void begin_run(self_ptr self);
void start_run(self_ptr self) {
  auto& st = self->state;
  if (st.ph != phase::initializing || st.recovering || !st.lost_ps.empty()) return;  // recover() comes back here
  if (st.resuming) {
    resume(self);
    return;
  }
  if (!st.ps_ready) {
    restore_start_state(self, [self] { begin_run(self); });
    return;
  }
  ++st.recovery_epoch;
  auto attempt = ++st.start_attempt;
  auto live = [self, attempt] { return attempt == self->state.start_attempt; };
  // Then the first epoch's hyperparameters (run_spec::hyperparams), before any step.
  auto then = [self, live] {
    if (!live()) return;
    auto& st = self->state;
    if (st.spec.hyperparams.empty()) {
      begin_run(self);
      return;
    }
    hyperparams_request req{current_fence(st), st.spec.hyperparams, ++st.control_id};
    ask_every_shard<caf::ok_atom>(
      self, "the run's first hyperparameters", live,
      [self, live, req] {
        if (!live()) return;
        if (auto& o = self->state.optimizer)
          for (auto& [k, v] : req.values) o->set_hyperparam(k, v);
        begin_run(self);
      },
      [self, live](caf::error& e) {
        if (!live() || e == caf::sec::request_receiver_down) return;
        fail_run(self, make_error(error_code::invalid_request, "the run's first hyperparameters: " + describe(e)));
      },
      hyper_atom::value, req);
  };
  ask_every_shard<fence>(
    self, "the run's start-up fence", live, then,
    [self, live](caf::error& e) {
      if (!live()) return;
      if (e == caf::sec::request_receiver_down) return;  // the loss starts a recovery that starts over
      fail_run(self, e);
    },
    fence_atom::value, fence_request{current_fence(st), 0});
}

// True when the newest committed checkpoint is the cluster's state as it is now (the
// previous run's final one, nothing changed since): the run marks it as its start.
bool can_mark_start(const coord_state& st) {
  return st.clean_since_commit && st.last_committed == static_cast<int64_t>(st.steps_total) &&
         !st.restore_dir.empty() && st.restore_dir == st.opts.checkpoint_dir;
}

// Marks the newest committed checkpoint as this run's start: its manifest gains the
// run's starting state (atomically), so a roll-back of this run, and a coordinator that
// takes it over, begin it again from there.
void mark_run_start(self_ptr self) {
  auto& st = self->state;
  auto& fs = checkpoint_fs(st);
  auto path = model::join_path(st.restore_dir, model::checkpoint_dir_name(st.last_committed));
  auto extra = model::read_manifest(fs, path).at("extra");
  if (!extra.contains("run_starts") || !extra.at("run_starts").is_array()) extra["run_starts"] = nlohmann::json::array();
  extra["run_starts"].push_back(save_run(st));
  model::update_checkpoint_extra(fs, path, extra);
  st.run_start_committed = true;
}

// The shards are ready: the run's first epoch begins once its start is committed (a
// checkpoint written now, before any step, or the previous run's final one marked).
void begin_run(self_ptr self) {
  auto& st = self->state;
  if (st.ph != phase::initializing) return;
  st.ps_ready = true;
  if (st.spec.epochs == 0) {
    finish_run(self);
    return;
  }
  begin_epoch(self);
  schedule_tick(self);
  if (!st.opts.checkpoint_dir.empty()) {
    if (can_mark_start(st)) {
      try {
        mark_run_start(self);
      } catch (const std::exception& e) {
        fail_run(self, make_error(error_code::checkpoint_failed, fmt::format("marking the run's start: {}", e.what())));
        return;
      }
    } else {
      st.quiescing = true;  // dispatch writes it before any step
      st.quiesce_began = std::chrono::steady_clock::now();
      st.next_checkpoint = 0;
    }
  }
  dispatch(self);
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
    [self](status_atom) -> cluster_status {
      auto& st = self->state;
      cluster_status s;
      s.run = st.run;
      s.training = st.ph != phase::idle;
      s.epoch = st.epoch;
      s.steps_applied = st.applied_run;
      for (auto& w : st.workers) s.workers.push_back(worker_status{w.id, w.generation, w.alive, w.outstanding > 0, w.steps});
      return s;
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

}  // namespace

coordinator_actor spawn_coordinator(caf::actor_system& sys, coordinator_options opts) {
  if (opts.ps.empty()) throw std::invalid_argument("spawn_coordinator: no ps shards");
  if (!opts.placement || !opts.initial) throw std::invalid_argument("spawn_coordinator: no placement or initial values");
  if (!opts.seam) throw std::invalid_argument("spawn_coordinator: no send seam");
  if (opts.tasks_per_worker < 1)
    throw std::invalid_argument(fmt::format("tasks_per_worker = {} < 1", opts.tasks_per_worker));
  if (opts.steps_per_execution < 1)
    throw std::invalid_argument(fmt::format("steps_per_execution = {} < 1", opts.steps_per_execution));
  bool detached = opts.detached;
  if (detached) return sys.spawn<caf::detached>(coordinator_impl, std::move(opts));
  return sys.spawn(coordinator_impl, std::move(opts));
}

}  // namespace actortrain
