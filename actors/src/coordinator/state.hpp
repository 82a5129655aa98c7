#pragma once
// The coordinator actor's state and the functions its files share (internal to
// actors/src/coordinator/): coordinator.cpp (the behaviour, one line per message, and
// the runs), dispatch.cpp (tasks under the gate, their answers, re-queues, synchronous
// rounds), membership.cpp (workers and dataset shards that join or are lost), epochs.cpp
// (epochs, evaluation and the epoch gate), checkpoints.cpp (writing checkpoints and the
// run state they keep), recovery.cpp (fences, restores, a lost ps shard, the start of a
// run), status.cpp (the status report). What is decided about the work lives in the CAF-free
// parts beside them: step_queue.hpp, sync_round.hpp, run_state.hpp, dispatch_gate,
// recovery_plan.hpp (which recovery, which checkpoint, which epochs).
#include <actortrain/actors/coordinator/coordinator.hpp>
#include <actortrain/actors/core/errors.hpp>

#include <actortrain/model/checkpoint/checkpoint.hpp>

#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>

#include <fmt/format.h>

#include "recovery_plan.hpp"
#include "grant_queue.hpp"
#include "run_state.hpp"
#include "step_queue.hpp"
#include "sync_round.hpp"

namespace actortrain::coord {

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
  dataset_shard_actor shard;
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
  std::unique_ptr<model::optimizer_set> optimizer;  // opts.optimizer's copy (hyperparameters kept current)
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
  // Incremental checkpoints: the run directory's newest committed checkpoint, taken since
  // the shards' last init or restore (a dynamic table's next one may be an increment over
  // it), and how many increments it ends (checkpoint_full_every).
  int64_t increment_base = -1;
  int64_t increments = 0;
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
  bool eval_batch_events = false;         // it emits eval_batch_begun/done (eval_spec::batch_events)
  int64_t eval_done = 0;                  // its batches answered
  std::map<step_id, tensor> outputs;      // its outputs so far, by step
  // A run of scheduled steps (run_spec::on_demand): the grants of loop `grants_loop`,
  // kept from their arrival (they may come before the run's request).
  grant_queue grants;
  uint64_t grants_loop = 0;
  bool closing_epoch = false;  // an epoch mark ended the epoch: nothing goes out until the next begins
  caf::typed_response_promise<run_summary> run_rp;
  caf::typed_response_promise<eval_summary> eval_rp;
  std::chrono::steady_clock::time_point started;
  static inline const char* name = "coordinator";
};

using self_ptr = coordinator_actor::stateful_pointer<coord_state>;

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

// -- what the coordinator's files use of each other ------------------------------------

// coordinator.cpp: the behaviour, runs (fit, evaluate, hyperparameters), events, the run's end
void emit(coord_state& st, event e);
fence current_fence(const coord_state& st);
void forget_round(coord_state& st);
uint64_t round_size(const coord_state& st);
void fail_run(self_ptr self, caf::error err);
void finish_run(self_ptr self);
bool nothing_in_flight(const coord_state& st);
void write_extra_checkpoint(self_ptr self, std::function<void()> then);
void mark_pipeline_lost(coord_state& st, uint32_t p, std::string why, bool eval = false);
caf::result<run_summary> on_fit(self_ptr self, run_spec& spec);
caf::result<eval_summary> on_eval(self_ptr self, eval_spec& spec);
caf::result<caf::ok_atom> on_hyperparams(self_ptr self, hyperparams_request& req);
void on_grant(self_ptr self, step_grants& g);

// dispatch.cpp: the next task under the gate, sending it, its answer or error,
// re-queues, speculative twins, synchronous rounds
std::vector<uint64_t> watermark(const coord_state& st);
void dispatch(self_ptr self);
void requeue(self_ptr self, step_task task, const caf::error& why);
void settled(coord_state& st, uint32_t wid, uint64_t id);
void on_slow(self_ptr self, uint64_t id);

// membership.cpp: workers joining, lost and fenced out, outages, rebuilt dataset shards
bool alive_workers(const coord_state& st);
void on_worker_down(self_ptr self, uint32_t wid, const caf::error& reason);
caf::result<caf::ok_atom> on_source(self_ptr self, uint32_t p, dataset_shard_actor shard, bool eval);
void on_outage(self_ptr self, uint64_t id);
caf::result<uint64_t> on_join(self_ptr self, worker_actor handle, uint32_t id);

// status.cpp: the status report
void note_for_status(coord_state& st, const event& e);
caf::result<status_report> on_report(self_ptr self);

// epochs.cpp: epochs, evaluation, the epoch gate
void start_eval(self_ptr self, const std::vector<dataset_shard_actor>& shards);
void begin_epoch(self_ptr self);
void end_epoch(self_ptr self);
void release_gate(self_ptr self, gate_decision d, std::optional<caf::typed_response_promise<caf::ok_atom>> rp);
caf::result<caf::ok_atom> on_gate_decision(self_ptr self, uint64_t run, int64_t epoch, gate_decision& d);
void on_gate_timeout(self_ptr self, uint64_t id);
void forget_work(coord_state& st);

// checkpoints.cpp: checkpoints and the run state they keep
nlohmann::json save_run(const coord_state& st);
void load_run(coord_state& st, const nlohmann::json& j);
model::file_system& checkpoint_fs(coord_state& st);
void ps_failed(self_ptr self, size_t i, const caf::error& e, const std::string& what, bool even_recovering = false);
void next_checkpoint_after(coord_state& st);
void schedule_tick(self_ptr self);
ledger_data saved_ledger(const nlohmann::json& extra, const std::string& variable, int64_t row);
void write_checkpoint_now(self_ptr self, std::function<void()> then);
void write_checkpoint_to(self_ptr self, ckpt_target target, std::function<void(const std::string&)> then);
std::function<void(caf::error&)> checkpoint_refused(self_ptr self, size_t i, uint64_t attempt);
caf::result<std::string> on_checkpoint_request(self_ptr self, const checkpoint_target& t, int32_t keep);
void on_checkpoint_tick(self_ptr self, uint64_t id);

// recovery.cpp: fences, restores, a lost ps shard, the start of a run
void warn(coord_state& st, std::string text);
void init_shards(self_ptr self, std::function<void()> then);
void recover(self_ptr self);
void on_ps_down(self_ptr self, uint32_t index, const caf::error& reason);
void start_run(self_ptr self);
std::function<void(caf::error&)> restore_failed(self_ptr self, size_t i, uint64_t attempt, std::string what);
caf::result<caf::ok_atom> on_replace(self_ptr self, uint32_t index, ps_shard_actor shard);
void on_recover_deadline(self_ptr self, uint64_t id);

}  // namespace actortrain::coord
