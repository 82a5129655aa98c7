// The coordinator's epochs: their start and end, evaluation, the epoch gate (state.hpp).
#include "state.hpp"

#include "../core/planted.hpp"
#include "../core/thread_name.hpp"

namespace actortrain::coord {

void start_eval(self_ptr self, const std::vector<dataset_shard_actor>& shards) {
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
  st.closing_epoch = false;
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
    if (!st.spec.eval_pipelines.empty() && st.applied_epoch > 0 && validates_after(st.spec, st.epoch)) {
      start_eval(self, st.spec.eval_pipelines);
      return;
    }
  } else if (st.ph == phase::evaluating) {
    for (auto& [k, v] : st.eval_acc.values()) st.epoch_values["val_" + k] = v;
  }
  if (st.applied_epoch == 0 && st.spec.steps_per_epoch == 0 && st.epoch == st.spec.initial_epoch) {
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
  // The hyperparameters first, the last epoch's too: a later fit (and the run's last
  // checkpoint) holds what the callbacks set, as the optimizer does in Keras.
  auto carry_on = [self, d, rp, live, warn, open]() mutable {
    if (!live()) return;
    auto proceed = [self, d, rp, live, warn, open]() mutable {
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
          st.increment_base = -1;  // the shards take another state: the next checkpoint is whole
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
      begin_epoch(self);
      dispatch(self);
      if (rp) rp->deliver(caf::ok_atom::value);
    };
    if (d.hyperparams.empty()) {
      proceed();
      return;
    }
    auto& st = self->state;
    hyperparams_request req{current_fence(st), d.hyperparams, ++st.control_id};
    ask_every_shard<caf::ok_atom>(
      self, "the epoch's hyperparameters", open,
      [self, proceed, live, req]() mutable {
        if (!live()) return;
        if (auto& o = self->state.optimizer)
          for (auto& [k, v] : req.values) o->set_hyperparam(k, v);
        proceed();
      },
      [self, live, rp, proceed, warn, d](caf::error& e) mutable {
        if (!live()) return;
        if (d.stop || self->state.gate_last) {
          // Every epoch trained: the run ends as it is, with the rates it trained with.
          warn("the hyperparameters set after the last epoch did not reach every shard: " + describe(e));
          proceed();
          return;
        }
        if (rp) rp->deliver(e);
        fail_run(self, make_error(error_code::invalid_request, "set_hyperparams at the epoch gate: " + describe(e)));
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

// The application's decision at the epoch gate.
caf::result<caf::ok_atom> on_gate_decision(self_ptr self, uint64_t run, int64_t epoch, gate_decision& d) {
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
}

// The application did not decide at the gate in time: training goes on.
void on_gate_timeout(self_ptr self, uint64_t id) {
  auto& st = self->state;
  if (st.ph != phase::gated || id != st.gate_id) return;
  event w;
  w.kind = event_kind::warning;
  w.text = fmt::format("the application did not answer the gate of epoch {} within {} ms: training goes on",
                       st.gate_epoch + 1, std::chrono::duration_cast<std::chrono::milliseconds>(st.opts.timeout).count());
  emit(st, std::move(w));
  ++st.gate_id;  // a late decision is void
  release_gate(self, gate_decision{}, std::nullopt);
}

}  // namespace actortrain::coord
