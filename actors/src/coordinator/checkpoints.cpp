// The coordinator's checkpoints: when they fall due, writing every shard's state at
// one step with the run state and ledgers, shared checkpoints (state.hpp).
#include "state.hpp"

#include "../core/planted.hpp"
#include "../core/thread_name.hpp"

namespace actortrain::coord {

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
  if (st.spec.on_demand) {
    r.scheduled = true;
    r.loop = st.spec.on_demand;
    r.open_tickets.assign(st.grants.open().begin(), st.grants.open().end());
    r.granted = st.grants.granted();
  }
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
  // A run of scheduled steps: the tickets open then, and those granted since, run again.
  // The state must be this run's (a take-over before the run's start was committed
  // would find the previous run's).
  if (st.spec.on_demand) {
    if (!r.scheduled || r.loop != st.spec.on_demand)
      throw std::runtime_error("the checkpoint holds the state of another run than this run of scheduled steps");
    st.spec.epochs = INT32_MAX;  // the end's last epoch is decided again
    if (st.opts.plant && st.opts.plant->which == planted_defect::forget_grants_after_rollback &&
        st.grants.open().size() != r.open_tickets.size())
      st.opts.plant->fired();  // test-only: the steps dispatched since the checkpoint are not scheduled again
    else
      st.grants.restore(r.open_tickets, r.granted);
  }
  st.closing_epoch = false;
  forget_work(st);
  st.work.forget_failures();
  st.ph = phase::training;
}

model::file_system& checkpoint_fs(coord_state& st) {
  return st.opts.checkpoint_fs ? *st.opts.checkpoint_fs : model::posix_file_system();
}

// A request to ps shard `i` failed: a shard that is gone starts a recovery; any other
// failure ends the run with `what`.
// `even_recovering`: the request is part of the restore itself, so its failure counts.
void ps_failed(self_ptr self, size_t i, const caf::error& e, const std::string& what, bool even_recovering) {
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

namespace {

// What the shards may leave out of a checkpoint at steps_total into `target`: a dynamic
// table's rows unchanged since the run directory's newest committed checkpoint, unless
// checkpoint_full_every says this one is whole. Checkpoints elsewhere are whole.
snapshot_basis basis_for(coord_state& st, const ckpt_target& target) {
  snapshot_basis b;
  b.step = static_cast<int64_t>(st.steps_total);
  b.increments = st.opts.checkpoint_full_every > 1 && !st.opts.checkpoint_dir.empty();
  if (target.run_dir && b.increments && st.increment_base >= 0 && st.increment_base < b.step &&
      st.increments + 1 < st.opts.checkpoint_full_every) {
    // Gone since (removed by hand, pruned by a checkpoint asked into the same directory
    // under another name): this one is whole.
    auto base = model::join_path(model::join_path(target.dir, model::checkpoint_dir_name(st.increment_base)),
                                 "manifest.json");
    if (checkpoint_fs(st).exists(base))
      b.base = st.increment_base;
    else
      st.increment_base = -1;
  }
  return b;
}

// Commits a checkpoint with `write` (which returns its path), keeps the newest
// checkpoint_keep (and what they build on), says so (with the tensor bytes the shards
// sent here for it and whether it holds increments), then runs `then`. A failure to
// write ends the run.
void finish_checkpoint(self_ptr self, const ckpt_target& target, int64_t step, double received_bytes,
                       bool incremental, const std::function<std::string(model::file_system&)>& write,
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
      st.increment_base = step;
      st.increments = incremental ? st.increments + 1 : 0;
    }
    model::prune_checkpoints(fs, target.dir, std::max<size_t>(1, target.keep));
    event e;
    e.kind = event_kind::checkpoint_done;
    e.count = step;
    e.text = path;
    e.values["pause_seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - st.quiesce_began).count();
    e.values["bytes_to_coordinator"] = received_bytes;
    if (incremental) e.values["incremental"] = 1;
    if (target.kept)
      e.values["kept"] = 1;  // the state kept at an epoch gate
    else if (!target.run_dir)
      e.values["asked"] = 1;  // by a callback, into its own directory
    emit(st, std::move(e));
  } catch (const std::exception& ex) {
    st.checkpointing = false;
    if (target.run_dir) st.increment_base = -1;  // the next one is whole, whatever failed here
    fail_run(self, make_error(error_code::checkpoint_failed, fmt::format("checkpoint at step {}: {}", step, ex.what())));
    return;
  }
  st.checkpointing = false;
  then(path);
}

}  // namespace

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

namespace {

// A committed checkpoint of `step` under `root` that is not of the state about to be
// written there (a failed run's, or one from before a roll-back to an older checkpoint)
// gives way to it.
void replace_same_step(model::file_system& fs, const std::string& root, int64_t step) {
  auto dir = model::join_path(root, model::checkpoint_dir_name(step));
  if (fs.exists(model::join_path(dir, "manifest.json"))) model::remove_checkpoint(fs, root, dir);
}

// A partition's state in a shard's answer for a checkpoint: a snapshot answers with the
// states themselves, a shared checkpoint with written partitions that head their files
// with one.
const partition_state& header_of(const partition_state& p) { return p; }
const partition_state& header_of(const written_partition& p) { return p.header; }

// The shards' answers for a checkpoint (ps_snapshot or ps_files), their partitions per
// variable in row order: how the manifest lists them.
template <class Reply>
auto partitions_by_variable(std::vector<Reply>& replies) {
  using part = typename decltype(Reply::partitions)::value_type;
  std::map<int32_t, std::vector<part*>> out;
  for (auto& r : replies)
    for (auto& p : r.partitions) out[header_of(p).key.variable].push_back(&p);
  for (auto& [v, parts] : out)
    std::sort(parts.begin(), parts.end(),
              [](const part* a, const part* b) { return header_of(*a).row_begin < header_of(*b).row_begin; });
  return out;
}

// The partitions' ledgers as a checkpoint's manifest keeps them (its "extra"), by
// variable name and row range, so that a restore into another placement finds them.
template <class Part>
nlohmann::json ledgers_for_manifest(const coord_state& st, std::map<int32_t, std::vector<Part*>>& by_var) {
  auto out = nlohmann::json::array();
  for (auto& vp : st.opts.placement->variables())
    for (auto* p : by_var[vp.variable]) {
      const auto& h = header_of(*p);
      out.push_back({{"variable", vp.name}, {"row_begin", h.row_begin}, {"row_end", h.row_end}, {"ledger", to_json(h.ledger)}});
    }
  return out;
}

}  // namespace

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

namespace {

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
  const auto basis = basis_for(st, target);
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
          bool incremental = false;
          for (auto& vp : st.opts.placement->variables()) {
            model::variable_record v{vp.name, vp.shape, {}, vp.dynamic};
            for (auto* p : by_var[vp.variable]) {
              const auto& h = p->header;
              model::partition_record pr;
              pr.row_begin = h.row_begin;
              pr.row_end = h.row_end;
              pr.iterations = h.iterations;
              pr.base = h.base;
              incremental = incremental || h.base >= 0;
              pr.values = record(p->values);
              for (size_t k = 0; k < p->slots.size() && k < h.slot_names.size(); ++k)
                pr.slots[h.slot_names[k]] = record(p->slots[k]);
              for (auto& [what, e] : p->tables) pr.tables[what] = record(e);
              v.partitions.push_back(std::move(pr));
            }
            r.variables.push_back(std::move(v));
          }
          r.extra = save_run(st);
          r.extra["ledgers"] = ledgers_for_manifest(st, by_var);
          if (st.optimizer) {
            r.optimizer = st.optimizer->describe();
            r.hyperparams = st.optimizer->hyperparams();
          }
          finish_checkpoint(
            self, target, step, 0.0, incremental,
            [&](model::file_system& fs) { return model::commit_checkpoint(fs, target.dir, r); }, then);
        },
        checkpoint_refused(self, i, attempt), 1, snapshot_atom::value, fence_request{current_fence(st), attempt},
        checkpoint_target{dir}, basis);
}

}  // namespace

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
  const auto basis = basis_for(st, target);
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
          bool incremental = false;
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
            v.dynamic = vp.dynamic;
            for (auto* p : by_var[vp.variable]) {
              model::partition_data d;
              d.row_begin = p->row_begin;
              d.row_end = p->row_end;
              d.values = *p->value.value;
              d.iterations = p->iterations;
              for (size_t k = 0; k < p->slots.size(); ++k) d.slots[p->slot_names[k]] = *p->slots[k].value;
              d.ids = std::move(p->ids);  // a dynamic table's rows
              d.last_update = std::move(p->last_update);
              d.waiting = std::move(p->waiting);
              d.base = p->base;  // an increment: the rows above changed since, these ids dropped
              d.removed = std::move(p->removed);
              incremental = incremental || d.base >= 0;
              v.partitions.push_back(std::move(d));
            }
            data.variables.push_back(std::move(v));
          }
          data.extra = save_run(st);
          data.extra["ledgers"] = ledgers_for_manifest(st, by_var);
          if (st.optimizer) {
            data.optimizer = st.optimizer->describe();
            data.hyperparams = st.optimizer->hyperparams();
          }
          finish_checkpoint(
            self, target, data.step, received, incremental,
            [&](model::file_system& fs) {
              replace_same_step(fs, target.dir, data.step);
              return model::write_checkpoint(fs, target.dir, data);
            },
            then);
        },
        checkpoint_refused(self, i, attempt), 1, snapshot_atom::value, fence_request{current_fence(st), attempt},
        basis);
}

// A checkpoint the application asked for, into a directory of its own.
caf::result<std::string> on_checkpoint_request(self_ptr self, const checkpoint_target& t, int32_t keep) {
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
}

// checkpoint_interval passed: the next applied step starts a checkpoint.
void on_checkpoint_tick(self_ptr self, uint64_t id) {
  auto& st = self->state;
  if (id != st.tick || st.ph == phase::idle) return;
  st.time_due = true;  // the next applied step starts the checkpoint
}

}  // namespace actortrain::coord
