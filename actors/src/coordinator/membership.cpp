// The coordinator's members: workers that join, come back or are lost (fenced out, their
// steps re-queued), an outage with no worker left, rebuilt dataset shards (state.hpp).
#include "state.hpp"

#include "../core/planted.hpp"

namespace actortrain::coord {

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

// A rebuilt dataset shard for pipeline p.
caf::result<caf::ok_atom> on_source(self_ptr self, uint32_t p, dataset_shard_actor shard, bool eval) {
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
}

// No worker joined in time after the last one was lost.
void on_outage(self_ptr self, uint64_t id) {
  auto& st = self->state;
  if (id != st.outages || alive_workers(st)) return;
  fail_run(self, make_error(error_code::worker_lost, st.outage_reason + ", and none joined in time"));
}

// A worker joins (or comes back): its generation.
caf::result<uint64_t> on_join(self_ptr self, worker_actor handle, uint32_t id) {
  auto& st = self->state;
  if (id < st.workers.size()) {
    auto& w = st.workers[id];
    if (w.alive) return make_error(error_code::invalid_request, fmt::format("worker {} is already a member", id));
    w.handle = handle;
    w.alive = true;
    w.outstanding = 0;
    w.isolating = 0;
    ++w.generation;
  } else if (id == st.workers.size()) {
    worker_slot w;
    w.handle = handle;
    w.id = id;
    st.workers.push_back(w);
  } else {
    return make_error(error_code::invalid_request,
                      fmt::format("worker id {} leaves a gap (next is {})", id, st.workers.size()));
  }
  self->monitor(handle);
  ++st.outages;  // a pending outage check finds a member
  event e;
  e.kind = event_kind::worker_joined;
  e.worker = id;
  e.generation = st.workers[id].generation;
  emit(st, std::move(e));
  dispatch(self);
  return st.workers[id].generation;
}

}  // namespace actortrain::coord
