// The embedded cluster: it checks its spec, spawns its actors, and schedules and joins
// runs (cluster.hpp; cluster_impl.hpp has what its files share).
#include "cluster_impl.hpp"
#include <actortrain/actors/cluster/job.hpp>

namespace actortrain {

// Asks the coordinator for a run and hands its outcome to the application thread. The
// run is asked for once every training pipeline has built its dataset and made its
// first batch (each within `build_timeout`; zero: at once). Otherwise a dataset_fn that
// loads files (Fashion-MNIST: 0.3 s of gunzip) runs while the workers already train,
// taking a core from them; replicas on worker tasks are built before they register.
void detail::ask_for_run(caf::event_based_actor* self, coordinator_actor coord, caf::timespan timeout, run_spec req,
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


std::future<uint64_t> detail::ask_to_join(caf::actor_system& sys, coordinator_actor coord, caf::timespan timeout,
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
    join_atom::value, w, id);
  return fut;
}


cluster::cluster(caf::actor_system& sys, cluster_spec spec, model::model structure, const model::optimizer& opt,
                 model::loss_ptr loss, std::vector<model::metric_ptr> metrics)
  : cluster(sys, std::move(spec), std::move(structure), opt, std::move(loss), std::move(metrics), nullptr) {}

namespace {

// The parts of `j`, checked first: a delegating constructor's arguments are built
// before its body runs.
const job& checked(const job& j) {
  check_job(j, "cluster");
  return j;
}

}  // namespace

cluster::cluster(caf::actor_system& sys, const job& j)
  : cluster(sys, checked(j).spec, j.structure, *j.optimizer, j.loss,
            j.metrics ? j.metrics() : std::vector<model::metric_ptr>{}) {
  for (auto& cb : j.callbacks) add_callback(cb);
}

cluster::cluster(caf::actor_system& sys, cluster_spec spec, model::model structure, const model::optimizer& opt,
                 model::loss_ptr loss, std::vector<model::metric_ptr> metrics, const parts* parts)
  : impl_(std::make_unique<impl>(sys, std::move(spec))) {
  auto& d = *impl_;
  d.owner = this;
  d.view = std::make_unique<cluster_training>(*this);
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
  if (d.spec.checkpoint_full_every < 1 || d.spec.checkpoint_full_every > 1000)
    throw std::invalid_argument(fmt::format(
      "cluster: checkpoint_full_every = {} (in [1, 1000]; 1: every checkpoint whole; a restore reads the chain of "
      "increments back to a whole one)",
      d.spec.checkpoint_full_every));
  if (d.spec.checkpoint_interval.count() < 0)
    throw std::invalid_argument(fmt::format("cluster: checkpoint_interval = {} ms < 0", d.spec.checkpoint_interval.count()));
  if (d.spec.poison_limit < 1)
    throw std::invalid_argument(fmt::format("cluster: poison_limit = {} < 1", d.spec.poison_limit));
  if (d.spec.tasks_in_flight < 0)
    throw std::invalid_argument(fmt::format("cluster: tasks_in_flight = {} < 0", d.spec.tasks_in_flight));
  if (d.spec.pull_every < 1)
    throw std::invalid_argument(fmt::format("cluster: pull_every = {} < 1", d.spec.pull_every));
  if (d.spec.pull_every > 1 && !d.spec.consistency.is_async())
    throw std::invalid_argument(fmt::format(
      "cluster: pull_every = {} with consistency '{}': reused parameters would break its staleness guarantee (async "
      "only)", d.spec.pull_every, d.spec.consistency.to_string()));
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
  if (d.spec.push_every > 1 && !d.spec.consistency.is_async())
    throw std::invalid_argument(fmt::format("cluster: push_every = {} with consistency '{}' (async only)",
                                            d.spec.push_every, d.spec.consistency.to_string()));
  if (d.spec.push_every > 1 && d.spec.steps_per_execution % d.spec.push_every != 0)
    throw std::invalid_argument(fmt::format(
      "cluster: push_every = {} needs steps_per_execution a multiple of it (it is {}): a push never spans tasks",
      d.spec.push_every, d.spec.steps_per_execution));
  d.gate = make_gate(d.spec.consistency, d.spec.num_workers);
  // A synchronous round is one step per replica: tasks of one step, whatever the job's
  // steps_per_execution (it changes how often a worker reports, never what is trained).
  if (d.gate->round_size() > 0) d.spec.steps_per_execution = 1;
  if (structure.empty()) throw std::invalid_argument("cluster: empty model");
  if (!loss) throw std::invalid_argument("cluster: no loss");
  d.structure = std::move(structure);
  d.loss = std::move(loss);
  model::check_groups(d.structure, d.spec.variable_groups);
  d.optimizer = std::make_unique<model::optimizer_set>(opt, d.spec.variable_groups);
  for (auto& m : metrics) {
    if (!m) throw std::invalid_argument("cluster: null metric");
    d.metrics.push_back(std::shared_ptr<const model::metric>(std::move(m)));
  }
  d.placement = cluster_internals::placement_for(d.structure, d.spec);
  // A dynamic table lives on the shards alone: a worker holds its batch's rows of it.
  for (size_t v = 0; v < d.structure.variables().size(); ++v) {
    const auto& var = d.structure.variables()[v];
    if (!var.dynamic) continue;
    if (!d.spec.pull_rows)
      throw std::invalid_argument(fmt::format(
        "cluster: the dynamic table '{}' is pulled by row; pull_rows = false would pull it whole", var.name));
    if (!d.structure.compact_rows()[v])
      throw std::invalid_argument(fmt::format(
        "cluster: the dynamic table '{}' must be applied straight to model inputs that nothing else reads", var.name));
  }
  if (!d.spec.metrics_file.empty()) {
    d.metrics_out = std::make_unique<std::ofstream>(d.spec.metrics_file, std::ios::out | std::ios::app);
    if (!*d.metrics_out) throw std::invalid_argument("cluster: cannot open metrics file " + d.spec.metrics_file);
    d.writer = std::make_unique<metrics_writer>(*d.metrics_out);
  }
  // Deadlines kept by the seam, except on the test coordinator (simulated time keeps
  // CAF's per-request timers, which the deterministic runs were recorded with).
  d.seam = std::make_shared<send_seam>(sys, d.spec.faults, /*watch_timeouts=*/!d.spec.simulated);
  if (parts) d.plant = parts->plant;
  if (parts && !parts->ps.empty()) {
    if (static_cast<int>(parts->ps.size()) != d.spec.num_ps)
      throw std::invalid_argument(fmt::format("cluster: {} ps shards given for num_ps = {}", parts->ps.size(), d.spec.num_ps));
    d.ps = parts->ps;
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
  c.seed = d.spec.seed;
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
  c.checkpoint_full_every = d.spec.checkpoint_full_every;
  c.checkpoint_fs = d.spec.checkpoint_fs;
  c.checkpoint_shared = d.spec.checkpoint_shared;
  c.optimizer = std::make_shared<const model::optimizer_set>(*d.optimizer);  // when every worker is lost, wait this long for one to join
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
  return impl_->start_run(std::move(fn), opts, /*scheduled=*/false);
}

// schedule(fn, opts), and begin_steps with `scheduled` (its caller checked its options).
cluster::run_handle cluster::impl::start_run(dataset::dataset_fn fn, const model::fit_options& opts, bool scheduled) {
  auto& d = *this;
  if (d.active) throw std::logic_error("cluster::schedule: a run is in progress (join it first)");
  if (!fn) throw std::invalid_argument("cluster::schedule: no dataset_fn");
  model::check_fit_options(opts);
  if (opts.validation_split != 0)
    throw std::invalid_argument(
      "fit: validation_split is for tensors (Keras refuses it for datasets and dataset_fn too), and a cluster "
      "trains on datasets: split the data with take()/skip() and pass the held-out part as fit_options::validation");
  if (!opts.class_weight.empty())
    throw std::invalid_argument(
      "fit: class_weight: the workers compute the loss the cluster was built with; build the cluster with "
      "model::class_weighted(loss, weights) as its loss instead (unlike Keras's class_weight, that also weights "
      "val_loss and evaluate, and every class in the data needs a weight)");
  if (opts.initial_epoch > 0 && !opts.resume_from.empty())
    throw std::invalid_argument(
      "fit: initial_epoch with resume_from: a resumed run continues at its checkpoint's epoch; give one of them");
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
  d.grants_ended = false;
  spec.on_demand = scheduled ? d.next_run : 0;  // the id this run gets below
  if (scheduled) d.steps_run = d.next_run;
  spec.resume_from = opts.resume_from;
  spec.visitation_log = d.spec.visitation_log;
  spec.epochs = opts.epochs;
  spec.steps_per_epoch = opts.steps_per_epoch;
  spec.initial_epoch = opts.initial_epoch;
  spec.validation_freq = opts.validation_freq;
  spec.validation_epochs = opts.validation_epochs;
  d.callback_error.clear();  // a failed run's is reported by its join, not carried over
  // No callback runs during a run of scheduled steps (as in a Keras custom loop, the loop
  // itself is where the application decides).
  d.run_callbacks_list.clear();
  if (!scheduled) {
    d.run_callbacks_list = d.callbacks;
    d.run_callbacks_list.insert(d.run_callbacks_list.end(), opts.callbacks.begin(), opts.callbacks.end());
  }
  spec.step_begin_events = false;
  for (auto& cb : d.run_callbacks_list) spec.step_begin_events = spec.step_begin_events || cb->wants_batch_begin();
  spec.epoch_gate = false;
  for (auto& cb : d.run_callbacks_list) spec.epoch_gate = spec.epoch_gate || cb->waits_for_epoch_end();
  d.epoch_gate = spec.epoch_gate;
  d.stop_requested = d.restore_requested = false;
  d.begun_at_gate = -1;
  d.dropped_at_start = d.events->dropped();
  d.run_prefetch = opts.input.per_replica_buffer_size;
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
  d.scheduled = scheduled;  // set with active: a start that threw leaves neither
  // The callbacks' start of training and of the first epoch run now, before the run is
  // asked for, so what they set (a schedule's first learning rate) is on every shard
  // before the first step; a resumed run's epoch is known only once it is restored.
  d.train_begun = false;
  if (!d.run_callbacks_list.empty() && opts.resume_from.empty()) {
    d.at_gate = impl::gate_state{};
    d.at_gate.open = true;
    d.each_callback([&](callback& cb) { cb.on_train_begin(*d.view); });
    d.each_callback([&](callback& cb) { cb.on_epoch_begin(*d.view, opts.initial_epoch); });
    d.at_gate.open = false;
    spec.hyperparams = d.at_gate.decision.hyperparams;
    d.start_promises = std::move(d.at_gate.hyper_promises);
    for (size_t i = 0; i < d.at_gate.checkpoints.size(); ++i)
      d.sys.spawn([target = d.at_gate.checkpoints[i], promise = d.at_gate.checkpoint_promises[i]](
                    caf::event_based_actor* self, coordinator_actor coord, caf::timespan timeout) {
        detail::ask_for_checkpoint(self, coord, timeout, target.first, target.second, promise);
      }, d.coordinator, d.timeout());
    d.at_gate = impl::gate_state{};
    d.train_begun = true;
    d.begun_at_gate = opts.initial_epoch;
  }
  d.last_spec = spec;
  d.sys.spawn(detail::ask_for_run, d.coordinator, d.call_timeout(), std::move(spec), promise,
              d.spec.simulated ? caf::timespan{0} : d.timeout());
  return run_handle{d.active};
}

bool cluster::done(const run_handle& h) {
  auto& d = *impl_;
  if (d.active != h.id) return true;
  d.drain(std::chrono::milliseconds(0));
  if (!d.run_ended()) return false;
  d.complete();
  return true;
}

fit_result cluster::join(const run_handle& h) {
  auto& d = *impl_;
  if (d.active == h.id && d.scheduled) end_steps();  // it ends once the steps scheduled are applied
  if (d.active == h.id) {
    d.drain_until([&] { return d.run_ended(); });
    d.complete();
  }
  if (!d.failure.empty()) throw run_failed(d.failure, d.failure_retryable);
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

}  // namespace actortrain
