// The embedded cluster's requests besides fit: evaluation, prediction, hyperparameters,
// checkpoints, restarted and added workers, the variables, the ledgers and the status.
#include "cluster_impl.hpp"

namespace actortrain {

namespace {

// Asks the coordinator for one evaluation over `spec.pipelines` (stopped afterwards) and
// hands `convert(summary)` to the application thread.
template <class T, class Convert>
std::future<T> ask_evaluation(caf::actor_system& sys, coordinator_actor coord, caf::timespan timeout, eval_spec spec,
                              Convert convert) {
  auto promise = std::make_shared<std::promise<T>>();
  auto fut = promise->get_future();
  auto shards = spec.pipelines;
  auto stop = [shards] {
    for (auto& a : shards) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  };
  request_from_outside<eval_summary>(
    sys, coord, timeout,
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
    },
    eval_atom::value, std::move(spec));
  return fut;
}

}  // namespace

std::future<std::map<std::string, double>> cluster::evaluate_async(const dataset::dataset& data) {
  auto& d = *impl_;
  if (d.active) throw std::logic_error("cluster::evaluate: a run is in progress");
  eval_spec spec;
  spec.batch_events = !d.eval_hooks.empty();
  d.run_prefetch = 0;  // a fit's input options are that fit's
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

namespace {

std::vector<callback_ptr> call_callbacks(const std::vector<callback_ptr>& every, const std::vector<callback_ptr>& these,
                                         const char* who) {
  for (size_t i = 0; i < these.size(); ++i)
    if (!these[i]) throw std::invalid_argument(fmt::format("{}: callbacks[{}] is null", who, i));
  auto all = every;
  all.insert(all.end(), these.begin(), these.end());
  return all;
}

// Starts `start()` (evaluate_async or predict_async) and waits for it, with `hooks`
// hearing its batches (on_test_batch_* or, when `predicting`, on_predict_batch_*).
template <class T, class Start>
T with_batch_hooks(cluster::impl& d, const std::vector<callback_ptr>& hooks, bool predicting, Start start) {
  d.eval_hooks = hooks;
  d.predicting = predicting;
  std::future<T> fut;
  try {
    fut = start();
    d.wait(fut);
  } catch (...) {
    d.eval_hooks.clear();
    throw;
  }
  d.eval_hooks.clear();
  return fut.get();
}

}  // namespace

std::map<std::string, double> cluster::evaluate(const dataset::dataset& data, const std::vector<callback_ptr>& callbacks) {
  auto& d = *impl_;
  auto cbs = call_callbacks(d.callbacks, callbacks, "cluster::evaluate");
  for (auto& cb : cbs) cb->on_test_begin(*d.view);
  auto r = with_batch_hooks<std::map<std::string, double>>(d, cbs, false, [&] { return evaluate_async(data); });
  for (auto& cb : cbs) cb->on_test_end(*d.view, r);
  return r;
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
  spec.batch_events = !d.eval_hooks.empty();
  spec.pipelines.push_back(spawn_dataset_shard(d.sys, [data](const dataset::input_context&) { return data; }, o));
  auto width = d.structure.output_width();
  return ask_evaluation<model::matrix>(d.sys, d.coordinator, d.call_timeout(), std::move(spec),
                                       [width](eval_summary& r) {
                                         std::vector<model::matrix> parts;
                                         parts.reserve(r.outputs.size());
                                         for (auto& t : r.outputs) parts.push_back(t.take());
                                         return model::stack_rows(parts, width);
                                       });
}

model::matrix cluster::predict(const dataset::dataset& data, const std::vector<callback_ptr>& callbacks) {
  auto& d = *impl_;
  auto cbs = call_callbacks(d.callbacks, callbacks, "cluster::predict");
  for (auto& cb : cbs) cb->on_predict_begin(*d.view);
  auto r = with_batch_hooks<model::matrix>(d, cbs, true, [&] { return predict_async(data); });
  for (auto& cb : cbs) cb->on_predict_end(*d.view);
  return r;
}

std::future<void> cluster::set_hyperparams_async(const std::map<std::string, double>& values) {
  auto& d = *impl_;
  // Every shard holds a copy of this optimizer: what it refuses, they would.
  auto probe = std::make_unique<model::optimizer_set>(*d.optimizer);
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
    detail::ask_for_checkpoint(self, coord, timeout, checkpoint_target{dir}, static_cast<int32_t>(keep), promise);
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
  // Each shard's request names its own partitions: one request per shard, not one
  // message to all.
  auto store = std::make_shared<model::parameter_store>(n);
  auto remaining = std::make_shared<size_t>(ps.size());
  auto failed = std::make_shared<bool>(false);
  for (int p = 0; p < placement->num_ps(); ++p) {
    pull_request req;
    for (auto& part : placement->partitions_on(p)) req.partitions.push_back(partition_key{part.variable, part.index});
    req.f.coordinator_epoch = 0;  // read-only: never raises a shard's fence
    request_from_outside<pull_reply>(
      d.sys, ps[static_cast<size_t>(p)], timeout,
      [=](pull_reply& r) {
        // Copies: the application may write to what it gets back.
        for (auto& pv : r.values) store_partition(*store, *placement, pv, /*share=*/false);
        if (--*remaining == 0 && !*failed) promise->set_value(std::move(*store));
      },
      [=](caf::error& e) {
        if (*failed) return;
        *failed = true;
        promise->set_exception(std::make_exception_ptr(std::runtime_error("pulling variables: " + describe(e))));
      },
      pull_atom::value, std::move(req));
  }
  return fut;
}

model::parameter_store cluster::variables() {
  auto fut = pull_variables();
  if (fut.wait_for(impl_->spec.request_timeout + std::chrono::seconds(1)) != std::future_status::ready)
    throw std::runtime_error("cluster::variables: the ps shards did not answer in time");
  return fut.get();
}

std::future<model::matrix> cluster::lookup_async(const std::string& name, const std::vector<int64_t>& ids) {
  auto& d = *impl_;
  const auto* vp = d.placement->find(name);
  if (!vp) throw std::invalid_argument(fmt::format("cluster::lookup: the model has no variable '{}'", name));
  if (!vp->sparse) throw std::invalid_argument(fmt::format("cluster::lookup: '{}' is not an embedding table", name));
  std::vector<model::row_group> groups;
  try {
    groups = d.placement->group_rows(vp->variable, ids);
  } catch (const std::out_of_range& e) {
    throw std::invalid_argument(fmt::format("cluster::lookup: {}", e.what()));
  }
  auto promise = std::make_shared<std::promise<model::matrix>>();
  auto fut = promise->get_future();
  auto out = std::make_shared<model::matrix>(static_cast<Eigen::Index>(ids.size()), vp->shape.cols);
  if (groups.empty()) {
    promise->set_value(std::move(*out));
    return fut;
  }
  auto remaining = std::make_shared<size_t>(groups.size());
  auto failed = std::make_shared<bool>(false);
  for (auto& g : groups) {
    pull_rows_request req;
    req.f.coordinator_epoch = 0;  // an observer's read: creates no row, raises no fence
    req.variable = vp->variable;
    for (auto p : g.positions) req.ids.push_back(ids[p]);
    auto asked = req.ids.size();
    request_from_outside<rows_reply>(
      d.sys, d.ps[static_cast<size_t>(g.ps)], d.timeout(),
      [=, positions = g.positions](rows_reply& r) {
        if (*failed) return;
        if (!r.rows.value || r.rows.rows() != static_cast<int64_t>(asked) || r.rows.cols() != out->cols()) {
          *failed = true;
          promise->set_exception(std::make_exception_ptr(std::runtime_error(
            fmt::format("cluster::lookup: ps shard {} answered {} rows for {} ids", g.ps, r.rows.rows(), asked))));
          return;
        }
        for (size_t j = 0; j < positions.size(); ++j)
          out->row(static_cast<Eigen::Index>(positions[j])) = r.rows.value->row(static_cast<Eigen::Index>(j));
        if (--*remaining == 0) promise->set_value(std::move(*out));
      },
      [=](caf::error& e) {
        if (*failed) return;
        *failed = true;
        promise->set_exception(std::make_exception_ptr(std::runtime_error("cluster::lookup: " + describe(e))));
      },
      pull_rows_atom::value, std::move(req));
  }
  return fut;
}

model::matrix cluster::lookup(const std::string& name, const std::vector<int64_t>& ids) {
  auto fut = lookup_async(name, ids);
  if (fut.wait_for(impl_->spec.request_timeout + std::chrono::seconds(1)) != std::future_status::ready)
    throw std::runtime_error("cluster::lookup: the ps shards did not answer in time");
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
  gather_stats(d.sys, d.ps, d.timeout(), [promise, pl = d.placement](stats_answers all) {
    std::string out;
    for (size_t i = 0; i < all.size(); ++i) {
      if (!all[i]) {
        out += fmt::format("ps {}: {}\n", i, describe(all[i].error()));
        continue;
      }
      auto& s = *all[i];
      // Steps in the shard's state: those of the checkpoint it was restored to, and since.
      out += fmt::format("ps {}: applied {}, duplicates {}, rejected {}, fenced {}, undone {}, remembered {}{}\n",
                         s.shard, s.base + s.applied, s.duplicates, s.rejected, s.fenced, s.undone, s.remembered,
                         s.base > 0 ? fmt::format(", restored at step {}", s.base) : "");
      // Its parts of dynamic tables: what they hold and what admission and eviction did.
      for (auto& t : s.tables)
        out += fmt::format("ps {}: table {}: {} rows, {:.1f} bytes a row ({:.2f}x its floats), created {}, evicted {}, "
                           "waiting {}, unadmitted reads {}, dropped gradients {}\n",
                           s.shard, pl->variable(t.key.variable).name, t.rows,
                           t.rows ? static_cast<double>(t.bytes) / static_cast<double>(t.rows) : 0.0,
                           t.payload_bytes ? static_cast<double>(t.bytes) / static_cast<double>(t.payload_bytes) : 0.0,
                           t.created, t.evicted, t.waiting, t.unadmitted_reads, t.dropped_gradients);
    }
    promise->set_value(out);
  });
  return fut;
}

std::shared_ptr<const model::placement> cluster_internals::placement_for(const model::model& structure,
                                                                         const cluster_spec& spec) {
  return std::make_shared<model::placement>(model::place(structure.variables(), spec.partitioner.get(), spec.num_ps));
}

void check_job(const job& j, const std::string& who) {
  if (j.structure.empty()) throw std::invalid_argument(who + ": the job has no model");
  if (!j.optimizer) throw std::invalid_argument(who + ": the job has no optimizer");
  if (!j.loss) throw std::invalid_argument(who + ": the job has no loss");
  if (!j.train) throw std::invalid_argument(who + ": the job has no training data (job::train)");
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

std::vector<ledger_variable> ledger_variables(const job& j, int num_ps) {
  std::vector<ledger_variable> out;
  for (auto& v : j.structure.variables()) out.push_back({v.name, v.dynamic ? num_ps : v.shape.rows});
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
  static_cast<exchange_options&>(o) = spec;  // how it pulls and pushes, whole
  // A sync round's next step reads after the round closes, not after its push.
  o.pull_with_push = spec.pull_with_push && spec.consistency.mode() != consistency_mode::kind::sync && !spec.pull_ahead &&
                     spec.pull_every <= 1;
  o.id = id;
  o.structure = structure;
  o.loss = std::move(loss);
  o.train_step = spec.train_step;
  o.steps = spec.steps;
  o.metrics = std::move(metrics);
  o.placement = std::move(placement);
  o.timeout = std::chrono::duration_cast<caf::timespan>(spec.request_timeout);
  o.seed = spec.seed;
  o.detached = !spec.simulated;
  return o;
}

std::unique_ptr<cluster> cluster_internals::make(caf::actor_system& sys, cluster_spec spec, model::model structure,
                                                 const model::optimizer& opt, model::loss_ptr loss,
                                                 std::vector<model::metric_ptr> metrics, const cluster::parts& p) {
  return std::unique_ptr<cluster>(
    new cluster(sys, std::move(spec), std::move(structure), opt, std::move(loss), std::move(metrics), &p));
}

coordinator_actor cluster_internals::coordinator(cluster& c) { return c.impl_->coordinator; }

std::vector<ps_shard_actor> cluster_internals::ps(cluster& c) { return c.impl_->ps; }

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
  if (d.scheduled) d.send_grants(1, d.grants_ended);  // ahead of the run's request: it resumes with them
  auto promise = std::make_shared<std::promise<caf::expected<run_summary>>>();
  auto old = std::move(d.result);
  d.result = promise->get_future();
  d.sys.spawn(detail::ask_for_run, d.coordinator, d.call_timeout(), std::move(spec), promise,
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

std::map<std::string, double> cluster_training::hyperparams() const {
  std::map<std::string, double> out;
  for (auto& [k, v] : c_.impl_->optimizer->hyperparams()) out[k] = v;
  return out;
}

bool cluster_training::has_validation() const { return c_.impl_->active && c_.impl_->opts.validation.has_value(); }

cluster& cluster_of(training& t) {
  auto* view = dynamic_cast<cluster_training*>(&t);
  if (!view) throw std::logic_error("cluster_of: this training is not a cluster's (a trainer's callbacks see the trainer)");
  return view->owner();
}

void cluster::add_callback(callback_ptr cb) {
  if (!cb) throw std::invalid_argument("cluster::add_callback: null callback");
  impl_->callbacks.push_back(cb);
  if (!impl_->active) impl_->run_callbacks_list.push_back(std::move(cb));
}

std::string cluster::ps_report() {
  auto fut = ps_report_async();
  if (fut.wait_for(impl_->spec.request_timeout + std::chrono::seconds(1)) != std::future_status::ready)
    throw std::runtime_error("cluster::ps_report: the ps shards did not answer in time");
  return fut.get();
}

}  // namespace actortrain
