#pragma once
// The embedded cluster's state (private to actors/src/cluster/): what cluster::impl owns
// — the spec, the model, the actors, the run in progress, the callbacks, the progress
// printer and the metrics writer — shared by cluster.cpp (construction and runs),
// run_events.cpp (the application thread's side of a run: events, callbacks, the epoch
// gate, the result) and cluster_requests.cpp (evaluation, prediction, hyperparameters,
// checkpoints, workers, variables, ledgers, status).
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

namespace detail {

using run_outcome = caf::expected<run_summary>;

/// Asks the coordinator for run `req` once every training pipeline made its first batch
/// (each within `build_timeout`; zero: at once) and hands the outcome to `out`.
void ask_for_run(caf::event_based_actor* self, coordinator_actor coord, caf::timespan timeout, run_spec req,
                 std::shared_ptr<std::promise<run_outcome>> out, caf::timespan build_timeout);

/// Asks the coordinator to admit worker `w` as `id`; the future holds its generation (or
/// the refusal, after which `w` is stopped).
std::future<uint64_t> ask_to_join(caf::actor_system& sys, coordinator_actor coord, caf::timespan timeout,
                                  worker_actor w, uint32_t id);

/// Asks the coordinator for a checkpoint into `target` and fulfils `promise` with its path
/// or the error.
void ask_for_checkpoint(caf::event_based_actor* self, const coordinator_actor& coord, caf::timespan timeout,
                        checkpoint_target target, int32_t keep, std::shared_ptr<std::promise<std::string>> promise);

}  // namespace detail

// What a callback's `training` is on a cluster (callbacks.hpp).
class cluster_training final : public model::training {
 public:
  explicit cluster_training(cluster& c) : c_(c) {}
  cluster& owner() { return c_; }
  void stop_training() override { c_.stop_training(); }
  std::map<std::string, double> hyperparams() const override;
  void set_hyperparams(const std::map<std::string, double>& values) override { c_.set_hyperparams_async(values); }
  void keep_state() override { c_.keep_state(); }
  void restore_kept_state_at_end() override { c_.restore_kept_state_at_end(); }
  void save_checkpoint(const std::string& dir, int keep) override { c_.checkpoint_async(dir, keep); }
  std::string own_checkpoint_dir() const override { return c_.spec().checkpoint_dir; }
  bool has_validation() const override;

 private:
  cluster& c_;
};

struct cluster::impl {
  cluster* owner = nullptr;  // for the callbacks
  std::unique_ptr<cluster_training> view;  // what their hooks see
  std::vector<callback_ptr> callbacks;     // add_callback's: every run's
  std::vector<callback_ptr> run_callbacks_list;  // the run's: those, then fit_options::callbacks
  std::string callback_error;  // the first callback's exception of the run: fails it at the end
  caf::actor_system& sys;
  cluster_spec spec;
  model::model structure;
  model::loss_ptr loss;
  std::unique_ptr<model::optimizer_set> optimizer;  // a copy of the shards': checks hyperparameter changes
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
  std::vector<dataset_shard_actor> run_shards;
  dataset::dataset_fn run_fn;   // the run's, for rebuilding a lost dataset shard
  dataset::dataset_fn eval_fn;  // its validation pipelines' (null: none)
  model::fit_options opts;
  size_t run_prefetch = 0;  // the run's fit_options::input.per_replica_buffer_size (0: spec.prefetch)
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
  bool failure_retryable = false;  // see run_failed

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
  // A run of scheduled steps (begin_steps): its grants by ticket, as sent (a coordinator
  // that takes the run over gets them again), the tickets that are epoch marks, and
  // what each scheduled step returned (nullopt: it found no batch), from the events.
  // evaluate() and predict(): the callbacks that hear their batches (empty: no batch events).
  std::vector<callback_ptr> eval_hooks;
  bool predicting = false;
  bool scheduled = false;
  bool grants_ended = false;    // join sent the end of the grants
  uint64_t steps_run = 0;       // the last run of scheduled steps (its handles' run)
  std::vector<uint32_t> grant_fns;
  std::vector<int32_t> grant_replicas;
  uint64_t marks = 0;
  std::map<uint64_t, std::optional<model::logs>> step_results;
  // Sends the grants from ticket `first` on (end: no more will come).
  void send_grants(uint64_t first, bool end);
  // Waits (handling events) until `ready()` or the run ended; throws run_failed when it failed.
  // Starts a run on the pipelines `fn` builds: schedule(fn, opts) (with the
  // callbacks), or with `scheduled` begin_steps's run of scheduled steps (none run).
  run_handle start_run(dataset::dataset_fn fn, const model::fit_options& opts, bool scheduled);
  void wait_steps(const std::function<bool()>& ready);

  impl(caf::actor_system& s, cluster_spec sp)
    : sys(s), spec(std::move(sp)), events(std::make_shared<event_queue>(std::max<size_t>(8, spec.event_queue_capacity))) {}

  caf::timespan timeout() const { return std::chrono::duration_cast<caf::timespan>(spec.request_timeout); }
  caf::timespan call_timeout() const { return std::chrono::duration_cast<caf::timespan>(spec.call_timeout); }

  int num_pipelines() const { return cluster_internals::num_pipelines(spec); }

  dataset_shard_actor spawn_shard(const dataset::dataset_fn& fn, int i) {
    auto o = cluster_internals::pipeline_options(spec, i);
    if (run_prefetch > 0) o.prefetch = run_prefetch;  // fit_options::input
    o.plant = plant;
    auto a = spawn_dataset_shard(sys, fn, std::move(o));
    named(a, actor_role::dataset, static_cast<uint32_t>(i));
    return a;
  }

  std::vector<dataset_shard_actor> spawn_shards(const dataset::dataset_fn& fn) {
    std::vector<dataset_shard_actor> out;
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
    o.groups = optimizer->groups();
    o.compensation = spec.compensation;
    o.variables = structure.variables();
    auto p = spawn_ps_shard(sys, optimizer->fallback(), o);  // with the current hyperparameters
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
      [p](caf::error&) { caf::anon_send_exit(p, caf::exit_reason::user_shutdown); }, replace_atom::value, index, p);
  }

  // Tells the fault policy (if any) what a spawned actor is.
  template <class Handle>
  void named(const Handle& h, actor_role role, uint32_t index) {
    if (spec.faults) spec.faults->on_spawn(caf::actor_cast<caf::actor_addr>(h), role, index);
  }

  std::future<uint64_t> join_cluster(worker_actor w, uint32_t id) { return detail::ask_to_join(sys, coordinator, timeout(), w, id); }

  worker_actor spawn_worker_with_id(uint32_t id) {
    auto o = cluster_internals::worker_options_for(spec, id, structure, loss, metrics, placement);
    o.plant = plant;
    o.ps = ps;
    o.seam = seam;
    auto w = spawn_worker(sys, std::move(o));
    named(w, actor_role::worker, id);
    return w;
  }

  template <class Handle>
  void stop(std::vector<Handle>& actors) {
    for (auto& a : actors) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    actors.clear();
  }

  void handle(const event& e);

  // Handles events on the application thread until `done()` holds, then what is queued.
  template <class P>
  void drain_until(P done) {
    while (!done()) drain(std::chrono::milliseconds(50));
    drain(std::chrono::milliseconds(0));
  }
  template <class T>
  static bool is_ready(const std::future<T>& fut) {
    return fut.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  }
  // Waits for `fut`, handling events meanwhile.
  template <class T>
  void wait(std::future<T>& fut) {
    drain_until([&] { return is_ready(fut); });
  }
  // The active run's answer has come (complete() takes it).
  bool run_ended() const { return is_ready(result); }

  void drain(std::chrono::milliseconds wait);

  // Runs `hook` on every callback of the run, keeping the first exception for the run's end.
  template <class F>
  bool each_callback(F hook) {
    bool ok = true;
    for (auto& cb : run_callbacks_list) {
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
  void run_callbacks(const event& e);
  void validation_hooks(callback& cb, const model::logs& epoch_values);

  // An epoch ended and the coordinator waits: run on_epoch_end and, unless the run ends
  // here, the next epoch's on_epoch_begin, then tell it what they decided. A callback
  // that throws stops the run (join reports it).
  void pass_gate(const event& e);

  // Called once the result future is ready.
  void complete();
};

}  // namespace actortrain
