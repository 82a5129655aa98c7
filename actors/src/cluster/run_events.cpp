// The application thread's side of an embedded cluster's run: the events it drains
// (progress, metrics file, lost shards and workers replaced), the callbacks, the epoch
// gate's decision, and the run's result.
#include "cluster_impl.hpp"

namespace actortrain {

// Asks the coordinator for a checkpoint into `target` (written once no step is in flight:
// a few request timeouts at most) and fulfils `promise` with its path or the error.
void detail::ask_for_checkpoint(caf::event_based_actor* self, const coordinator_actor& coord, caf::timespan timeout,
                        checkpoint_target target, int32_t keep, std::shared_ptr<std::promise<std::string>> promise) {
  self->request(coord, timeout * 4, ckpt_atom::value, std::move(target), keep)
    .then([promise](std::string& path) { promise->set_value(path); },
          [promise](caf::error& e) {
            promise->set_exception(std::make_exception_ptr(std::runtime_error("checkpoint: " + describe(e))));
          });
}

namespace {

// Sends the application's decision at the epoch gate through the send seam (it is a
// control message faults may hit): a timeout is retried (the coordinator carries a
// decision out once per gate and answers a repeat at once), every quarter of the request
// timeout, so that all three attempts reach the coordinator within the time it waits at
// the gate.
void send_gate_decision(caf::event_based_actor* self, seam_ptr seam, coordinator_actor coord, caf::timespan timeout,
                        uint64_t run, int64_t epoch, gate_decision d,
                        std::vector<std::shared_ptr<std::promise<void>>> promises, int attempt) {
  seam->request(self, coord, timeout / 4, gate_atom::value, run, epoch, d)
    .then(
      [promises](caf::ok_atom) {
        for (auto& p : promises) p->set_value();
      },
      [self, seam, coord, timeout, run, epoch, d, promises, attempt](caf::error& err) {
        if (err == caf::sec::request_timeout && attempt < 3) {
          send_gate_decision(self, seam, coord, timeout, run, epoch, d, promises, attempt + 1);
          return;
        }
        for (auto& p : promises)
          p->set_exception(std::make_exception_ptr(std::runtime_error("set_hyperparams: " + describe(err))));
      });
}

}  // namespace

void cluster::impl::handle(const event& e) {
  if (e.coordinator_epoch < epoch_floor) return;  // a deposed coordinator's
  if (observer) observer(e);
  if (writer) writer->write(e);
  if (e.kind == event_kind::dataset_lost) rebuild_shard(e.pipeline, e.count == 1);
  if (e.kind == event_kind::eval_batch_begun || e.kind == event_kind::eval_batch_done) {
    for (auto& cb : eval_hooks) {  // a hook's exception reaches evaluate()'s or predict()'s caller
      if (e.kind == event_kind::eval_batch_begun)
        predicting ? cb->on_predict_batch_begin(*view, e.count) : cb->on_test_batch_begin(*view, e.count);
      else
        predicting ? cb->on_predict_batch_end(*view, e.count) : cb->on_test_batch_end(*view, e.count, e.values);
    }
    return;
  }
  if (scheduled && active && e.ticket != 0) {  // the first result counts (a roll-back redoes the step)
    if (e.kind == event_kind::step_done) step_results.emplace(e.ticket, e.logs);
    if (e.kind == event_kind::step_no_data) step_results.emplace(e.ticket, std::nullopt);
  }
  if (e.kind == event_kind::ps_lost) {
    if (remote_ps_lost)
      remote_ps_lost(static_cast<uint32_t>(e.count));
    else
      respawn_ps(static_cast<uint32_t>(e.count));
  }
  if (e.kind == event_kind::ps_restored && active) ++ps_restores;
  if (e.kind == event_kind::ps_restored || e.kind == event_kind::resumed) {
    // The shards hold the checkpoint's hyperparameters now: so does the copy callbacks read.
    for (auto& [k, v] : e.values)
      if (k.rfind("hyper.", 0) == 0) {
        try {
          optimizer->set_hyperparam(k.substr(6), v);
        } catch (const std::exception&) {
          // a value this optimizer refuses was never set on the shards either
        }
      }
  }
  if (e.kind == event_kind::step_done && active) {
    run_staleness_sum += e.staleness;
    run_staleness_max = std::max(run_staleness_max, e.staleness);
    ++run_steps;
  }
  if (e.kind == event_kind::resumed && active) resumed_at = e.count;
  if (e.kind == event_kind::worker_lost && spec.restart_lost_workers && active && e.worker < workers.size()) {
    ++restarts;
    auto w = spawn_worker_with_id(e.worker);
    replaced.push_back(workers[e.worker]);
    workers[e.worker] = w;
    joins.push_back(join_cluster(w, e.worker));
  }
  if (e.kind == event_kind::epoch_begin && active && !start_promises.empty()) {
    for (auto& p : start_promises) p->set_value();
    start_promises.clear();
  }
  if (!run_callbacks_list.empty()) {
    if (e.kind == event_kind::epoch_done && epoch_gate && active)
      pass_gate(e);
    else if (!(e.kind == event_kind::epoch_begin && e.epoch == begun_at_gate) &&
             !(e.kind == event_kind::run_begin && train_begun))
      run_callbacks(e);
  }
  if (!progress) return;
  switch (e.kind) {
    case event_kind::epoch_begin:
      epoch_samples = 0;
      epoch_staleness_sum = epoch_staleness_max = epoch_steps = 0;
      progress->begin_epoch(static_cast<int>(e.epoch), opts.epochs, e.count);
      break;
    case event_kind::step_done: {
      epoch_samples += e.examples;
      epoch_staleness_sum += e.staleness;
      epoch_staleness_max = std::max(epoch_staleness_max, e.staleness);
      ++epoch_steps;
      progress->staleness(static_cast<double>(epoch_staleness_sum) / static_cast<double>(epoch_steps),
                          epoch_staleness_max);
      progress->update(e.count, epoch_samples, e.values);
      break;
    }
    case event_kind::epoch_done:
      progress->end_epoch(e.count, epoch_samples, e.values);
      break;
    case event_kind::worker_lost:
      progress->note(fmt::format("worker {} (generation {}) lost: {}", e.worker, e.generation, e.text));
      break;
    case event_kind::steps_requeued:
      progress->note(fmt::format("{} step(s) of worker {} re-queued", e.count, e.worker));
      break;
    case event_kind::checkpoint_done:
      if (opts.verbose >= 2) progress->note(fmt::format("checkpoint at step {}: {}", e.count, e.text));
      break;
    case event_kind::dataset_lost:
      progress->note(fmt::format("dataset shard {} lost ({}); rebuilding it", e.pipeline, e.text));
      break;
    case event_kind::ps_lost:
      progress->note(fmt::format("ps shard {} lost ({}); {}", e.count, e.text,
                                 remote_ps_lost ? "waiting for its task to come back" : "respawning it"));
      break;
    case event_kind::ps_restored:
      progress->note(fmt::format("every ps shard rolled back to the checkpoint of step {} ({} steps to redo)", e.count,
                                 e.values.count("steps_lost") ? e.values.at("steps_lost") : 0.0));
      break;
    case event_kind::resumed:
      progress->note(fmt::format("resuming the run of {} at step {}", e.text, e.count));
      break;
    case event_kind::worker_joined:
      progress->note(fmt::format("worker {} joined (generation {})", e.worker, e.generation));
      break;
    case event_kind::warning:
      progress->note("warning: " + e.text);
      break;
    default:
      break;
  }
}

void cluster::impl::drain(std::chrono::milliseconds wait) {
  auto first = events->pop(wait);
  if (!first) return;
  handle(*first);
  while (auto e = events->pop()) handle(*e);
}

// An epoch that validated: the coordinator ran the validation before the epoch ended;
// on_test_begin/end run now, with its values (without the val_ prefix), before on_epoch_end.
void cluster::impl::validation_hooks(callback& cb, const model::logs& epoch_values) {
  model::logs val;
  for (auto& [k, v] : epoch_values)
    if (k.rfind("val_", 0) == 0) val[k.substr(4)] = v;
  if (val.empty()) return;
  cb.on_test_begin(*view);
  cb.on_test_end(*view, val);
}

// The callbacks' view of an event, on this (the application's) thread.
void cluster::impl::run_callbacks(const event& e) {
  auto& c = *view;
  auto failure_of = [&](const char* kind, int64_t index, int64_t count) {
    return failure_info{kind, index, count, e.text};
  };
  each_callback([&](callback& cbr) {
    auto* cb = &cbr;
    switch (e.kind) {
        case event_kind::run_begin: cb->on_train_begin(c); break;
        case event_kind::epoch_begin: cb->on_epoch_begin(c, static_cast<int64_t>(e.epoch)); break;
        case event_kind::epoch_done:
          validation_hooks(*cb, e.values);
          cb->on_epoch_end(c, static_cast<int64_t>(e.epoch), e.values);
          break;
        case event_kind::step_begun:
          cb->on_train_batch_begin(c, static_cast<int64_t>(e.epoch), static_cast<int64_t>(e.total) + 1);
          break;
        case event_kind::step_done:
          cb->on_train_batch_end(c, step_info{static_cast<int64_t>(e.epoch), static_cast<int64_t>(e.total), e.worker, e.loss,
                                       static_cast<int64_t>(e.examples), e.staleness, e.values});
          break;
        case event_kind::worker_lost: cb->on_failure(c, failure_of("worker_lost", e.worker, 0)); break;
        case event_kind::steps_requeued:
          cb->on_failure(c, failure_of("steps_requeued", e.worker, static_cast<int64_t>(e.count)));
          break;
        case event_kind::ps_lost: cb->on_failure(c, failure_of("ps_lost", static_cast<int64_t>(e.count), 0)); break;
        case event_kind::ps_restored:
          cb->on_failure(c, failure_of("ps_restored", -1, static_cast<int64_t>(e.count)));
          break;
        case event_kind::dataset_lost: cb->on_failure(c, failure_of("dataset_lost", e.pipeline, 0)); break;
        case event_kind::dataset_rebuilt: cb->on_failure(c, failure_of("dataset_rebuilt", e.pipeline, 0)); break;
        case event_kind::checkpoint_done: cb->on_checkpoint(c, static_cast<int64_t>(e.count), e.text); break;
        default: break;
    }
  });
}

// An epoch ended and the coordinator waits: run on_epoch_end and, unless the run ends
// here, the next epoch's on_epoch_begin, then tell it what they decided. A callback
// that throws stops the run (join reports it).
void cluster::impl::pass_gate(const event& e) {
  auto& c = *view;
  at_gate = gate_state{};
  at_gate.open = true;
  at_gate.run = e.run;
  at_gate.epoch = e.epoch;
  bool ok = each_callback([&](callback& cb) {
    validation_hooks(cb, e.values);
    cb.on_epoch_end(c, e.epoch, e.values);
  });
  bool last = e.epoch + 1 >= opts.epochs;
  if (ok && !stop_requested && !last) {
    ok = each_callback([&](callback& cb) { cb.on_epoch_begin(c, e.epoch + 1); });
    begun_at_gate = e.epoch + 1;
  }
  at_gate.open = false;
  auto g = std::move(at_gate);
  g.decision.gate = e.gate;
  g.decision.stop = stop_requested || !ok || !callback_error.empty();  // a failed hook ends the run here
  g.decision.restore_at_end = restore_requested;
  auto seam_ = seam;
  sys.spawn([g, seam_](caf::event_based_actor* self, coordinator_actor coord, caf::timespan timeout) {
    // One sender: the checkpoints reach the coordinator before the decision.
    for (size_t i = 0; i < g.checkpoints.size(); ++i)
      detail::ask_for_checkpoint(self, coord, timeout, g.checkpoints[i].first, g.checkpoints[i].second,
                         g.checkpoint_promises[i]);
    send_gate_decision(self, seam_, coord, timeout, g.run, g.epoch, g.decision, g.hyper_promises, 1);
  }, coordinator, timeout());
}

// Called once the result future is ready.
void cluster::impl::complete() {
  drain(std::chrono::milliseconds(0));
  auto r = result.get();
  const uint64_t run = active;
  // The run's last line in the metrics file, whatever ended it (tools read it to know a
  // run ended, and how).
  auto done_line = [&](bool failed, const std::string& text) {
    if (!writer) return;
    std::map<std::string, double> last;
    if (r)
      for (size_t i = 0; i < r->keys.size() && i < r->values.size(); ++i)
        if (!r->values[i].empty()) last[r->keys[i]] = r->values[i].back();
    writer->write_done(run, failed, text, last);
  };
  stop(run_shards);
  active = 0;
  for (auto& p : start_promises)
    p->set_exception(std::make_exception_ptr(std::runtime_error("set_hyperparams: the run ended before it began")));
  start_promises.clear();
  each_callback([&](callback& cb) { cb.on_train_end(*view, !r); });
  run_callbacks_list = callbacks;  // between runs: add_callback's (a fit's own are done)
  if (!r) {
    failure = describe(r.error());
    failure_retryable = !is_application_error(r.error());
    done_line(true, failure);
    return;
  }
  fit_result out;
  for (size_t i = 0; i < r->keys.size(); ++i)
    for (auto v : r->values[i]) out.history.add(r->keys[i], v);
  if (!callback_error.empty()) {
    failure = "a callback failed: " + callback_error;
    failure_retryable = false;
    callback_error.clear();
    done_line(true, failure);
    return;
  }
  done_line(false, {});
  out.run = r->run;
  out.steps = r->steps;
  out.ran_out = r->ran_out;
  out.stopped_epoch = r->stopped_epoch;
  out.restored_epoch = r->restored_epoch;
  out.dropped_events = events->dropped() - dropped_at_start;
  if (progress && r->stopped_epoch >= 0)
    progress->note(fmt::format("training stopped after epoch {}{}", r->stopped_epoch + 1,
                               r->restored_epoch >= 0 ? fmt::format("; variables restored to epoch {}", r->restored_epoch + 1)
                                                      : std::string{}));
  else if (progress && r->restored_epoch >= 0)
    progress->note(fmt::format("variables restored to epoch {}", r->restored_epoch + 1));
  if (progress && out.dropped_events > 0)
    progress->note(fmt::format("{} step event(s) dropped: the callbacks or the metrics writer fell behind",
                               out.dropped_events));
  out.restarts = restarts;
  out.ps_restores = ps_restores;
  out.resumed_at = resumed_at;
  out.mean_staleness = run_steps > 0 ? static_cast<double>(run_staleness_sum) / static_cast<double>(run_steps) : 0.0;
  out.max_staleness = run_staleness_max;
  for (auto& v : r->visits) out.visits.push_back(visited_step{v.run, v.pipeline, v.position, v.worker, v.generation});
  finished = std::move(out);
}

}  // namespace actortrain
