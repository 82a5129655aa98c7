#include <actortrain/actors/cluster/cluster.hpp>
#include <actortrain/actors/cluster/job.hpp>

#include "cluster_internals.hpp"
#include "../core/ask.hpp"
#include "../core/planted.hpp"
#include <actortrain/actors/core/configure.hpp>
#include <actortrain/actors/coordinator/coordinator.hpp>
#include <actortrain/actors/data/dataset_shard.hpp>
#include <actortrain/actors/core/errors.hpp>
#include <actortrain/actors/cluster/events.hpp>
#include <actortrain/actors/ps/ps_shard.hpp>
#include <actortrain/actors/core/send_seam.hpp>
#include <actortrain/actors/worker/worker.hpp>
#include <actortrain/model/checkpoint/checkpoint.hpp>
#include <actortrain/model/partitioner.hpp>
#include <actortrain/model/progress.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <iostream>
#include <stdexcept>

#include <fmt/format.h>

namespace actortrain {

namespace {

using run_outcome = caf::expected<run_summary>;

// Asks the coordinator for a run and hands its outcome to the application thread. The
// run is asked for once every training pipeline has built its dataset and made its
// first batch (each within `build_timeout`; zero: at once). Otherwise a dataset_fn that
// loads files (Fashion-MNIST: 0.3 s of gunzip) runs while the workers already train,
// taking a core from them; replicas on worker tasks are built before they register.
void ask_for_run(caf::event_based_actor* self, coordinator_actor coord, caf::timespan timeout, run_spec req,
                 std::shared_ptr<std::promise<run_outcome>> out, caf::timespan build_timeout) {
  auto pipelines = req.pipelines;
  auto start = [self, coord, timeout, out, r = std::move(req)]() mutable {
    self->request(coord, timeout, fit_atom::value, std::move(r))
      .then([out](run_summary& x) { out->set_value(std::move(x)); },
            [out](caf::error& e) { out->set_value(std::move(e)); });
  };
  if (build_timeout.count() == 0 || pipelines.empty()) {
    start();
    return;
  }
  // Errors are the run's to report (a dataset_fn that threw answers every request so).
  auto left = std::make_shared<size_t>(pipelines.size());
  auto once = std::make_shared<decltype(start)>(std::move(start));
  for (auto& p : pipelines)
    self->request(p, build_timeout, batch_atom::value, batch_request{fence{}, step_id{}, 0, 0})
      .then([left, once](batch_reply&) { if (--*left == 0) (*once)(); },
            [left, once](caf::error&) { if (--*left == 0) (*once)(); });
}

}  // namespace

namespace {

std::future<uint64_t> ask_to_join(caf::actor_system& sys, coordinator_actor coord, caf::timespan timeout,
                                  worker_actor w, uint32_t id) {
  auto promise = std::make_shared<std::promise<uint64_t>>();
  auto fut = promise->get_future();
  request_from_outside<uint64_t>(
    sys, coord, timeout, [promise](uint64_t& generation) { promise->set_value(generation); },
    [promise, w, id](caf::error& e) {
      caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
      promise->set_exception(
        std::make_exception_ptr(std::runtime_error(fmt::format("worker {} cannot join: {}", id, describe(e)))));
    },
    join_atom::value, caf::actor_cast<caf::actor>(w), id);
  return fut;
}

}  // namespace

namespace {

// Asks the coordinator for a checkpoint into `target` (written once no step is in flight:
// a few request timeouts at most) and fulfils `promise` with its path or the error.
void ask_for_checkpoint(caf::event_based_actor* self, const coordinator_actor& coord, caf::timespan timeout,
                        checkpoint_target target, int32_t keep, std::shared_ptr<std::promise<std::string>> promise) {
  self->request(coord, timeout * 4, ckpt_atom::value, std::move(target), keep)
    .then([promise](std::string& path) { promise->set_value(path); },
          [promise](caf::error& e) {
            promise->set_exception(std::make_exception_ptr(std::runtime_error("checkpoint: " + describe(e))));
          });
}

}  // namespace

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

struct cluster::impl {
  cluster* owner = nullptr;  // for the callbacks
  std::vector<callback_ptr> callbacks;
  std::string callback_error;  // the first callback's exception of the run: fails it at the end
  caf::actor_system& sys;
  cluster_spec spec;
  model::model structure;
  model::loss_ptr loss;
  model::optimizer_ptr optimizer;  // a copy of the shards': checks hyperparameter changes
  std::vector<std::shared_ptr<const model::metric>> metrics;
  std::shared_ptr<const model::placement> placement;
  std::shared_ptr<dispatch_gate> gate;  // the consistency mode
  std::shared_ptr<event_queue> events;
  std::function<void(const event&)> observer;        // cluster_internals::observe
  std::shared_ptr<detail::defect_switch> plant;      // test-only (cluster::parts)
  seam_ptr seam;
  std::vector<ps_shard_actor> ps;
  bool owns_ps = true;  // false: the shards are another process's (parts::ps), which stops them
  std::function<void(uint32_t)> remote_ps_lost;  // set: the shards live in other processes
  std::vector<worker_actor> workers;             // the ones spawned here
  std::vector<worker_actor> replaced;  // predecessors of restarted workers (stopped with the rest)
  coordinator_actor coordinator;
  coordinator_options coordinator_opts;     // what it was spawned with (a successor takes them)
  std::vector<coordinator_actor> deposed;   // predecessors (stopped with the rest)
  run_spec last_spec;                       // the run in progress, as sent
  uint64_t epoch_floor = 0;                 // events of lower coordinator epochs are a deposed one's
  std::unique_ptr<std::ofstream> metrics_out;
  std::unique_ptr<metrics_writer> writer;

  // The run in progress (one at a time).
  uint64_t next_run = 1;
  uint64_t active = 0;
  std::future<caf::expected<run_summary>> result;
  std::vector<caf::actor> run_shards;
  dataset::dataset_fn run_fn;   // the run's, for rebuilding a lost dataset shard
  dataset::dataset_fn eval_fn;  // its validation pipelines' (null: none)
  model::fit_options opts;
  std::unique_ptr<model::progress_printer> progress;
  int64_t epoch_samples = 0;
  // Version staleness of the steps applied, this epoch (progress) and this run (fit_result).
  uint64_t epoch_staleness_sum = 0, epoch_staleness_max = 0, epoch_steps = 0;
  uint64_t run_staleness_sum = 0, run_staleness_max = 0, run_steps = 0;
  std::optional<fit_result> finished;
  int restarts = 0;                       // lost workers replaced in this run
  int ps_restores = 0;
  int64_t resumed_at = -1;
  bool ran_once = false;
  std::vector<std::future<uint64_t>> joins;  // their admissions
  std::string failure;

  // The epoch gate (run_spec::epoch_gate): on while a run has callbacks that wait for
  // epoch ends. `at_gate` is open while their on_epoch_end (and the next on_epoch_begin)
  // run; what they ask for there goes with the decision.
  bool epoch_gate = false;
  struct gate_state {
    bool open = false;
    uint64_t run = 0;
    int64_t epoch = 0;
    gate_decision decision;
    std::vector<std::shared_ptr<std::promise<void>>> hyper_promises;
    std::vector<std::pair<checkpoint_target, int32_t>> checkpoints;
    std::vector<std::shared_ptr<std::promise<std::string>>> checkpoint_promises;
  } at_gate;
  bool stop_requested = false, restore_requested = false;
  int64_t begun_at_gate = -1;  // the epoch whose on_epoch_begin ran at its gate (or at the run's start)
  bool train_begun = false;    // on_train_begin ran when the run was scheduled
  // set_hyperparams from the callbacks at the run's start: fulfilled once the run's first
  // epoch begins (they are set on every shard before it).
  std::vector<std::shared_ptr<std::promise<void>>> start_promises;
  uint64_t dropped_at_start = 0;

  impl(caf::actor_system& s, cluster_spec sp)
    : sys(s), spec(std::move(sp)), events(std::make_shared<event_queue>(std::max<size_t>(8, spec.event_queue_capacity))) {}

  caf::timespan timeout() const { return std::chrono::duration_cast<caf::timespan>(spec.request_timeout); }
  caf::timespan call_timeout() const { return std::chrono::duration_cast<caf::timespan>(spec.call_timeout); }

  int num_pipelines() const { return cluster_internals::num_pipelines(spec); }

  caf::actor spawn_shard(const dataset::dataset_fn& fn, int i) {
    auto o = cluster_internals::pipeline_options(spec, i);
    o.plant = plant;
    auto a = caf::actor_cast<caf::actor>(spawn_dataset_shard(sys, fn, std::move(o)));
    named(a, actor_role::dataset, static_cast<uint32_t>(i));
    return a;
  }

  std::vector<caf::actor> spawn_shards(const dataset::dataset_fn& fn) {
    std::vector<caf::actor> out;
    int n = num_pipelines();
    for (int i = 0; i < n; ++i) out.push_back(spawn_shard(fn, i));
    return out;
  }

  // The run's dataset shard of `pipeline` died: build it again from the same dataset_fn
  // and input_context (batches are functions of the position) and hand it over.
  void rebuild_shard(uint32_t pipeline, bool eval) {
    auto& fn = eval ? eval_fn : run_fn;
    if (!active || !fn || static_cast<int>(pipeline) >= num_pipelines()) return;
    auto a = spawn_shard(fn, static_cast<int>(pipeline));
    run_shards.push_back(a);
    auto& in_spec = eval ? last_spec.eval_pipelines : last_spec.pipelines;
    if (pipeline < in_spec.size()) in_spec[pipeline] = a;  // for a take-over
    request_from_outside<caf::ok_atom>(
      sys, coordinator, timeout(), [](caf::ok_atom&) {},
      [a](caf::error&) { caf::anon_send_exit(a, caf::exit_reason::user_shutdown); }, source_atom::value, pipeline, a,
      eval);
  }

  ps_shard_actor spawn_ps(uint32_t index) {
    ps_shard_options o;
    o.index = index;
    o.detached = !spec.simulated;
    o.apply_log = spec.apply_log;
    o.checkpoint_fs = spec.checkpoint_fs;
    if (gate->round_size() > 0) o.policy = hold_for_round();  // one per shard: it holds the round's pushes
    auto p = spawn_ps_shard(sys, *optimizer, o);  // with the current hyperparameters
    named(p, actor_role::ps, index);
    return p;
  }

  // ps shard `index` died: spawn a new one and hand it to the coordinator, which then
  // restores every shard from the last checkpoint.
  void respawn_ps(uint32_t index) {
    if (index >= ps.size()) return;
    auto p = spawn_ps(index);
    ps[index] = p;
    request_from_outside<caf::ok_atom>(
      sys, coordinator, timeout(), [](caf::ok_atom&) {},
      [p](caf::error&) { caf::anon_send_exit(p, caf::exit_reason::user_shutdown); }, replace_atom::value, index,
      caf::actor_cast<caf::actor>(p));
  }

  // Tells the fault policy (if any) what a spawned actor is.
  template <class Handle>
  void named(const Handle& h, actor_role role, uint32_t index) {
    if (spec.faults) spec.faults->on_spawn(caf::actor_cast<caf::actor_addr>(h), role, index);
  }

  std::future<uint64_t> join_cluster(worker_actor w, uint32_t id) { return ask_to_join(sys, coordinator, timeout(), w, id); }

  worker_actor spawn_worker_with_id(uint32_t id) {
    auto o = cluster_internals::worker_options_for(spec, id, structure, loss, metrics, placement);
    o.plant = plant;
    o.ps = ps;
    o.seam = seam;
    auto w = spawn_worker(sys, std::move(o));
    named(w, actor_role::worker, id);
    return w;
  }

  void stop(std::vector<caf::actor>& actors) {
    for (auto& a : actors) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    actors.clear();
  }

  void handle(const event& e) {
    if (e.coordinator_epoch < epoch_floor) return;  // a deposed coordinator's
    if (observer) observer(e);
    if (writer) writer->write(e);
    if (e.kind == event_kind::dataset_lost) rebuild_shard(e.pipeline, e.count == 1);
    if (e.kind == event_kind::ps_lost) {
      if (remote_ps_lost)
        remote_ps_lost(static_cast<uint32_t>(e.count));
      else
        respawn_ps(static_cast<uint32_t>(e.count));
    }
    if (e.kind == event_kind::ps_restored && active) ++ps_restores;
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
    if (!callbacks.empty()) {
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

  // Waits for `fut` on the application thread, handling events meanwhile.
  template <class T>
  void wait(std::future<T>& fut) {
    while (fut.wait_for(std::chrono::seconds(0)) != std::future_status::ready) drain(std::chrono::milliseconds(50));
    drain(std::chrono::milliseconds(0));
  }

  void drain(std::chrono::milliseconds wait) {
    auto first = events->pop(wait);
    if (!first) return;
    handle(*first);
    while (auto e = events->pop()) handle(*e);
  }

  // Runs `hook` on every callback, keeping the first exception for the run's end.
  template <class F>
  bool each_callback(F hook) {
    bool ok = true;
    for (auto& cb : callbacks) {
      try {
        hook(*cb);
      } catch (const std::exception& ex) {
        if (callback_error.empty()) callback_error = ex.what();
        ok = false;
      }
    }
    return ok;
  }

  // The callbacks' view of an event, on this (the application's) thread.
  void run_callbacks(const event& e) {
    auto& c = *owner;
    auto failure_of = [&](const char* kind, int64_t index, int64_t count) {
      return failure_info{kind, index, count, e.text};
    };
    each_callback([&](callback& cbr) {
      auto* cb = &cbr;
      switch (e.kind) {
          case event_kind::run_begin: cb->on_train_begin(c); break;
          case event_kind::epoch_begin: cb->on_epoch_begin(c, static_cast<int64_t>(e.epoch)); break;
          case event_kind::epoch_done: cb->on_epoch_end(c, static_cast<int64_t>(e.epoch), e.values); break;
          case event_kind::step_done:
            cb->on_step_end(c, step_info{static_cast<int64_t>(e.epoch), static_cast<int64_t>(e.total), e.worker, e.loss,
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
  void pass_gate(const event& e) {
    auto& c = *owner;
    at_gate = gate_state{};
    at_gate.open = true;
    at_gate.run = e.run;
    at_gate.epoch = e.epoch;
    bool ok = each_callback([&](callback& cb) { cb.on_epoch_end(c, e.epoch, e.values); });
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
        ask_for_checkpoint(self, coord, timeout, g.checkpoints[i].first, g.checkpoints[i].second,
                           g.checkpoint_promises[i]);
      send_gate_decision(self, seam_, coord, timeout, g.run, g.epoch, g.decision, g.hyper_promises, 1);
    }, coordinator, timeout());
  }

  // Called once the result future is ready.
  void complete() {
    drain(std::chrono::milliseconds(0));
    auto r = result.get();
    stop(run_shards);
    active = 0;
    for (auto& p : start_promises)
      p->set_exception(std::make_exception_ptr(std::runtime_error("set_hyperparams: the run ended before it began")));
    start_promises.clear();
    each_callback([&](callback& cb) { cb.on_train_end(*owner, !r); });
    if (!r) {
      failure = describe(r.error());
      return;
    }
    fit_result out;
    for (size_t i = 0; i < r->keys.size(); ++i)
      for (auto v : r->values[i]) out.history.add(r->keys[i], v);
    if (!callback_error.empty()) {
      failure = "a callback failed: " + callback_error;
      callback_error.clear();
      return;
    }
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
};

cluster::cluster(caf::actor_system& sys, cluster_spec spec, model::model structure, const model::optimizer& opt,
                 model::loss_ptr loss, std::vector<model::metric_ptr> metrics)
  : cluster(sys, std::move(spec), std::move(structure), opt, std::move(loss), std::move(metrics), nullptr) {}

cluster::cluster(caf::actor_system& sys, cluster_spec spec, model::model structure, const model::optimizer& opt,
                 model::loss_ptr loss, std::vector<model::metric_ptr> metrics, const parts* parts)
  : impl_(std::make_unique<impl>(sys, std::move(spec))) {
  auto& d = *impl_;
  d.owner = this;
  if (!is_configured(sys))
    throw std::logic_error("actortrain::configure(cfg) was not called on this actor_system's config");
  if (d.spec.num_workers < 1)
    throw std::invalid_argument(fmt::format("cluster: num_workers = {}; at least one worker is needed", d.spec.num_workers));
  if (d.spec.num_ps < 1)
    throw std::invalid_argument(fmt::format("cluster: num_ps = {}; at least one ps shard is needed", d.spec.num_ps));
  if (d.spec.num_dataset_shards < 0)
    throw std::invalid_argument(fmt::format("cluster: num_dataset_shards = {} < 0", d.spec.num_dataset_shards));
  if (d.spec.steps_per_execution < 1)
    throw std::invalid_argument(fmt::format("cluster: steps_per_execution = {} < 1", d.spec.steps_per_execution));
  if (!(d.spec.speculate_after == 0 || d.spec.speculate_after >= 1))
    throw std::invalid_argument(fmt::format("cluster: speculate_after = {} (0 for off, or >= 1)", d.spec.speculate_after));
  if (d.spec.checkpoint_every < 0 || d.spec.checkpoint_keep < 1)
    throw std::invalid_argument(fmt::format("cluster: checkpoint_every = {} (>= 0) and checkpoint_keep = {} (>= 1)",
                                            d.spec.checkpoint_every, d.spec.checkpoint_keep));
  if (d.spec.checkpoint_interval.count() < 0)
    throw std::invalid_argument(fmt::format("cluster: checkpoint_interval = {} ms < 0", d.spec.checkpoint_interval.count()));
  if (d.spec.poison_limit < 1)
    throw std::invalid_argument(fmt::format("cluster: poison_limit = {} < 1", d.spec.poison_limit));
  if (d.spec.tasks_in_flight < 0)
    throw std::invalid_argument(fmt::format("cluster: tasks_in_flight = {} < 0", d.spec.tasks_in_flight));
  if (d.spec.pull_every < 1)
    throw std::invalid_argument(fmt::format("cluster: pull_every = {} < 1", d.spec.pull_every));
  if (d.spec.pull_every > 1 && d.spec.consistency != "async")
    throw std::invalid_argument(fmt::format(
      "cluster: pull_every = {} with consistency '{}': reused parameters would break its staleness guarantee (async "
      "only)", d.spec.pull_every, d.spec.consistency));
  if (d.spec.pull_every > 1 && d.spec.pull_ahead)
    throw std::invalid_argument("cluster: pull_every > 1 with pull_ahead: choose one way of hiding pulls");
  if (!(d.spec.local_learning_rate >= 0) || !std::isfinite(d.spec.local_learning_rate))
    throw std::invalid_argument(fmt::format("cluster: local_learning_rate = {} (>= 0 and finite)",
                                            d.spec.local_learning_rate));
  if (d.spec.local_learning_rate > 0 && d.spec.pull_every == 1)
    throw std::invalid_argument(fmt::format(
      "cluster: local_learning_rate = {} with pull_every = 1: every step pulls afresh, so there is no copy to move "
      "(set pull_every > 1)", d.spec.local_learning_rate));
  if (d.spec.push_every < 1)
    throw std::invalid_argument(fmt::format("cluster: push_every = {} < 1", d.spec.push_every));
  if (d.spec.push_every > 1 && d.spec.consistency != "async")
    throw std::invalid_argument(fmt::format("cluster: push_every = {} with consistency '{}' (async only)",
                                            d.spec.push_every, d.spec.consistency));
  if (d.spec.push_every > 1 && d.spec.steps_per_execution % d.spec.push_every != 0)
    throw std::invalid_argument(fmt::format(
      "cluster: push_every = {} needs steps_per_execution a multiple of it (it is {}): a push never spans tasks",
      d.spec.push_every, d.spec.steps_per_execution));
  d.gate = make_gate(d.spec.consistency, d.spec.num_workers);
  if (d.gate->round_size() > 0) {
    if (d.spec.steps_per_execution > 1)
      throw std::invalid_argument(fmt::format(
        "cluster: steps_per_execution = {} with consistency 'sync' (a synchronous round is one step per replica)",
        d.spec.steps_per_execution));
  }
  if (structure.empty()) throw std::invalid_argument("cluster: empty model");
  if (!loss) throw std::invalid_argument("cluster: no loss");
  d.structure = std::move(structure);
  d.loss = std::move(loss);
  d.optimizer = opt.clone();
  for (auto& m : metrics) {
    if (!m) throw std::invalid_argument("cluster: null metric");
    d.metrics.push_back(std::shared_ptr<const model::metric>(std::move(m)));
  }
  d.placement = cluster_internals::placement_for(d.structure, d.spec);
  if (!d.spec.metrics_file.empty()) {
    d.metrics_out = std::make_unique<std::ofstream>(d.spec.metrics_file, std::ios::out | std::ios::app);
    if (!*d.metrics_out) throw std::invalid_argument("cluster: cannot open metrics file " + d.spec.metrics_file);
    d.writer = std::make_unique<metrics_writer>(*d.metrics_out);
  }
  d.seam = std::make_shared<send_seam>(sys, d.spec.faults);
  if (parts) d.plant = parts->plant;
  if (parts && !parts->ps.empty()) {
    if (static_cast<int>(parts->ps.size()) != d.spec.num_ps)
      throw std::invalid_argument(fmt::format("cluster: {} ps shards given for num_ps = {}", parts->ps.size(), d.spec.num_ps));
    for (auto& p : parts->ps) d.ps.push_back(caf::actor_cast<ps_shard_actor>(p));
    d.remote_ps_lost = parts->ps_lost;
    d.owns_ps = false;
  } else {
    for (int p = 0; p < d.spec.num_ps; ++p) d.ps.push_back(d.spawn_ps(static_cast<uint32_t>(p)));
  }
  int local_workers = parts && parts->local_workers >= 0 ? std::min(parts->local_workers, d.spec.num_workers)
                                                         : d.spec.num_workers;
  for (int w = 0; w < local_workers; ++w) d.workers.push_back(d.spawn_worker_with_id(static_cast<uint32_t>(w)));
  coordinator_options c;
  c.ps = d.ps;
  c.workers = d.workers;
  c.placement = d.placement;
  c.initial = std::make_shared<model::parameter_store>(d.structure.initial_parameters(d.spec.seed));
  c.metrics = d.metrics;
  c.gate = d.gate;
  c.events = d.events;
  c.seam = d.seam;
  c.timeout = d.timeout();
  c.steps_per_execution = d.spec.steps_per_execution;
  c.poison_limit = d.spec.poison_limit;
  c.worker_wait = d.timeout();
  c.speculate_after = d.spec.speculate_after;
  c.checkpoint_dir = d.spec.checkpoint_dir;
  c.checkpoint_every = d.spec.checkpoint_every;
  c.checkpoint_interval = std::chrono::duration_cast<caf::timespan>(d.spec.checkpoint_interval);
  c.checkpoint_keep = static_cast<size_t>(d.spec.checkpoint_keep);
  c.checkpoint_fs = d.spec.checkpoint_fs;
  c.checkpoint_shared = d.spec.checkpoint_shared;
  c.optimizer = std::shared_ptr<const model::optimizer>(d.optimizer->clone());  // when every worker is lost, wait this long for one to join
  // A worker that pulls ahead never waits, so it reads its push acknowledgements (and
  // answers a task) one step later: one more task keeps its queue from running dry.
  c.tasks_per_worker = d.spec.tasks_in_flight > 0 ? d.spec.tasks_in_flight : d.spec.pull_ahead ? 4 : 3;
  c.detached = !d.spec.simulated;
  c.pipeline_affinity = parts && parts->pipeline_affinity;
  c.plant = d.plant;
  d.coordinator_opts = c;
  d.coordinator = spawn_coordinator(sys, std::move(c));
  d.named(d.coordinator, actor_role::coordinator, 0);
}

cluster::~cluster() {
  auto& d = *impl_;
  d.stop(d.run_shards);
  caf::anon_send_exit(d.coordinator, caf::exit_reason::user_shutdown);
  for (auto& old : d.deposed) caf::anon_send_exit(old, caf::exit_reason::user_shutdown);
  for (auto& w : d.workers) caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
  for (auto& w : d.replaced) caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
  if (d.owns_ps)
    for (auto& p : d.ps) caf::anon_send_exit(p, caf::exit_reason::user_shutdown);
}

cluster::run_handle cluster::schedule(dataset::dataset_fn fn, const model::fit_options& opts) {
  auto& d = *impl_;
  if (d.active) throw std::logic_error("cluster::schedule: a run is in progress (join it first)");
  if (!fn) throw std::invalid_argument("cluster::schedule: no dataset_fn");
  if (opts.epochs < 0) throw std::invalid_argument(fmt::format("fit: epochs = {} < 0", opts.epochs));
  if (opts.steps_per_epoch < 0)
    throw std::invalid_argument(fmt::format("fit: steps_per_epoch = {} < 0", opts.steps_per_epoch));
  auto& fs = d.spec.checkpoint_fs ? *d.spec.checkpoint_fs : model::posix_file_system();
  std::optional<dataset::dataset> validation;  // split over shards by data: must be a dataset
  if (opts.validation && !(validation = dataset::as_dataset(*opts.validation)))
    throw std::invalid_argument("fit: fit_options::validation must be a dataset::dataset (the cluster splits it over shards)");
  if (!opts.resume_from.empty() && !model::latest_checkpoint(fs, opts.resume_from))
    throw std::invalid_argument(fmt::format("fit: resume_from {}: no committed checkpoint there", opts.resume_from));
  if (!d.ran_once && !d.spec.checkpoint_dir.empty() && opts.resume_from != d.spec.checkpoint_dir) {
    auto have = model::list_checkpoints(fs, d.spec.checkpoint_dir);
    if (!have.empty())
      throw std::invalid_argument(fmt::format(
        "fit: checkpoint_dir {} already holds checkpoints (up to step {}) of another run: resume it with "
        "fit_options::resume_from = \"{}\", or use an empty directory",
        d.spec.checkpoint_dir, have.back().step, d.spec.checkpoint_dir));
  }
  run_spec spec;
  spec.resume_from = opts.resume_from;
  spec.visitation_log = d.spec.visitation_log;
  spec.epochs = opts.epochs;
  spec.steps_per_epoch = opts.steps_per_epoch;
  spec.epoch_gate = false;
  for (auto& cb : d.callbacks) spec.epoch_gate = spec.epoch_gate || cb->waits_for_epoch_end();
  d.epoch_gate = spec.epoch_gate;
  d.stop_requested = d.restore_requested = false;
  d.begun_at_gate = -1;
  d.dropped_at_start = d.events->dropped();
  spec.pipelines = d.spawn_shards(fn);
  d.run_fn = fn;
  d.run_shards = spec.pipelines;
  d.eval_fn = nullptr;
  if (validation) {
    auto val = *validation;
    d.eval_fn = [val](const dataset::input_context& ctx) {
      return dataset::auto_shard(val, ctx, dataset::auto_shard_policy::data);
    };
    spec.eval_pipelines = d.spawn_shards(d.eval_fn);
    d.run_shards.insert(d.run_shards.end(), spec.eval_pipelines.begin(), spec.eval_pipelines.end());
  }
  d.opts = opts;
  std::ostream& out = opts.out ? *opts.out : std::cout;
  d.progress = std::make_unique<model::progress_printer>(out, opts.verbose, model::progress_printer::stdout_is_terminal(out));
  d.finished.reset();
  d.restarts = 0;
  d.ps_restores = 0;
  d.resumed_at = -1;
  d.run_staleness_sum = d.run_staleness_max = d.run_steps = 0;
  d.ran_once = true;
  d.joins.clear();
  d.failure.clear();
  auto promise = std::make_shared<std::promise<caf::expected<run_summary>>>();
  d.result = promise->get_future();
  d.active = d.next_run++;
  // The callbacks' start of training and of the first epoch run now, before the run is
  // asked for, so what they set (a schedule's first learning rate) is on every shard
  // before the first step; a resumed run's epoch is known only once it is restored.
  d.train_begun = false;
  if (!d.callbacks.empty() && opts.resume_from.empty()) {
    d.at_gate = impl::gate_state{};
    d.at_gate.open = true;
    d.each_callback([&](callback& cb) { cb.on_train_begin(*this); });
    d.each_callback([&](callback& cb) { cb.on_epoch_begin(*this, 0); });
    d.at_gate.open = false;
    spec.hyperparams = d.at_gate.decision.hyperparams;
    d.start_promises = std::move(d.at_gate.hyper_promises);
    for (size_t i = 0; i < d.at_gate.checkpoints.size(); ++i)
      d.sys.spawn([target = d.at_gate.checkpoints[i], promise = d.at_gate.checkpoint_promises[i]](
                    caf::event_based_actor* self, coordinator_actor coord, caf::timespan timeout) {
        ask_for_checkpoint(self, coord, timeout, target.first, target.second, promise);
      }, d.coordinator, d.timeout());
    d.at_gate = impl::gate_state{};
    d.train_begun = true;
    d.begun_at_gate = 0;
  }
  d.last_spec = spec;
  d.sys.spawn(ask_for_run, d.coordinator, d.call_timeout(), std::move(spec), promise,
              d.spec.simulated ? caf::timespan{0} : d.timeout());
  return run_handle{d.active};
}

bool cluster::done(const run_handle& h) {
  auto& d = *impl_;
  if (d.active != h.id) return true;
  d.drain(std::chrono::milliseconds(0));
  if (d.result.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return false;
  d.complete();
  return true;
}

fit_result cluster::join(const run_handle& h) {
  auto& d = *impl_;
  if (d.active == h.id) {
    while (d.result.wait_for(std::chrono::seconds(0)) != std::future_status::ready) d.drain(std::chrono::milliseconds(50));
    d.complete();
  }
  if (!d.failure.empty()) throw std::runtime_error(d.failure);
  if (!d.finished) throw std::logic_error("cluster::join: unknown run");
  return *d.finished;
}

model::history cluster::fit(dataset::dataset_fn fn, const model::fit_options& opts) {
  return join(schedule(std::move(fn), opts)).history;
}

model::history cluster::fit(const dataset::dataset& data, const model::fit_options& opts) {
  auto policy = impl_->spec.auto_shard;
  return fit([data, policy](const dataset::input_context& ctx) { return dataset::auto_shard(data, ctx, policy); }, opts);
}

namespace {

// Asks the coordinator for one evaluation over `spec.pipelines` (stopped afterwards) and
// hands `convert(summary)` to the application thread.
template <class T, class Convert>
std::future<T> ask_evaluation(caf::actor_system& sys, coordinator_actor coord, caf::timespan timeout, eval_spec spec,
                              Convert convert) {
  auto promise = std::make_shared<std::promise<T>>();
  auto fut = promise->get_future();
  sys.spawn([promise, spec, coord, timeout, convert](caf::event_based_actor* self) {
    auto shards = spec.pipelines;
    auto stop = [shards] {
      for (auto& a : shards) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    };
    self->request(coord, timeout, eval_atom::value, spec)
      .then(
        [promise, stop, convert](eval_summary& r) {
          stop();
          try {
            promise->set_value(convert(r));
          } catch (...) {
            promise->set_exception(std::current_exception());
          }
        },
        [promise, stop](caf::error& e) {
          stop();
          promise->set_exception(std::make_exception_ptr(std::runtime_error(describe(e))));
        });
  });
  return fut;
}

}  // namespace

std::future<std::map<std::string, double>> cluster::evaluate_async(const dataset::dataset& data) {
  auto& d = *impl_;
  if (d.active) throw std::logic_error("cluster::evaluate: a run is in progress");
  eval_spec spec;
  spec.pipelines = d.spawn_shards([data](const dataset::input_context& ctx) {
    return dataset::auto_shard(data, ctx, dataset::auto_shard_policy::data);
  });
  return ask_evaluation<std::map<std::string, double>>(d.sys, d.coordinator, d.call_timeout(), std::move(spec),
                                                       [](eval_summary& r) {
                                                         std::map<std::string, double> out;
                                                         for (size_t i = 0; i < r.keys.size(); ++i)
                                                           out[r.keys[i]] = r.values[i];
                                                         return out;
                                                       });
}

std::map<std::string, double> cluster::evaluate(const dataset::dataset& data) {
  auto fut = evaluate_async(data);
  impl_->wait(fut);
  return fut.get();
}

std::future<model::matrix> cluster::predict_async(const dataset::dataset& data) {
  auto& d = *impl_;
  if (d.active) throw std::logic_error("cluster::predict: a run is in progress");
  if (data.cardinality().kind == dataset::cardinality_kind::infinite)
    throw std::invalid_argument("predict: the dataset is infinite (repeat())");
  // One pipeline reads the data in order; the workers share its batches.
  dataset_shard_options o;
  o.context = dataset::input_context{1, 0, 1};
  o.prefetch = d.spec.prefetch;
  o.detached = !d.spec.simulated;
  eval_spec spec;
  spec.outputs = true;
  spec.pipelines.push_back(caf::actor_cast<caf::actor>(
    spawn_dataset_shard(d.sys, [data](const dataset::input_context&) { return data; }, o)));
  auto width = d.structure.output_width();
  return ask_evaluation<model::matrix>(d.sys, d.coordinator, d.call_timeout(), std::move(spec),
                                       [width](eval_summary& r) {
                                         std::vector<model::matrix> parts;
                                         parts.reserve(r.outputs.size());
                                         for (auto& t : r.outputs) parts.push_back(t.take());
                                         return model::stack_rows(parts, width);
                                       });
}

model::matrix cluster::predict(const dataset::dataset& data) {
  auto fut = predict_async(data);
  impl_->wait(fut);
  return fut.get();
}

std::future<void> cluster::set_hyperparams_async(const std::map<std::string, double>& values) {
  auto& d = *impl_;
  // Every shard holds a copy of this optimizer: what it refuses, they would.
  auto probe = d.optimizer->clone();
  for (auto& [k, v] : values) probe->set_hyperparam(k, v);
  if (d.at_gate.open) {
    // From a callback at the epoch gate: set before the next epoch's first step.
    auto& hp = d.at_gate.decision.hyperparams;
    for (auto& [k, v] : values) {
      auto i = std::find_if(hp.begin(), hp.end(), [&k = k](const auto& kv) { return kv.first == k; });
      if (i == hp.end())
        hp.emplace_back(k, v);
      else
        i->second = v;
    }
    auto promise = std::make_shared<std::promise<void>>();
    d.at_gate.hyper_promises.push_back(promise);
    d.optimizer = std::move(probe);
    return promise->get_future();
  }
  hyperparams_request req;
  for (auto& kv : values) req.values.push_back(kv);
  auto promise = std::make_shared<std::promise<void>>();
  auto fut = promise->get_future();
  request_from_outside<caf::ok_atom>(
    d.sys, d.coordinator, d.timeout(), [promise](caf::ok_atom&) { promise->set_value(); },
    [promise](caf::error& e) {
      promise->set_exception(std::make_exception_ptr(std::runtime_error("set_hyperparams: " + describe(e))));
    },
    hyper_atom::value, req);
  d.optimizer = std::move(probe);
  return fut;
}

void cluster::stop_training() {
  auto& d = *impl_;
  if (!d.active || !d.epoch_gate)
    throw std::logic_error("cluster::stop_training: only during a run with a callback that waits for epoch ends");
  d.stop_requested = true;
}

void cluster::keep_state() {
  auto& d = *impl_;
  if (!d.at_gate.open) throw std::logic_error("cluster::keep_state: only from on_epoch_end (at the epoch gate)");
  d.at_gate.decision.keep = true;
}

void cluster::restore_kept_state_at_end() {
  auto& d = *impl_;
  if (!d.active || !d.epoch_gate)
    throw std::logic_error("cluster::restore_kept_state_at_end: only during a run with a callback that waits for epoch ends");
  d.restore_requested = true;
}

std::future<std::string> cluster::checkpoint_async(const std::string& dir, int keep) {
  auto& d = *impl_;
  if (dir.empty()) throw std::invalid_argument("cluster::checkpoint_async: empty directory");
  if (keep < 1) throw std::invalid_argument(fmt::format("cluster::checkpoint_async: keep = {} < 1", keep));
  if (!d.active) throw std::logic_error("cluster::checkpoint_async: no run in progress");
  auto promise = std::make_shared<std::promise<std::string>>();
  auto fut = promise->get_future();
  if (d.at_gate.open) {  // sent just before the gate's decision, so it is this epoch's end
    d.at_gate.checkpoints.emplace_back(checkpoint_target{dir}, keep);
    d.at_gate.checkpoint_promises.push_back(promise);
    return fut;
  }
  d.sys.spawn([promise, dir, keep](caf::event_based_actor* self, coordinator_actor coord, caf::timespan timeout) {
    ask_for_checkpoint(self, coord, timeout, checkpoint_target{dir}, static_cast<int32_t>(keep), promise);
  }, d.coordinator, d.timeout());
  return fut;
}

void cluster::set_hyperparams(const std::map<std::string, double>& values) {
  auto fut = set_hyperparams_async(values);
  impl_->wait(fut);
  fut.get();
}


std::future<uint64_t> cluster::restart_worker_async(uint32_t id) {
  auto& d = *impl_;
  if (id >= d.workers.size())
    throw std::invalid_argument(fmt::format("restart_worker: no worker {} (the cluster has {})", id, d.workers.size()));
  auto w = d.spawn_worker_with_id(id);
  d.replaced.push_back(d.workers[id]);
  d.workers[id] = w;
  return d.join_cluster(w, id);
}

std::future<uint64_t> cluster::add_worker_async() {
  auto& d = *impl_;
  auto id = static_cast<uint32_t>(d.workers.size());
  auto w = d.spawn_worker_with_id(id);
  d.workers.push_back(w);
  return d.join_cluster(w, id);
}

uint64_t cluster::restart_worker(uint32_t id) {
  auto fut = restart_worker_async(id);
  impl_->wait(fut);
  return fut.get();
}

uint64_t cluster::add_worker() {
  auto fut = add_worker_async();
  impl_->wait(fut);
  return fut.get();
}

std::future<model::parameter_store> cluster::pull_variables() {
  auto& d = *impl_;
  auto promise = std::make_shared<std::promise<model::parameter_store>>();
  auto fut = promise->get_future();
  auto placement = d.placement;
  auto ps = d.ps;
  auto timeout = d.timeout();
  auto n = d.structure.variables().size();
  d.sys.spawn([promise, placement, ps, timeout, n](caf::event_based_actor* self) {
    auto store = std::make_shared<model::parameter_store>(n);
    auto remaining = std::make_shared<size_t>(ps.size());
    auto failed = std::make_shared<bool>(false);
    for (int p = 0; p < placement->num_ps(); ++p) {
      pull_request req;
      for (auto& part : placement->partitions_on(p)) req.partitions.push_back(partition_key{part.variable, part.index});
      fence f;
      f.coordinator_epoch = 0;  // read-only: never raises a shard's fence
      req.f = f;
      self->request(ps[static_cast<size_t>(p)], timeout, pull_atom::value, std::move(req))
        .then(
          [=](pull_reply& r) {
            // Copies: the application may write to what it gets back.
            for (auto& pv : r.values) store_partition(*store, *placement, pv, /*share=*/false);
            if (--*remaining == 0 && !*failed) promise->set_value(std::move(*store));
          },
          [=](caf::error& e) {
            if (*failed) return;
            *failed = true;
            promise->set_exception(std::make_exception_ptr(std::runtime_error("pulling variables: " + describe(e))));
          });
    }
  });
  return fut;
}

model::parameter_store cluster::variables() {
  auto fut = pull_variables();
  if (fut.wait_for(impl_->spec.request_timeout + std::chrono::seconds(1)) != std::future_status::ready)
    throw std::runtime_error("cluster::variables: the ps shards did not answer in time");
  return fut.get();
}

std::future<std::vector<partition_ledger>> cluster::ledgers_async() {
  auto& d = *impl_;
  auto promise = std::make_shared<std::promise<std::vector<partition_ledger>>>();
  auto fut = promise->get_future();
  auto ps = d.ps;
  auto timeout = d.timeout();
  request_each_from_outside<ps_ledgers>(
    d.sys, ps, timeout,
    [promise](std::vector<caf::expected<ps_ledgers>> got) {
      std::vector<partition_ledger> out;
      for (size_t i = 0; i < got.size(); ++i) {
        if (!got[i]) {
          promise->set_exception(std::make_exception_ptr(
            std::runtime_error(fmt::format("ledger of ps shard {}: {}", i, describe(got[i].error())))));
          return;
        }
        for (auto& p : got[i]->partitions) out.push_back(std::move(p));
      }
      promise->set_value(std::move(out));
    },
    ledger_atom::value);
  return fut;
}

std::vector<partition_ledger> cluster::ledgers() {
  auto fut = ledgers_async();
  if (fut.wait_for(impl_->spec.request_timeout + std::chrono::seconds(1)) != std::future_status::ready)
    throw std::runtime_error("cluster::ledgers: the ps shards did not answer in time");
  return fut.get();
}

const model::model& cluster::structure() const { return impl_->structure; }
const cluster_spec& cluster::spec() const { return impl_->spec; }
std::shared_ptr<event_queue> cluster::events() const { return impl_->events; }

namespace {

// Asks every shard for its stats; calls `done` with each answer (or error), by shard
// index, once all are in.
using stats_answers = std::vector<caf::expected<ps_stats>>;
void gather_stats(caf::actor_system& sys, std::vector<ps_shard_actor> ps, caf::timespan timeout,
                  std::function<void(stats_answers)> done) {
  request_each_from_outside<ps_stats>(sys, std::move(ps), timeout, std::move(done), stats_atom::value);
}

}  // namespace

std::future<std::string> cluster::ps_report_async() {
  auto& d = *impl_;
  auto promise = std::make_shared<std::promise<std::string>>();
  auto fut = promise->get_future();
  gather_stats(d.sys, d.ps, d.timeout(), [promise](stats_answers all) {
    std::string out;
    for (size_t i = 0; i < all.size(); ++i) {
      if (!all[i]) {
        out += fmt::format("ps {}: {}\n", i, describe(all[i].error()));
        continue;
      }
      auto& s = *all[i];
      // Steps in the shard's state: those of the checkpoint it was restored to, and since.
      out += fmt::format("ps {}: applied {}, duplicates {}, rejected {}, fenced {}, remembered {}{}\n", s.shard,
                         s.base + s.applied, s.duplicates, s.rejected, s.fenced, s.remembered,
                         s.base > 0 ? fmt::format(", restored at step {}", s.base) : "");
    }
    promise->set_value(out);
  });
  return fut;
}

std::shared_ptr<const model::placement> cluster_internals::placement_for(const model::model& structure,
                                                                         const cluster_spec& spec) {
  auto part = spec.partitioner.empty() || spec.partitioner == "none" ? nullptr : model::make_partitioner(spec.partitioner);
  return std::make_shared<model::placement>(model::place(structure.variables(), part.get(), spec.num_ps));
}

ledger_run ledger_run_of(const job& j, const cluster_spec& spec, uint64_t run, bool complete) {
  ledger_run r;
  r.run = run;
  r.fn = j.train;
  r.num_pipelines = cluster_internals::num_pipelines(spec);
  auto rounds = make_gate(spec.consistency, spec.num_workers)->round_size();
  r.replicas_in_sync = rounds > 0 ? static_cast<int64_t>(rounds) : 1;
  r.epochs = j.fit.epochs;
  r.steps_per_epoch = j.fit.steps_per_epoch;
  r.complete = complete;
  return r;
}

std::vector<ledger_variable> ledger_variables(const job& j) {
  std::vector<ledger_variable> out;
  for (auto& v : j.structure.variables()) out.push_back({v.name, v.shape.rows});
  return out;
}

int cluster_internals::num_pipelines(const cluster_spec& spec) {
  return spec.num_dataset_shards > 0 ? spec.num_dataset_shards : spec.num_workers;
}

dataset_shard_options cluster_internals::pipeline_options(const cluster_spec& spec, int i) {
  // num_replicas_in_sync: the sync rounds' R, 1 in the other modes.
  auto rounds = make_gate(spec.consistency, spec.num_workers)->round_size();
  dataset_shard_options o;
  o.context = dataset::input_context{num_pipelines(spec), i, rounds > 0 ? static_cast<int64_t>(rounds) : 1};
  o.prefetch = spec.prefetch;
  o.detached = !spec.simulated;
  return o;
}

worker_options cluster_internals::worker_options_for(const cluster_spec& spec, uint32_t id,
                                                      const model::model& structure, model::loss_ptr loss,
                                                      std::vector<std::shared_ptr<const model::metric>> metrics,
                                                      std::shared_ptr<const model::placement> placement) {
  worker_options o;
  o.id = id;
  o.structure = structure;
  o.loss = std::move(loss);
  o.metrics = std::move(metrics);
  o.placement = std::move(placement);
  o.timeout = std::chrono::duration_cast<caf::timespan>(spec.request_timeout);
  o.seed = spec.seed;
  o.detached = !spec.simulated;
  o.overlap_push = spec.overlap_push;
  o.pull_ahead = spec.pull_ahead;
  o.pull_every = spec.pull_every;
  o.local_learning_rate = spec.local_learning_rate;
  o.push_every = spec.push_every;
  o.pull_rows = spec.pull_rows;
  return o;
}

std::unique_ptr<cluster> cluster_internals::make(caf::actor_system& sys, cluster_spec spec, model::model structure,
                                                 const model::optimizer& opt, model::loss_ptr loss,
                                                 std::vector<model::metric_ptr> metrics, const cluster::parts& p) {
  return std::unique_ptr<cluster>(
    new cluster(sys, std::move(spec), std::move(structure), opt, std::move(loss), std::move(metrics), &p));
}

caf::actor cluster_internals::coordinator(cluster& c) { return caf::actor_cast<caf::actor>(c.impl_->coordinator); }

std::vector<caf::actor> cluster_internals::ps(cluster& c) {
  std::vector<caf::actor> out;
  for (auto& p : c.impl_->ps) out.push_back(caf::actor_cast<caf::actor>(p));
  return out;
}

std::shared_ptr<const model::placement> cluster_internals::placement(cluster& c) { return c.impl_->placement; }

cluster_internals::deposed cluster_internals::take_over(cluster& c) {
  auto& d = *c.impl_;
  if (!d.active || d.spec.checkpoint_dir.empty())
    throw std::logic_error("take_over: needs a run in progress and a checkpoint_dir");
  auto o = d.coordinator_opts;
  o.workers = d.workers;
  o.ps = d.ps;
  d.deposed.push_back(d.coordinator);
  o.coordinator_epoch += d.deposed.size();  // the restore raises it above all the shards saw
  d.epoch_floor = o.coordinator_epoch;
  d.coordinator = spawn_coordinator(d.sys, std::move(o));
  d.named(d.coordinator, actor_role::coordinator, static_cast<uint32_t>(d.deposed.size()));
  auto spec = d.last_spec;
  spec.resume_from = d.spec.checkpoint_dir;
  auto promise = std::make_shared<std::promise<caf::expected<run_summary>>>();
  auto old = std::move(d.result);
  d.result = promise->get_future();
  d.sys.spawn(ask_for_run, d.coordinator, d.call_timeout(), std::move(spec), promise,
              caf::timespan{0});
  return deposed{std::move(old), d.epoch_floor};
}

void cluster_internals::observe(cluster& c, std::function<void(const event&)> fn) { c.impl_->observer = std::move(fn); }

std::future<std::vector<ps_stats>> cluster_internals::shard_stats(cluster& c) {
  auto& d = *c.impl_;
  auto promise = std::make_shared<std::promise<std::vector<ps_stats>>>();
  auto fut = promise->get_future();
  gather_stats(d.sys, d.ps, d.timeout(), [promise](stats_answers all) {
    std::vector<ps_stats> out;
    for (auto& x : all) {
      if (!x) {
        promise->set_exception(std::make_exception_ptr(std::runtime_error(describe(x.error()))));
        return;
      }
      out.push_back(std::move(*x));
    }
    promise->set_value(std::move(out));
  });
  return fut;
}

std::future<std::string> cluster::status_async() {
  auto& d = *impl_;
  auto promise = std::make_shared<std::promise<std::string>>();
  auto fut = promise->get_future();
  auto coordinator = d.coordinator;
  auto timeout = d.timeout() + std::chrono::seconds(1);
  request_from_outside<status_report>(
    d.sys, coordinator, timeout, [promise](status_report& r) { promise->set_value(describe(r)); },
    [promise](caf::error& e) { promise->set_value("no status from the coordinator: " + describe(e) + "\n"); },
    report_atom::value);
  return fut;
}

std::string cluster::status() {
  auto fut = status_async();
  if (fut.wait_for(impl_->spec.request_timeout + std::chrono::seconds(2)) != std::future_status::ready)
    throw std::runtime_error("cluster::status: the coordinator did not answer in time");
  return fut.get();
}

void cluster::add_callback(callback_ptr cb) {
  if (!cb) throw std::invalid_argument("cluster::add_callback: null callback");
  impl_->callbacks.push_back(std::move(cb));
}

std::string cluster::ps_report() {
  auto fut = ps_report_async();
  if (fut.wait_for(impl_->spec.request_timeout + std::chrono::seconds(1)) != std::future_status::ready)
    throw std::runtime_error("cluster::ps_report: the ps shards did not answer in time");
  return fut.get();
}

}  // namespace actortrain
