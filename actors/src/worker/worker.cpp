// The worker actor (worker.hpp; state.hpp): its behaviour, its tasks and their answers,
// compute, and the push of each step's gradients (or of push_every's mean).
#include "state.hpp"

namespace actortrain::worker_detail {

namespace {

void start(self_ptr self, step_task task, caf::typed_response_promise<task_result> rp) {
  auto& st = self->state;
  st.busy = true;
  st.task = std::move(task);
  st.next = 0;
  st.acc_steps.clear();  // a failed task's partial group is gone with it
  st.acc.clear();
  st.current_record = st.next_record++;
  st.records[st.current_record].rp = std::move(rp);
  run_next(self);
}

// Answers a task when it is complete.
void maybe_answer(self_ptr self, uint64_t id) {
  auto& st = self->state;
  auto i = st.records.find(id);
  if (i == st.records.end() || !i->second.computed || i->second.pending > 0) return;
  auto& steps = i->second.result.steps;
  std::sort(steps.begin(), steps.end(), [](const step_result& a, const step_result& b) { return a.step < b.step; });
  i->second.rp.deliver(std::move(i->second.result));
  st.records.erase(i);
}

void start_waiting(self_ptr self) {
  auto& st = self->state;
  if (st.busy || st.waiting.empty()) return;
  auto next = std::move(st.waiting.front());
  st.waiting.pop_front();
  start(self, std::move(next.first), std::move(next.second));
}

}  // namespace

// A batch request that bounced off a dead dataset shard: the coordinator rebuilds the
// shard and re-runs the step, so it says so (and does not blame the step).
caf::error batch_error(const worker_state& st, caf::error e) {
  if (e != caf::sec::request_receiver_down) return e;
  return make_error(error_code::source_lost,
                    fmt::format("worker {}, step {}: its dataset shard is gone", st.opts.id, to_string(st.current.step)));
}

// A request to ps shard `p` bounced off a dead actor: say so (shard_lost), so that the
// coordinator does not read the bounce as the loss of this worker.
caf::error shard_error(const worker_state& st, int p, caf::error e) {
  if (e != caf::sec::request_receiver_down) return e;
  return make_error(error_code::shard_lost,
                    fmt::format("worker {}, step {}: ps shard {} is gone", st.opts.id, to_string(st.current.step), p));
}

// Task `id` failed: answer it with the error; stop computing it if it is the current one.
void fail_record(self_ptr self, uint64_t id, caf::error err) {
  auto& st = self->state;
  // An application error ends the run: queued tasks would only compute on after it, so
  // they fail too. After a transport error (a timeout) the worker goes on with its queue.
  if (is_application_error(err)) {
    for (auto& w : st.waiting) w.second.deliver(err);
    st.waiting.clear();
  }
  if (auto i = st.records.find(id); i != st.records.end()) {
    i->second.rp.deliver(err);
    st.records.erase(i);
  }
  if (st.busy && st.current_record == id) {
    st.params.release();
    st.busy = false;
    ++st.seq;
    start_waiting(self);
  }
}

void fail(self_ptr self, caf::error err) { fail_record(self, self->state.current_record, std::move(err)); }

namespace {

// Every task this worker holds fails with `err`: the one computing, those waiting for
// push acknowledgements, and the queued ones (they would ask the same lost shard).
void fail_all(self_ptr self, const caf::error& err) {
  auto& st = self->state;
  for (auto& w : st.waiting) w.second.deliver(err);
  st.waiting.clear();
  std::vector<uint64_t> ids;
  for (auto& [id, rec] : st.records) ids.push_back(id);
  for (auto id : ids) fail_record(self, id, err);
}

// Monitors the shards in other processes among the current ones (once each).
void watch_remote_shards(self_ptr self) {
  auto& st = self->state;
  for (auto& p : st.opts.ps) {
    auto a = p.address();
    if (!p || a.node() == self->node() || st.watched.count(a)) continue;
    st.watched.insert(a);
    self->monitor(p);
  }
}

}  // namespace

// Every step of the current task is computed (its pushes may still be in flight).
void finish_task(self_ptr self) {
  auto& st = self->state;
  st.busy = false;
  st.params.release();
  auto id = st.current_record;
  if (auto i = st.records.find(id); i != st.records.end()) i->second.computed = true;
  maybe_answer(self, id);
  start_waiting(self);
}

namespace {

// Pushes each shard its slices for `group` (the current step, or the steps whose mean
// gradient st.grads holds); the steps are done when every shard acknowledged.
void push(self_ptr self, std::vector<step_result> group) {
  auto& st = self->state;
  const int nps = st.opts.placement->num_ps();
  push_header h;
  h.f = st.task.f;
  for (auto& g : group) {
    h.steps.push_back(g.step);
    h.example_count += g.example_count;
    h.digests.push_back(g.digest);
  }
  h.watermark = st.task.watermark;
  h.attempt = st.seq;
  auto reqs = slice_gradients(*st.opts.placement, st.grads, st.read_version, st.sent, h);
  // The step's acknowledgements are collected on the side while the next step runs.
  struct acks {
    std::vector<step_result> results;
    size_t remaining = 0;
    clock_type::time_point sent;
  };
  auto a = std::make_shared<acks>();
  a->results = std::move(group);
  a->sent = clock_type::now();
  for (auto& r : reqs)
    if (!r.dense.empty() || !r.sparse.empty()) ++a->remaining;
  auto id = st.current_record;
  auto& rec = st.records[id];
  // Test-only defects, at every attempt of step 2 of pipeline 0 (so a re-run or a
  // roll-back does not heal them): reported applied without its push, or pushed under a
  // step id that is not its own (a position past the data).
  if (auto* plant = st.opts.plant.get()) {
    bool target = false;
    for (auto& r : a->results) target = target || (r.step.pipeline == 0 && r.step.position == 2);
    if (target && plant->which == planted_defect::skip_step) {
      plant->fired();
      a->remaining = 0;
    } else if (target && plant->which == planted_defect::foreign_step) {
      plant->fired();
      for (auto& r : reqs) r.step.position += 1000000;
    }
  }
  if (a->remaining == 0) {
    for (auto& r : a->results) rec.result.steps.push_back(std::move(r));
    run_next(self);
    return;
  }
  // pull_with_push: the task's next training step reads what each shard holds right
  // after this push, so the push asks for it; a shard it reads but does not push to
  // (none, with dense variables) would need a pull of its own: then none rides along.
  uint64_t round = 0;
  if (st.opts.pull_with_push && st.task.training && st.next < st.task.steps.size() && !st.round.active) {
    auto asks = open_round(self, st.task.f, st.task.steps[st.next], true);
    bool all_pushed = true;
    for (int p = 0; p < nps; ++p) {
      auto& r = reqs[static_cast<size_t>(p)];
      if (!asks[static_cast<size_t>(p)].empty() && r.dense.empty() && r.sparse.empty()) all_pushed = false;
    }
    if (all_pushed) {
      round = st.round.id;
      for (int p = 0; p < nps; ++p) reqs[static_cast<size_t>(p)].then_pull = std::move(asks[static_cast<size_t>(p)]);
    } else {
      st.round = worker_state::pull_round{};  // the step pulls as usual
    }
  }
  rec.pending += a->remaining;
  for (int p = 0; p < nps; ++p) {
    auto& r = reqs[static_cast<size_t>(p)];
    if (r.dense.empty() && r.sparse.empty()) continue;
    const bool pulls = !r.then_pull.empty();
    st.opts.seam->request(self, st.opts.ps[static_cast<size_t>(p)], via(st, p), st.opts.timeout, push_atom::value, std::move(r))
      .then(
        [self, id, a, round, pulls, p](push_reply& rep) {
          auto& st = self->state;
          if (auto i = st.records.find(id); i != st.records.end()) {  // else the task failed already
            for (auto& r : a->results) r.max_staleness = std::max(r.max_staleness, rep.max_staleness);
            --i->second.pending;
            if (--a->remaining == 0) {
              for (auto& r : a->results) {
                r.timings.push_us = micros_since(a->sent);
                i->second.result.steps.push_back(std::move(r));
              }
              if (!st.opts.overlap_push && st.busy && st.current_record == id) run_next(self);
            }
            maybe_answer(self, id);
          }
          // The acknowledgement first: the next step may compute as its values come in.
          if (pulls) round_values(self, round, p, rep.pulled);  // (ignored once the round is gone)
        },
        [self, id, p, round, pulls](caf::error& e) {
          fail_record(self, id, shard_error(self->state, p, e));
          if (pulls) round_failed(self, round, p, std::move(e));
        });
  }
  if (st.opts.overlap_push) run_next(self);
}

}  // namespace

void push_group(self_ptr self);

namespace {

// push_every > 1: adds this step's gradients (weighted by its examples) to the group's;
// pushes their mean once the group is full or the task has no step left.
void accumulate(self_ptr self) {
  auto& st = self->state;
  if (auto f = st.acc.add(*st.opts.placement, st.grads, st.current.example_count, st.read_version)) {
    fail(self, make_error(f.code, fmt::format("worker {}: {}", st.opts.id, f.what)));
    return;
  }
  st.acc_steps.push_back(std::move(st.current));
  if (static_cast<int>(st.acc_steps.size()) < st.opts.push_every && st.next < st.task.steps.size()) {
    run_next(self);
    return;
  }
  push_group(self);
}

}  // namespace

// Pushes the mean of the group's gradients (push_every > 1).
void push_group(self_ptr self) {
  auto& st = self->state;
  st.acc.take(st.grads, st.read_version);
  auto group = std::move(st.acc_steps);
  st.acc_steps.clear();
  push(self, std::move(group));
}

namespace {

std::string check_gradients(const worker_state& st) {
  const auto& specs = st.opts.structure.variables();
  for (size_t v = 0; v < specs.size(); ++v) {
    bool finite = st.grads.is_sparse[v] ? model::all_finite(st.grads.sparse[v].rows) : model::all_finite(st.grads.dense[v]);
    if (!finite) return fmt::format("gradient of {} is not finite", specs[v].name);
  }
  return {};
}

}  // namespace

namespace {

void after_backward(self_ptr self, clock_type::time_point t);

// A training step computes the gradients: the built-in one (model::default_train_step)
// or cluster_spec::train_step. What it returns as "loss" is the step's loss; the metrics
// are reset per step and travel as states. An exception from a custom step is an
// application error (the exception handler fails the run).
void train_step(worker_state& st) {
  st.grads.zero();
  for (auto& m : st.metrics) m->reset();
  model::step_context ctx{*st.exec, st.params, st.grads, *st.opts.loss, &st.metrics, st.batch,
                          model::draw(st.opts.seed, st.current.step.position, st.current.step.pipeline), st.d_out};
  const model::step_function* fn = &st.opts.train_step;
  if (st.task.step_fn > 0) {
    if (st.task.step_fn > st.opts.steps.size())
      throw std::invalid_argument(fmt::format("worker {}: no registered step {} (this worker's job registers {})",
                                              st.opts.id, st.task.step_fn, st.opts.steps.size()));
    fn = &st.opts.steps[st.task.step_fn - 1];
  }
  auto logs = *fn ? fn->fn(ctx) : model::default_train_step(ctx);
  auto l = logs.find("loss");
  if (l == logs.end())
    throw std::invalid_argument(fmt::format("train step '{}' returned no \"loss\" in its logs", fn->name));
  if (st.task.ticket != 0) st.current.logs.assign(logs.begin(), logs.end());
  st.current.example_count = st.batch.rows();
  st.current.loss = l->second;
  st.current.metric_states.clear();
  for (auto& m : st.metrics) st.current.metric_states.push_back(m->state());
}

}  // namespace

void compute(self_ptr self) {
  auto& st = self->state;
  st.current.timings.pull_us = micros_since(st.phase_start);
  auto t = clock_type::now();
  if (st.task.training) {
    train_step(st);
    after_backward(self, t);
    return;
  }
  // Evaluation (loss and metrics) or prediction (outputs): inference mode, no gradients.
  const auto& out = st.exec->forward(st.params, st.batch.features, false);
  st.current.example_count = st.batch.rows();
  if (st.task.outputs) {
    st.current.outputs = tensor{model::matrix(out)};  // predict: the data may have no labels
  } else {
    st.current.loss = st.opts.loss->compute(out, st.batch.labels, nullptr);
    st.current.metric_states.clear();
    for (auto& m : st.metrics) {
      m->reset();
      m->update(out, st.batch.labels);
      st.current.metric_states.push_back(m->state());
    }
  }
  st.params.release();
  st.current.timings.compute_us = micros_since(t);
  st.records[st.current_record].result.steps.push_back(std::move(st.current));
  run_next(self);
}

namespace {

// A training step's gradients are in st.grads: check them, then push (or accumulate).
void after_backward(self_ptr self, clock_type::time_point t) {
  auto& st = self->state;
  st.params.release();  // let the shards write in place
  st.current.timings.compute_us = micros_since(t);
  // A compact table's gradient rows are its positions: the table's ids again.
  for (size_t v = 0; v < st.compact.size(); ++v) {
    if (!st.by_rows[v] || !st.compact[v] || !st.grads.is_sparse[v]) continue;
    if (!model::restore_row_ids(st.grads.sparse[v], st.row_ids[v])) {
      fail(self, make_error(error_code::invalid_gradient,
                            fmt::format("worker {}, step {}: the gradient of {} has a row past the {} rows of its batch",
                                        st.opts.id, to_string(st.current.step), st.opts.structure.variables()[v].name,
                                        st.row_ids[v].size())));
      return;
    }
  }
  auto problem = check_gradients(st);
  if (!problem.empty()) {
    fail(self, make_error(error_code::invalid_gradient,
                          fmt::format("worker {}, step {}: {}", st.opts.id, to_string(st.current.step), problem)));
    return;
  }
  if (st.opts.local_learning_rate > 0 && st.reuses_left > 0) local_step(st);
  if (st.opts.push_every > 1) {
    accumulate(self);
    return;
  }
  std::vector<step_result> one;
  one.push_back(std::move(st.current));
  push(self, std::move(one));
}

}  // namespace

void run_next(self_ptr self) {
  auto& st = self->state;
  if (st.next >= st.task.steps.size()) {
    finish_task(self);
    return;
  }
  ++st.seq;
  st.current = step_result{};
  st.current.step = st.task.steps[st.next++];
  st.current.worker = st.opts.id;
  st.current.generation = st.task.f.worker_generation;
  st.phase_start = clock_type::now();
  auto& pf = st.prefetch;
  if (pf.is_for(st.task, st.current.step)) {
    if (pf.arrived) {
      pf.active = false;
      auto r = std::move(pf.reply);
      on_batch(self, r);
    } else {
      pf.awaited = true;
      pf.seq = st.seq;
    }
    return;
  }
  pf.active = false;
  st.opts.seam
    ->request(self, st.task.source, st.opts.timeout, batch_atom::value,
              batch_request{st.task.f, st.current.step, st.task.epoch, st.task.epoch_begin})
    .then(
      [self, seq = st.seq](batch_reply& r) {
        if (self->state.seq == seq) on_batch(self, r);
      },
      [self, seq = st.seq](caf::error& e) {
        if (self->state.seq == seq) fail(self, batch_error(self->state, std::move(e)));
      });
}

worker_actor::behavior_type worker_impl(self_ptr self, worker_options opts) {
  if (opts.detached) detail::name_this_thread(fmt::format("at.worker{}", opts.id));
  model::enable_flush_to_zero();
  model::tune_gemm_blocking();
  auto& st = self->state;
  st.opts = std::move(opts);
  st.exec = std::make_unique<model::executor>(st.opts.structure);
  st.params = model::parameter_store{st.opts.structure.variables().size()};
  st.grads = model::gradient_store{st.opts.structure.variables()};
  st.read_version.assign(st.opts.structure.variables().size(), 0);
  st.sent.resize(st.opts.structure.variables().size());
  st.tables.resize(st.opts.structure.variables().size());
  st.by_rows.assign(st.opts.structure.variables().size(), false);
  for (size_t v = 0; v < st.by_rows.size(); ++v)
    st.by_rows[v] = st.opts.pull_rows && !st.opts.structure.row_feeds()[v].empty();
  st.compact = st.opts.structure.compact_rows();
  st.ids_kept.assign(st.opts.structure.num_inputs(), false);
  for (size_t v = 0; v < st.compact.size(); ++v)
    if (st.by_rows[v] && st.compact[v])
      for (auto slot : st.opts.structure.row_feeds()[v])
        if (slot >= 0 && static_cast<size_t>(slot) < st.ids_kept.size()) st.ids_kept[static_cast<size_t>(slot)] = true;
  st.row_ids.resize(st.opts.structure.variables().size());
  for (auto& m : st.opts.metrics) st.metrics.push_back(m->clone());
  self->set_exception_handler([self](caf::scheduled_actor*, std::exception_ptr& eptr) -> caf::error {
    auto what = exception_text(eptr);
    auto err = make_error(error_code::user_error,
                          fmt::format("worker {}, step {}: {}", self->state.opts.id, to_string(self->state.current.step), what));
    // CAF ends the actor after an exception; answer the task first so the coordinator
    // learns what failed (an application error, which fails the run fast).
    auto& st = self->state;
    for (auto& w : st.waiting) w.second.deliver(err);
    st.waiting.clear();
    for (auto& [id, rec] : st.records) rec.rp.deliver(err);
    st.records.clear();
    return err;
  });
  watch_remote_shards(self);
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    st.watched.erase(dm.source);
    st.lost.insert(dm.source);
    for (size_t p = 0; p < st.opts.ps.size(); ++p)
      if (st.opts.ps[p].address() == dm.source) {
        fail_all(self, make_error(error_code::shard_lost,
                                  fmt::format("worker {}: ps shard {} is gone ({})", st.opts.id, p, describe(dm.reason))));
        return;
      }
  });
  return {
    [self](pull_atom) -> caf::result<uint64_t> {
      auto& st = self->state;
      const auto& pl = *st.opts.placement;
      auto rp = self->make_response_promise<uint64_t>();
      auto store = std::make_shared<model::parameter_store>(st.opts.structure.variables().size());
      auto remaining = std::make_shared<int>(0);
      auto failed = std::make_shared<bool>(false);
      std::vector<pull_request> reqs(static_cast<size_t>(pl.num_ps()));
      for (auto& vp : pl.variables())
        for (auto& part : vp.partitions)
          reqs[static_cast<size_t>(part.ps)].partitions.push_back(partition_key{vp.variable, part.index});
      for (auto& r : reqs)
        if (!r.partitions.empty()) ++*remaining;
      if (*remaining == 0) {
        rp.deliver(model::parameters_digest(*store));
        return rp;
      }
      for (int p = 0; p < pl.num_ps(); ++p) {
        auto& r = reqs[static_cast<size_t>(p)];
        if (r.partitions.empty()) continue;
        r.f = fence{};  // an observer's read: passes any fence, raises none
        st.opts.seam->request(self, st.opts.ps[static_cast<size_t>(p)], via(st, p), st.opts.timeout, pull_atom::value, std::move(r))
          .then(
            [self, store, remaining, failed, rp](pull_reply& rep) mutable {
              if (*failed) return;
              for (auto& pv : rep.values) store_partition(*store, *self->state.opts.placement, pv, /*share=*/false);
              if (--*remaining == 0) rp.deliver(model::parameters_digest(*store));
            },
            [failed, rp](caf::error& e) mutable {
              if (*failed) return;
              *failed = true;
              rp.deliver(std::move(e));
            });
      }
      return rp;
    },
    [self](step_atom, step_task& task) -> caf::result<task_result> {
      auto& st = self->state;
      if (task.steps.empty()) return make_error(error_code::invalid_request, "step task without steps");
      if (!task.source) return make_error(error_code::invalid_request, "step task without a dataset shard");
      // A training task's batches come from this worker's replica of the pipeline when it
      // has one (every step of a task is of one pipeline).
      if (task.training && task.steps.front().pipeline < st.opts.sources.size())
        task.source = st.opts.sources[task.steps.front().pipeline];
      if (task.f.worker != st.opts.id)
        return make_error(error_code::invalid_request,
                          fmt::format("worker {} got a task addressed to worker {}", st.opts.id, task.f.worker));
      if (epochs_older(task.f, st.newest))
        return make_error(error_code::fenced_out,
                          fmt::format("worker {}: a task of epochs ({}, {}) after ({}, {})", st.opts.id,
                                      task.f.coordinator_epoch, task.f.recovery_epoch, st.newest.coordinator_epoch,
                                      st.newest.recovery_epoch));
      // A task of newer epochs comes from after the coordinator's recovery: the shards it
      // names are the restored ones (a shard that was only unreachable may be back under
      // its old handle).
      if (epochs_older(st.newest, task.f)) {
        st.lost.clear();
        // Queued tasks of older epochs were given up by the coordinator (a restore, or a
        // failed run, came between): computing them would only delay this one.
        for (auto w = st.waiting.begin(); w != st.waiting.end();)
          if (epochs_older(w->first.f, task.f)) {
            w->second.deliver(make_error(error_code::fenced_out,
                                         fmt::format("worker {}: a queued task of older epochs was dropped", st.opts.id)));
            w = st.waiting.erase(w);
          } else {
            ++w;
          }
      }
      st.newest.coordinator_epoch = task.f.coordinator_epoch;
      st.newest.recovery_epoch = task.f.recovery_epoch;
      // The shards as the coordinator knows them (a lost one is respawned elsewhere).
      if (task.ps.size() == st.opts.ps.size())
        st.opts.ps = task.ps;
      watch_remote_shards(self);
      // Sent before the coordinator learned of a lost shard: its requests would never
      // be answered (only time out).
      for (size_t p = 0; p < st.opts.ps.size(); ++p)
        if (st.lost.count(st.opts.ps[p].address()))
          return make_error(error_code::shard_lost, fmt::format("worker {}: ps shard {} is gone", st.opts.id, p));
      auto rp = self->make_response_promise<task_result>();
      if (st.busy) {
        st.waiting.emplace_back(std::move(task), rp);
        // The current task is on its last step: this one is next, fetch its batch now.
        if (st.waiting.size() == 1 && st.next >= st.task.steps.size() && !st.prefetch.active) prefetch_next(self);
      } else
        start(self, std::move(task), rp);
      return rp;
    },
  };
}

}  // namespace actortrain::worker_detail

namespace actortrain {

worker_actor spawn_worker(caf::actor_system& sys, worker_options opts) {
  if (opts.structure.empty()) throw std::invalid_argument("spawn_worker: empty model");
  if (!opts.loss) throw std::invalid_argument("spawn_worker: no loss");
  if (!opts.placement) throw std::invalid_argument("spawn_worker: no placement");
  if (static_cast<int>(opts.ps.size()) != opts.placement->num_ps())
    throw std::invalid_argument(fmt::format("spawn_worker: {} ps shards for a placement over {}", opts.ps.size(),
                                            opts.placement->num_ps()));
  if (!opts.seam) throw std::invalid_argument("spawn_worker: no send seam");
  bool detached = opts.detached;
  if (detached) return sys.spawn<caf::detached>(worker_detail::worker_impl, std::move(opts));
  return sys.spawn(worker_detail::worker_impl, std::move(opts));
}

}  // namespace actortrain
