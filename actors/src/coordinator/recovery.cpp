// The coordinator's recovery: worker fences, restores from checkpoints, a lost ps
// shard, resuming, the start of a run (state.hpp). What is decided — which recovery,
// which checkpoint, which epochs, what when none serves — is the CAF-free planner's
// (recovery_plan.hpp); this file asks the shards, times them out and says what happened.
#include "state.hpp"

#include "../core/planted.hpp"
#include "../core/thread_name.hpp"

namespace actortrain::coord {

namespace {

// The optimizer's hyperparameters as the shards now hold them, as "hyper.NAME" values of
// a restore's event: the application's copy (what callbacks read) follows them.
void add_hyperparams(const coord_state& st, event& e) {
  if (!st.optimizer) return;
  for (auto& [k, v] : st.optimizer->hyperparams()) e.values["hyper." + k] = v;
}


// What the planner looks at of the coordinator (recovery_plan.hpp).
recovery_view view_of(const coord_state& st) {
  recovery_view v;
  v.stage = st.ph == phase::idle           ? run_stage::between_runs
            : st.ph == phase::initializing ? run_stage::starting
                                           : run_stage::running;
  v.resuming = st.resuming;
  v.run_start_committed = st.run_start_committed;
  v.has_checkpoints = !st.restore_dir.empty();
  v.steps_total = st.steps_total;
  return v;
}

}  // namespace

// The error path of restore attempt `attempt`'s request to shard `i`: a shard that is
// gone starts the recovery over once it is replaced; anything else ends the run.
std::function<void(caf::error&)> restore_failed(self_ptr self, size_t i, uint64_t attempt, std::string what) {
  return [self, i, attempt, what](caf::error& e) {
    if (attempt == self->state.restore_attempt) ps_failed(self, i, e, what + ": ", /*even_recovering=*/true);
  };
}

namespace {

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
      req.min_generations = min_generations(st.workers);
      req.base = static_cast<uint64_t>(std::max<int64_t>(0, data.step));
      for (auto& part : pl.partitions_on(p)) {
        const auto& vp = pl.variable(part.variable);
        auto& pd = data.variables[static_cast<size_t>(part.variable)].partitions[static_cast<size_t>(part.index)];
        partition_state state;
        state.key = partition_key{part.variable, part.index};
        state.name = vp.name;
        state.row_begin = part.row_begin;
        state.row_end = part.row_end;
        state.sparse = vp.sparse;
        if (vp.dynamic) {  // its rows, dealt to their owners (none at start)
          state.dynamic = true;
          state.partitions = static_cast<int32_t>(vp.partitions.size());
          state.seed = model::variable_seed(st.opts.seed, static_cast<size_t>(part.variable));
        }
        state.value = tensor{std::move(pd.values)};
        for (auto& [name, m] : pd.slots) {
          state.slot_names.push_back(name);
          state.slots.push_back(tensor{std::move(m)});
        }
        state.iterations = pd.iterations;
        state.ids = std::move(pd.ids);  // a dynamic table's rows (model::repartition dealt them)
        state.last_update = std::move(pd.last_update);
        state.waiting = std::move(pd.waiting);
        // Every push reaches every partition of a dynamic table, so their ledgers are
        // one: partition 0's serves a partition the checkpoint did not have.
        state.ledger = saved_ledger(data.extra, vp.name, vp.dynamic ? 0 : part.row_begin);
        if (kept) {
          auto& kd = kept->variables[static_cast<size_t>(part.variable)].partitions[static_cast<size_t>(part.index)];
          auto& k = state.kept.emplace();
          k.value = tensor{std::move(kd.values)};
          // The kept slots follow the partition's slot names: all of them, or none (fresh).
          for (auto& name : state.slot_names)
            if (auto s = kd.slots.find(name); s != kd.slots.end()) k.slots.push_back(tensor{std::move(s->second)});
          if (k.slots.size() != state.slot_names.size()) k.slots.clear();
          k.iterations = kd.iterations;
          k.ids = std::move(kd.ids);
          k.last_update = std::move(kd.last_update);
          k.waiting = std::move(kd.waiting);
        }
        req.partitions.push_back(std::move(state));
      }
    }
  } catch (const std::exception& e) {
    fail_run(self, make_error(error_code::checkpoint_failed, fmt::format("restore: the checkpoint's ledgers: {}", e.what())));
    return;
  }
  auto remaining = std::make_shared<size_t>(st.opts.ps.size());
  auto live = [self, attempt] { return attempt == self->state.restore_attempt; };
  st.increment_base = -1;  // the shards take another state: the next checkpoint is whole
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

void continue_start(self_ptr self);

}  // namespace

void warn(coord_state& st, std::string text) {
  event w;
  w.kind = event_kind::warning;
  w.text = std::move(text);
  emit(st, std::move(w));
}

namespace {

// Restores every shard from the checkpoint under `dir` that `kind` picks (plan_restore:
// the newest that reads back whole; each skipped one is named in a warning), loading its
// run state unless `kind` is values, under new epochs above every shard's and the
// checkpoint's (epochs_after_restore: a new coordinator epoch when `takeover`, a resumed
// run; else a new recovery epoch). Calls then(step, path) when every shard has its state.
// When no checkpoint serves, does what the plan says: the run fails naming each one tried
// and its fault; between runs the shards wait for the next fit; a run about to start
// starts from the initial values.
void restore_all(self_ptr self, std::string dir, restore_kind kind, bool takeover,
                 std::function<void(int64_t, std::string)> then) {
  auto& st = self->state;
  auto attempt = ++st.restore_attempt;
  st.recovering = true;  // nothing is dispatched until every shard has its state
  auto plan = plan_restore(checkpoint_fs(st), dir, *st.opts.placement, kind, st.run, view_of(st).stage);
  for (auto& s : plan.skipped) warn(st, "restore: skipped " + s);
  if (!plan.source) {
    switch (plan.none) {
      case when_none::wait_for_fit:
        st.recovering = false;
        st.ps_ready = false;
        warn(st, "restore: " + plan.problem);
        return;
      case when_none::initial_values:
        warn(st, "restore: " + plan.problem + "; every ps shard starts from the initial values");
        init_shards(self, [self] {
          auto& st = self->state;
          st.recovering = false;
          st.ps_ready = true;
          continue_start(self);
        });
        return;
      case when_none::fail_run:
        fail_run(self, make_error(error_code::checkpoint_failed, "restore: " + plan.problem));
        st.ps_ready = false;
        return;
    }
  }
  auto data = std::make_shared<restore_source>(std::move(*plan.source));
  // What every shard has seen, so the new epochs are above all of them.
  auto seen = std::make_shared<fences_seen>(fences_seen::before_restore(data->state, takeover));
  auto remaining = std::make_shared<size_t>(st.opts.ps.size());
  bool load = loads_run_state(kind);
  auto go = [self, data, takeover, load, then, seen] {
    auto& st = self->state;
    auto epochs = epochs_after_restore(current_fence(st), *seen, takeover);
    st.opts.coordinator_epoch = epochs.coordinator_epoch;
    st.recovery_epoch = epochs.recovery_epoch;
    if (takeover) raise_generations_for_takeover(st.workers, *seen);
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
    if (load) hyper = hyperparams_of(data->state);
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
      [self, remaining, seen, go, attempt](ps_stats& s) {
        if (attempt != self->state.restore_attempt) return;
        seen->add(s.seen, s.min_generations);
        if (--*remaining == 0) go();
      },
      restore_failed(self, i, attempt, fmt::format("ps shard {} did not answer", i)), 1, stats_atom::value);
  }
}

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
                add_hyperparams(st, r);
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

}  // namespace

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
    v.dynamic = vp.dynamic;
    for (auto& part : vp.partitions) {
      model::partition_data d;
      d.row_begin = part.row_begin;
      d.row_end = part.row_end;
      d.values = full.middleRows(part.row_begin, part.rows());  // none of a dynamic table
      v.partitions.push_back(std::move(d));
    }
    data.variables.push_back(std::move(v));
  }
  ++st.restore_attempt;
  ++st.recovery_epoch;
  send_state(self, std::move(data), /*run=*/0, {}, std::move(then));
}

namespace {

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
  add_hyperparams(st, e);
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
  if (st.applied_run == 0 && st.ph == phase::training) {
    // The steps sent before the loss were forgotten with it and none was applied: the
    // run's batches start over from its first, and so do its scheduled steps.
    for (auto& p : st.pipes) p.next = p.epoch_begin;
    st.dispatched_epoch = 0;
    st.dispatched_run = 0;
    if (st.spec.on_demand) st.grants.restore({}, 0);
  }
  // The run's first checkpoint was being written: write it again.
  if (!st.opts.checkpoint_dir.empty()) {
    st.quiescing = true;
    st.quiesce_began = std::chrono::steady_clock::now();
    st.next_checkpoint = 0;
  }
  dispatch(self);
}

}  // namespace

// Every lost shard has a replacement: roll back and go on (recovery_for). During a run,
// to the run's own newest good checkpoint; before its first step, to the state it
// starts from; between runs, the shards get the newest good checkpoint's values (or
// wait for the next fit when there is none).
void recover(self_ptr self) {
  auto& st = self->state;
  switch (recovery_for(view_of(st))) {
    case recovery_kind::resume:
      resume(self);  // a shard was lost before the resumed run had its state: start it over
      return;
    case recovery_kind::wait_for_fit:
      st.recovering = false;
      st.ps_ready = false;  // the next fit initializes (or restores) every shard
      return;
    case recovery_kind::restore_values:
      restore_all(self, st.restore_dir, restore_kind::values, /*takeover=*/false, [self](int64_t step, std::string path) {
        auto& st = self->state;
        st.recovering = false;
        emit_ps_restored(st, step, std::move(path), /*in_run=*/false);
        // A fit asked for meanwhile waits for this restore to start.
        if (st.ph == phase::initializing) start_run(self);
      });
      return;
    case recovery_kind::start_state:
      restore_start_state(self, [self] { continue_start(self); });
      return;
    case recovery_kind::roll_back:
      restore_all(self, st.restore_dir, restore_kind::this_run, /*takeover=*/false, [self](int64_t step, std::string path) {
        auto& st = self->state;
        st.recovering = false;
        emit_ps_restored(st, step, std::move(path), /*in_run=*/true);
        next_checkpoint_after(st);
        dispatch(self);
      });
      return;
  }
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
  if (loss_ends_run(view_of(st))) {
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

namespace {

void begin_run(self_ptr self);

}  // namespace

// -- a run's start ----------------------------------------------------------------------

// The run's start-up, (re)entered after any recovery before its first step: the shards'
// state (a resumed run's checkpoint; the initial values or the newest good checkpoint
// when they have none), every shard fenced under new epochs (a failed run's late pushes
// are refused from here on), then begin_run.
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

namespace {

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
    // The previous run's final checkpoint, nothing changed since: the run marks it as its
    // start (can_mark_start) instead of writing the same state again.
    if (can_mark_start(st.clean_since_commit, st.last_committed, st.steps_total, st.restore_dir,
                       st.opts.checkpoint_dir)) {
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

}  // namespace

// A replacement for lost ps shard `index`.
caf::result<caf::ok_atom> on_replace(self_ptr self, uint32_t index, ps_shard_actor shard) {
  auto& st = self->state;
  if (index >= st.opts.ps.size())
    return make_error(error_code::invalid_request, fmt::format("no ps shard {} (there are {})", index, st.opts.ps.size()));
  if (!st.lost_ps.count(index))
    return make_error(error_code::invalid_request, fmt::format("ps shard {} is not lost", index));
  st.opts.ps[index] = shard;
  self->monitor(shard);
  st.lost_ps.erase(index);
  if (!st.lost_ps.empty()) return caf::ok_atom::value;  // another one is still missing
  ++st.recoveries;  // the replacement deadline is met
  recover(self);
  return caf::ok_atom::value;
}

// A lost ps shard was not replaced within worker_wait: the run fails.
void on_recover_deadline(self_ptr self, uint64_t id) {
  auto& st = self->state;
  if (id != st.recoveries || st.lost_ps.empty()) return;
  st.ps_ready = false;
  st.recovering = false;  // a later fit waits for the replacement again
  fail_run(self, make_error(error_code::worker_lost,
                            fmt::format("ps shard {} was lost and not replaced within {} s", *st.lost_ps.begin(),
                                        std::chrono::duration_cast<std::chrono::seconds>(st.opts.worker_wait).count())));
}

}  // namespace actortrain::coord
