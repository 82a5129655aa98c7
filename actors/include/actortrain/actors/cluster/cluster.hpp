#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// The embedding API: a parameter-server cluster inside an actor_system the application
// owns. The cluster spawns ps shards, workers and a coordinator (and, per fit call,
// dataset shards built with the user's dataset_fn), and offers Keras's fit / evaluate /
// predict on them. fit is a thin blocking wrapper over the asynchronous schedule +
// join (TensorFlow's ClusterCoordinator), so the simulator drives the same code a user
// runs; evaluate and predict wrap evaluate_async and predict_async the same way.
//
// example[system]:
//   caf::actor_system_config cfg;
//   actortrain::configure(cfg);
//   caf::actor_system sys{cfg};
//   actortrain::cluster_spec spec;
//   spec.num_ps = 2;
//   spec.num_workers = 2;
//   std::vector<model::metric_ptr> m;
//   m.push_back(model::accuracy());
//   actortrain::cluster c{sys, spec, mlp, *model::make_adam(), model::softmax_cross_entropy(), std::move(m)};
//   auto history = c.fit([train](const dataset::input_context& ctx) {
//     return train.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).shuffle(60000, 1).batch(128);
//   }, opts);
//
// Progress and callbacks run on the thread that calls fit/join (never in an actor).
// Two clusters in one actor_system are independent (no global state). The destructor
// stops every actor the cluster spawned. Not thread-safe: one application thread
// drives a cluster. This header does not include CAF.

#include <actortrain/actors/cluster/callbacks.hpp>
#include <actortrain/actors/ps/ledger.hpp>
#include <actortrain/actors/core/consistency.hpp>
#include <actortrain/actors/ps/compensation.hpp>
#include <actortrain/actors/worker/exchange_options.hpp>
#include <actortrain/dataset/input_context.hpp>
#include <actortrain/model/loss.hpp>
#include <actortrain/model/metric.hpp>
#include <actortrain/model/model.hpp>
#include <actortrain/model/optim/groups.hpp>
#include <actortrain/model/optim/optimizer.hpp>
#include <actortrain/model/partitioner.hpp>
#include <actortrain/model/trainer.hpp>

#include <chrono>
#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace caf {
class actor_system;
}  // namespace caf

namespace actortrain::model {
class file_system;
}  // namespace actortrain::model

namespace actortrain {

class distributed_dataset;
class event_queue;
class fault_policy;
struct distributed_element;
struct per_replica;
struct event;
struct job;

/// How a cluster is laid out and behaves. Defaults give one ps shard and one worker.
struct cluster_spec : exchange_options {
  /// Parameter-server shards (variables are placed round-robin over them).
  int num_ps = 1;
  /// Workers (model replicas).
  int num_workers = 1;
  /// Input pipelines = dataset shards; 0 means one per worker. This is
  /// input_context.num_input_pipelines (real, unlike TF's PS strategy).
  int num_dataset_shards = 0;
  /// Keras's train_step override (model/train_step.hpp): the workers run this step
  /// function instead of the built-in one; its gradients are pushed and applied exactly
  /// once as every step's are, its "loss" is the step's loss (other logs stay on the
  /// worker). A cluster of processes: every task's job carries the same function (the
  /// program builds the same job), and the job fingerprint compares its name. An
  /// embedding table pulled by row may reach the step as its batch's rows alone, with
  /// the batch's ids renumbered to them (exchange_options::pull_rows).
  model::step_function train_step;
  /// Steps a custom training loop schedules by name (cluster::schedule, cluster::run):
  /// each runs on a worker with its batch and the pulled variables, its gradients are
  /// pushed and applied exactly once as a fit step's are, and what it returns (with
  /// "loss") comes back to the handle. A cluster of processes: every task's job
  /// registers the same steps (the job fingerprint compares their names).
  std::vector<model::step_function> steps;
  /// Variables with optimizers of their own on the ps shards (model/optim/groups.hpp):
  /// the wide-and-deep pattern, e.g. {"wide", {"wide_embedding/"}, model::make_adagrad()}
  /// beside the cluster's optimizer for the rest. A group's hyperparameters are named
  /// "GROUP/NAME" (set_hyperparams({{"wide/learning_rate", 0.05}})); a learning-rate
  /// schedule sets the cluster's optimizer's only. Checkpoints keep each partition's
  /// slots under its own optimizer's slot names.
  std::vector<model::variable_group> variable_groups;
  /// How variables are split into row partitions (model/partitioner.hpp; null: whole
  /// variables). model::make_partitioner reads "none", "fixed_shards(n)",
  /// "min_size(bytes, max_shards)" and "max_size(bytes)" from a flag.
  std::shared_ptr<const model::partitioner> partitioner;
  /// How steps are ordered, how stale a gradient may be (core/consistency.hpp; consistency_mode::parse reads the
  /// text forms below from a flag or a file):
  ///  - "async": a step is dispatched whenever a worker is free and applied on arrival
  ///    (TensorFlow's ParameterServerStrategy); staleness is unbounded.
  ///  - "bounded_staleness(s)": no new step is dispatched while the oldest step not yet
  ///    applied is more than s steps older; no step's version staleness exceeds 2s
  ///    (s = 0: sequential). Stale synchronous parallel, as in Petuum.
  ///  - "sync": rounds of R = num_workers batches (R fixed at start), all computed on the
  ///    same parameters; the shards apply the round's example-weighted mean once, so a
  ///    round equals one step on the global batch (TensorFlow's MultiWorkerMirrored).
  ///    A lost worker's batch is re-run within its round instead of failing the job.
  ///    input_context.num_replicas_in_sync = R (1 in the other modes): per-replica batch
  ///    = global batch / R. Tasks are of one step (steps_per_execution does not apply).
  consistency_mode consistency = consistency_mode::async();
  /// What the ps shards do about a stale gradient, one computed on parameters other
  /// steps have moved since (ps/compensation.hpp, with each method's paper;
  /// staleness_compensation::parse reads "none", "lookahead", "lookahead(k)",
  /// "staleness_lr" and "dc_asgd(lambda)" from a flag). Asynchronous and
  /// bounded-staleness training only; a cluster of processes: every task's job gives the
  /// same (the job fingerprint compares it).
  staleness_compensation compensation;
  /// Steps per task sent to a worker (Keras's steps_per_execution): fewer round trips
  /// with the coordinator for small models, and with pull_with_push every step of a task
  /// but the first reads on its predecessor's push. It changes what a worker waits for,
  /// never which steps are trained. "sync" rounds are one step per replica: there tasks
  /// are of one step whatever this says. Under bounded_staleness a task takes at most
  /// its worker's share of the window (room / workers, one step at least).
  int steps_per_execution = 1;
  /// Tasks a worker holds at once (it queues them, so its next step needs no round trip
  /// to the coordinator); 0 picks 3, or 4 with pull_ahead. More in flight means more
  /// steps to re-run when a worker is lost.
  int tasks_in_flight = 0;
  /// Timeout of every request between actors; also how long a run waits for a worker
  /// to join (restart_worker, add_worker) once every worker is lost.
  std::chrono::milliseconds request_timeout{60000};
  /// Timeout of a whole fit/evaluate call as seen by the application.
  std::chrono::hours call_timeout{24 * 7};
  /// Seeds initialization and dropout.
  uint64_t seed = 1;
  /// Batches each dataset shard prepares ahead of demand.
  size_t prefetch = 2;
  /// Run every actor on the system's scheduler, compute inline (no detached threads):
  /// for CAF's deterministic test coordinator.
  bool simulated = false;
  /// JSON-lines metrics file ("" = none): steps, epochs and events, format in the README.
  std::string metrics_file;
  /// Auto-shard policy for fit(dataset) with a plain dataset.
  dataset::auto_shard_policy auto_shard = dataset::auto_shard_policy::auto_;
  /// A fault policy for the send seam (tests); null in production.
  std::shared_ptr<fault_policy> faults;
  /// Record which worker (generation) applied each step: fit_result::visits.
  bool visitation_log = false;
  /// Replace a worker the coordinator lost (its actor died) with a new one, as
  /// restart_worker does, while a run is joined or polled.
  bool restart_lost_workers = false;
  /// Coordinated checkpoints ("" = none): a step-0 checkpoint before the first step,
  /// then one every checkpoint_every applied steps (0: only the first): when one falls
  /// due, dispatch pauses, the steps in flight are applied, and every shard's state is
  /// written at that step (so it may lie a few steps past the multiple), keeping the
  /// newest checkpoint_keep; and one when a run ends. Each is a directory of .npy files
  /// (values and optimizer slots per partition, with row ranges) and a manifest written
  /// last, holding the run's state (see actortrain/model/checkpoint/checkpoint.hpp).
  /// A cluster's first fit refuses a directory that holds checkpoints already unless
  /// it resumes from it (fit_options::resume_from).
  ///
  /// Recovery: a ps shard actor that dies is respawned, and every shard rolls back to
  /// the newest committed checkpoint (the steps after it run again; ps_lost and
  /// ps_restored events). Without checkpoint_dir the run fails instead.
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  /// Also a checkpoint this often (at the next applied step), measured on the actor
  /// clock; 0: off.
  std::chrono::milliseconds checkpoint_interval{0};
  int checkpoint_keep = 3;
  /// Every checkpoint_full_every-th checkpoint holds every row of a dynamic table; those
  /// between hold only the rows changed since the checkpoint before (an increment over
  /// it: restoring reads the chain back to a whole one, and pruning keeps it). The first
  /// after a restore is whole too. Tables of fixed rows and dense variables are always
  /// whole. 1: every checkpoint whole.
  int checkpoint_full_every = 8;
  /// Where checkpoints are written (tests: model::fault_file_system); null: the real one.
  /// A checkpoint that cannot be written ends the run with checkpoint_failed; the ones
  /// committed before stay.
  std::shared_ptr<model::file_system> checkpoint_fs;
  /// Every ps shard writes its own partitions into checkpoint_dir (a directory all of a
  /// cluster's processes reach: its checkpoint.shared) and only their files' records go
  /// to the coordinator, which commits the manifest. Same files as without.
  bool checkpoint_shared = false;
  /// Speculative re-execution of stragglers: a step still running after this many
  /// times the median step time also runs on another worker; the first answer counts
  /// (de-duplication makes the other harmless). 0: off, as in TensorFlow.
  double speculate_after = 0;
  /// A step whose attempts fail this many times (workers lost or timing out on it: a
  /// poison record) ends the run with poison_step, naming the step, its pipeline and
  /// position, and the last error. Application errors end the run at the first.
  int poison_limit = 3;
  /// Shards keep which computation applied each step (for the simulator's count of torn
  /// re-runs; grows with the run).
  bool apply_log = false;
  /// Events the application thread may fall behind by (event_queue): beyond it step
  /// events are dropped and counted (fit_result::dropped_events), training goes on.
  size_t event_queue_capacity = 4096;
};

/// One applied step: the batch at `position` of input pipeline `pipeline`, computed by
/// `worker` in its `generation`. Every (pipeline, position) of a run appears once.
struct visited_step {
  uint64_t run = 0;
  uint32_t pipeline = 0;
  uint64_t position = 0;
  uint32_t worker = 0;
  uint64_t generation = 0;
};

/// What fit returns besides the history.
struct fit_result {
  model::history history;
  /// The run's id in this cluster (1 for its first fit): the ledgers record steps by it
  /// (ledger_run::run).
  uint64_t run = 0;
  int64_t steps = 0;
  bool ran_out = false;
  /// With cluster_spec::visitation_log: every applied step, in the order applied.
  std::vector<visited_step> visits;
  /// Workers replaced during the run (cluster_spec::restart_lost_workers).
  int restarts = 0;
  /// Roll-backs after a lost ps shard, and the checkpoint step a resumed run began at
  /// (-1: not resumed).
  int ps_restores = 0;
  int64_t resumed_at = -1;
  /// Version staleness of the applied steps (event::staleness): mean and max.
  double mean_staleness = 0;
  uint64_t max_staleness = 0;
  /// The epoch (from 0) after which cluster::stop_training ended the run (-1: it ran
  /// every epoch), and the epoch whose kept state the variables went back to at the end
  /// (-1: none; cluster::restore_kept_state_at_end).
  int64_t stopped_epoch = -1;
  int64_t restored_epoch = -1;
  /// Step events the application thread fell behind on (dropped, not seen by callbacks,
  /// the progress line or the metrics file); training did not wait for them. (The
  /// queue drops step_begun events too when full: on_train_batch_begin misses them.)
  uint64_t dropped_events = 0;
};

/// What cluster::join (and fit) throw when the run failed: the cluster's error text,
/// and whether re-running from the last checkpoint may cure it (a lost task not
/// replaced in time, a timeout) or not (user code threw, a malformed request, a
/// callback failed).
class run_failed : public std::runtime_error {
 public:
  run_failed(const std::string& what, bool retryable) : std::runtime_error(what), retryable_(retryable) {}
  bool retryable() const noexcept { return retryable_; }

 private:
  bool retryable_;
};

class cluster {
 public:
  /// Spawns the cluster's actors in `sys`. Throws std::logic_error if configure() was not
  /// called on the system's config, std::invalid_argument for a bad spec (zero workers,
  /// zero ps shards, steps_per_execution < 1, options a consistency mode does not allow).
  cluster(caf::actor_system& sys, cluster_spec spec, model::model structure, const model::optimizer& opt,
          model::loss_ptr loss, std::vector<model::metric_ptr> metrics = {});
  /// The cluster job `j` describes (cluster/job.hpp): j.spec's shape and tuning, its
  /// model, optimizer, loss, fresh metrics and callbacks; train it with
  /// fit(j.train, j.fit). Throws std::invalid_argument for a job that lacks a part.
  cluster(caf::actor_system& sys, const job& j);
  ~cluster();
  cluster(const cluster&) = delete;
  cluster& operator=(const cluster&) = delete;

  // -- asynchronous API (TensorFlow's ClusterCoordinator) ------------------------------

  /// A scheduled fit (TensorFlow's RemoteValue for a whole run): done() and join() take it.
  struct run_handle {
    uint64_t id = 0;
  };

  /// Schedules training on the pipelines `fn` builds (one per dataset shard, with a real
  /// input_context) and returns at once. With opts.resume_from it continues the run of
  /// the newest committed checkpoint there (into any number of ps shards; the same
  /// number of dataset shards, epochs >= the checkpoint's epoch, same steps_per_epoch)
  /// under a new coordinator epoch; fit_result and the history cover the whole run. Never auto-shards on top of the user's shard()
  /// calls. Validation data in opts.validation is split over the shards by data. The run
  /// begins (its first step, run_begin) once every pipeline has built its dataset and made
  /// a first batch, or after spec.request_timeout, so loading files does not compete with
  /// training. One run at a time: std::logic_error while another is scheduled and not joined.
  run_handle schedule(dataset::dataset_fn fn, const model::fit_options& opts = {});
  /// Processes the events that are ready (progress, metrics file) without waiting; true
  /// when the run has ended (then join() returns at once).
  bool done(const run_handle& h);
  /// Waits for the run, printing progress on this thread; throws std::runtime_error with
  /// the cluster's error text when the run failed.
  fit_result join(const run_handle& h);

  // -- custom training loops (ClusterCoordinator.schedule of a step function) ---------
  //
  // A run of scheduled steps trains only what the application asks for, step by step:
  //
  // example[with_sys]:
  //   spec.steps.push_back(model::clipped_step(1.0));  // registered by name: "clip_by_global_norm(1)"
  //   actortrain::cluster c{sys, spec, mlp, *model::make_adam(), model::softmax_cross_entropy()};
  //   auto run = c.begin_steps([train](const dataset::input_context& ctx) {
  //     return train.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(64);
  //   });
  //   std::vector<actortrain::cluster::step_handle> hs;
  //   for (int i = 0; i < 100; ++i) hs.push_back(c.schedule("clip_by_global_norm(1)"));
  //   c.join_steps();                      // every step scheduled so far is applied
  //   double last = c.fetch(hs.back())->at("loss");
  //   auto result = c.join(run);           // the run ends: history per epoch, steps
  //
  // Every step has a step id (run, pipeline, position) from its pipeline's iterator at
  // dispatch, so a step re-run after a lost worker computes on the same batch with the
  // same step_context key (its randomness). After a roll-back, a step for a given replica
  // takes that replica's same batch again; one for any replica the next batch there is.

  /// What schedule returns (TensorFlow's RemoteValue): done() and fetch() take it.
  struct step_handle {
    uint64_t run = 0;
    uint64_t ticket = 0;
  };

  /// Starts a run of scheduled steps on the pipelines `fn` builds (as schedule(fn) does);
  /// nothing trains until schedule() asks. Its epochs turn when every pipeline's data
  /// ended (then the pipelines start over, as with fit) or at next_epoch(). join(h) ends
  /// it: it waits for every step scheduled, closes the open epoch, writes the run's last
  /// checkpoint and returns the run's result (history per epoch: loss and metrics of
  /// the fit step's kind). No callback runs (those of add_callback are back for the next
  /// fit), no progress bar is drawn. From `opts` only out and input are used; epochs,
  /// steps_per_epoch, validation, callbacks, initial_epoch and resume_from are refused
  /// (std::invalid_argument), as is a sync consistency. One run at a time.
  run_handle begin_steps(dataset::dataset_fn fn, const model::fit_options& opts = {});
  /// Schedules registered step `step` on the next batch of input pipeline `replica`
  /// (-1: of any pipeline, taken as fit takes them, into the next epoch when every
  /// pipeline's data ended) and returns at once. `step`: a name in spec.steps, or "" (or
  /// spec.train_step's name) for the fit step. Throws std::logic_error without a run of
  /// scheduled steps in progress, std::invalid_argument for an unknown step or replica.
  step_handle schedule(const std::string& step = "", int replica = -1);
  /// The steps scheduled from now on take the next epoch's batches (each pipeline from
  /// its start, reshuffled as the dataset does per epoch), once the steps scheduled
  /// before are applied.
  void next_epoch();
  /// True when the step was applied (or found no batch), or the run failed.
  bool done(const step_handle& h);
  /// Waits for the step: what its step function returned ("loss" and any other logs),
  /// or nullopt when it was for a given replica whose data had ended in this epoch.
  /// After a roll-back redid it, the value is still the first one. Throws run_failed
  /// when the run failed, std::logic_error for a handle of another run.
  std::optional<model::logs> fetch(const step_handle& h);
  /// Waits until every step scheduled so far is applied (TensorFlow's
  /// ClusterCoordinator.join); throws run_failed when the run failed.
  void join_steps();
  /// No more steps will be scheduled: the run ends once those scheduled are applied
  /// (join does this itself; this is for polling done(run_handle), as on CAF's test
  /// coordinator).
  void end_steps();

  /// TensorFlow's distribute_datasets_from_function (distributed.hpp): begin_steps on
  /// the pipelines `fn` builds, iterable per pass. Throws std::invalid_argument when a
  /// pipeline's number of batches is not known (an infinite or filtered dataset: use
  /// begin_steps and schedule a number of steps).
  distributed_dataset distribute_dataset(dataset::dataset_fn fn, const model::fit_options& opts = {});
  /// experimental_distribute_dataset: `data` auto-sharded over the pipelines by
  /// spec.auto_shard (each replica's share is then batched by the user's pipeline).
  distributed_dataset distribute_dataset(const dataset::dataset& data, const model::fit_options& opts = {});
  /// strategy.run: registered step `step` ("" the fit step) on the next batch of every
  /// replica; waits for all and returns what each returned.
  per_replica run(const std::string& step, const distributed_element& x);

  // -- blocking wrappers (Keras) ------------------------------------------------------

  model::history fit(dataset::dataset_fn fn, const model::fit_options& opts = {});
  /// A plain dataset is auto-sharded over the dataset shards by spec.auto_shard.
  model::history fit(const dataset::dataset& data, const model::fit_options& opts = {});
  /// Loss and metrics over `data` (split over the shards; every batch once). The future
  /// form is for the test coordinator (run the scheduler, then get()). The callbacks
  /// (add_callback's, then `callbacks`) hear on_test_begin and on_test_end.
  std::map<std::string, double> evaluate(const dataset::dataset& data, const std::vector<callback_ptr>& callbacks = {});
  std::future<std::map<std::string, double>> evaluate_async(const dataset::dataset& data);
  /// Model outputs for every example of `data`, in order. The workers compute them, each
  /// batch once, from one dataset shard that reads `data` in order (labels are not
  /// needed). Throws std::invalid_argument for an infinite dataset. The callbacks
  /// (add_callback's, then `callbacks`) hear on_predict_begin and on_predict_end.
  model::matrix predict(const dataset::dataset& data, const std::vector<callback_ptr>& callbacks = {});
  std::future<model::matrix> predict_async(const dataset::dataset& data);

  /// Changes optimizer hyperparameters ("learning_rate", "beta_1", ...) on every ps
  /// shard; they apply from the next push. A name or value the optimizer refuses changes
  /// nothing on any shard and throws std::invalid_argument naming it.
  void set_hyperparams(const std::map<std::string, double>& values);
  std::future<void> set_hyperparams_async(const std::map<std::string, double>& values);

  /// Elastic membership. restart_worker spawns a new worker for lost worker `id`, which
  /// rejoins under a new generation (its predecessor's late messages are fenced out);
  /// add_worker spawns one more. During a run the newcomer gets tasks at once. The
  /// future holds the generation, or throws std::runtime_error with the coordinator's
  /// refusal (restarting a worker that is alive, an unknown id).
  std::future<uint64_t> restart_worker_async(uint32_t id);
  std::future<uint64_t> add_worker_async();
  uint64_t restart_worker(uint32_t id);
  uint64_t add_worker();

  /// The current values of every variable, assembled from the ps shards (a future: on the
  /// test coordinator, run the scheduler before get()).
  std::future<model::parameter_store> pull_variables();
  /// pull_variables().get(), waiting at most the request timeout.
  model::parameter_store variables();
  /// Rows `ids` of the embedding table `name` (ids.size() x its width), read from the ps
  /// shards that hold them as an evaluation reads them. A dynamic table
  /// (layers::dynamic_embedding), which pull_variables() gives without rows, answers an id
  /// without a row with its initial values and creates nothing. A future as
  /// pull_variables(); throws std::invalid_argument for an unknown or dense variable, an id
  /// outside a fixed table's rows or a negative one.
  std::future<model::matrix> lookup_async(const std::string& name, const std::vector<int64_t>& ids);
  model::matrix lookup(const std::string& name, const std::vector<int64_t>& ids);

  /// Every ps partition's ledger (ledger.hpp): what each holds of every run, for
  /// check_ledgers. The future form is for the test coordinator.
  std::future<std::vector<partition_ledger>> ledgers_async();
  std::vector<partition_ledger> ledgers();

  const model::model& structure() const;
  const cluster_spec& spec() const;
  /// The event stream (drained during join, done, evaluate and predict).
  std::shared_ptr<event_queue> events() const;
  /// Per-shard counters as text ("ps 0: applied 54, duplicates 0, rejected 0, fenced 0,
  /// remembered 3": step ids kept for de-duplication, bounded by the watermark),
  /// one line per shard; "applied" counts the steps in the shard's state, and a shard
  /// rolled back to a checkpoint adds ", restored at step N". The future form is for
  /// the test coordinator.
  std::future<std::string> ps_report_async();
  std::string ps_report();
  /// The live status, as `actortrain status` prints it for a cluster of processes: the
  /// run (epoch, steps applied); each worker's state (busy, idle, lost), generation,
  /// steps, step rate and mean staleness over its last applied steps; each ps shard's
  /// steps and partitions (rows, size, version); the last checkpoint; the recent
  /// failures and recoveries. Safe while fit runs on another thread. The future form is
  /// for the test coordinator.
  std::future<std::string> status_async();
  std::string status();
  /// Runs `cb`'s hooks for every later run, evaluate and predict, on the thread in
  /// fit/join (callbacks.hpp); fit_options::callbacks are for one fit (after these). An
  /// exception from a hook fails the run (join throws it, after the run); at the epoch
  /// gate it also stops the run there.
  void add_callback(callback_ptr cb);

  // -- from callbacks (callbacks.hpp) -------------------------------------------------
  //
  // The epoch gate: during a run with a callback whose waits_for_epoch_end() is true,
  // the coordinator waits at each epoch's end — nothing in flight, every shard at that
  // epoch's state — until the callbacks' on_epoch_end (and the next on_epoch_begin)
  // have run on the application thread, at most the request timeout (then training
  // goes on, with a warning). What they ask for there takes effect before the next
  // epoch's first step.

  /// Ends the run at the next epoch gate (Keras's model.stop_training = true); from a
  /// callback's on_epoch_end it is this epoch. std::logic_error without an epoch gate
  /// (no callback of the run returns true from waits_for_epoch_end).
  void stop_training();
  /// From on_epoch_end: every ps shard keeps a copy, in its memory, of its variables and
  /// optimizer state as this epoch left them (one kept state; a later call replaces it;
  /// a ps restore from a checkpoint drops it). std::logic_error elsewhere.
  void keep_state();
  /// When the run ends (stopped, or after its last epoch) the shards go back to the kept
  /// state, so the variables fit leaves — and the run's final checkpoint — are the kept
  /// ones (fit_result::restored_epoch). std::logic_error without an epoch gate.
  void restore_kept_state_at_end();
  /// A checkpoint of the run (the cluster's format: values, optimizer slots, run state)
  /// into `dir`, keeping its newest `keep`, written as soon as no step is in flight;
  /// from on_epoch_end, it is that epoch's end state. The future holds its path, or
  /// throws std::runtime_error (no run in progress, `dir` is the cluster's own
  /// checkpoint_dir, a write failed: that also ends the run).
  std::future<std::string> checkpoint_async(const std::string& dir, int keep = 1);

  struct impl;
  /// What a cluster of processes supplies instead of spawning (actors/src/cluster/cluster_internals.hpp).
  struct parts;

 private:
  friend struct cluster_internals;  // the simulator's and the node runtime's view (actors/src)
  friend class cluster_training;    // what callbacks see (cluster/cluster_impl.hpp)
  cluster(caf::actor_system& sys, cluster_spec spec, model::model structure, const model::optimizer& opt,
          model::loss_ptr loss, std::vector<model::metric_ptr> metrics, const parts* p);
  std::unique_ptr<impl> impl_;
};

}  // namespace actortrain
