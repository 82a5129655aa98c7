// A cluster's runs of scheduled steps (cluster.hpp: begin_steps, schedule, fetch,
// join_steps) and the distributed-dataset loop on them (distributed.hpp), on the
// application thread: the grants it sends the coordinator and the results it reads from
// the events.
#include "cluster_impl.hpp"

#include <actortrain/actors/cluster/distributed.hpp>

#include <ostream>

namespace actortrain {

void cluster::impl::send_grants(uint64_t first, bool end) {
  step_grants g;
  g.loop = active;
  g.first = first;
  for (uint64_t t = first; t <= grant_fns.size(); ++t) {
    g.steps.push_back(grant_fns[t - 1]);
    g.replicas.push_back(grant_replicas[t - 1]);
  }
  g.end = end;
  // In-process, and before any later request of this thread: nothing to lose or reorder.
  caf::anon_send(coordinator, grant_atom::value, std::move(g));
}

void cluster::impl::wait_steps(const std::function<bool()>& ready) {
  drain_until([&] { return ready() || run_ended(); });
  if (ready()) return;
  complete();
  if (!failure.empty()) throw run_failed(failure, failure_retryable);
  if (ready()) return;
  throw std::logic_error("the run of scheduled steps ended with steps not done");
}

cluster::run_handle cluster::begin_steps(dataset::dataset_fn fn, const model::fit_options& opts) {
  auto& d = *impl_;
  if (d.active) throw std::logic_error("cluster::begin_steps: a run is in progress (join it first)");
  auto refuse = [](const std::string& what) {
    throw std::invalid_argument("begin_steps: " + what +
                                " is a fit option: a custom loop decides its steps and epochs itself");
  };
  model::fit_options plain;
  if (opts.epochs != plain.epochs) refuse("epochs");
  if (opts.steps_per_epoch != 0) refuse("steps_per_epoch");
  if (opts.validation || opts.validation_split != 0) refuse("validation");
  if (!opts.callbacks.empty()) refuse("callbacks");
  if (opts.initial_epoch != 0) refuse("initial_epoch");
  if (!opts.resume_from.empty()) refuse("resume_from");
  if (d.gate->round_size() > 0)
    throw std::invalid_argument("begin_steps: consistency sync forms rounds of every worker's step: schedule steps "
                                "with an asynchronous consistency (async or bounded_staleness(s))");
  model::fit_options o = opts;
  o.verbose = 0;  // no progress bar: the loop prints what it wants (as a Keras custom loop does)
  d.grant_fns.clear();
  d.grant_replicas.clear();
  d.marks = 0;
  d.step_results.clear();
  return d.start_run(std::move(fn), o, /*scheduled=*/true);
}

cluster::step_handle cluster::schedule(const std::string& step, int replica) {
  auto& d = *impl_;
  if (!d.active || !d.scheduled) throw std::logic_error("cluster::schedule(step): no run of scheduled steps (begin_steps)");
  if (d.grants_ended) throw std::logic_error("cluster::schedule(step): the run's steps were ended (end_steps, join)");
  uint32_t fn = UINT32_MAX;
  if (step.empty() || (d.spec.train_step && step == d.spec.train_step.name)) fn = 0;
  for (size_t k = 0; k < d.spec.steps.size() && fn == UINT32_MAX; ++k)
    if (d.spec.steps[k].name == step) fn = static_cast<uint32_t>(k + 1);
  if (fn == UINT32_MAX) {
    std::vector<std::string> names{"\"\" (the fit step)"};
    for (auto& s : d.spec.steps) names.push_back("\"" + s.name + "\"");
    throw std::invalid_argument(
      fmt::format("schedule: no step \"{}\" is registered (cluster_spec::steps has {})", step, fmt::join(names, ", ")));
  }
  if (replica < -1 || replica >= d.num_pipelines())
    throw std::invalid_argument(
      fmt::format("schedule: replica {} (the cluster has input pipelines 0 to {}, or -1 for any)", replica,
                  d.num_pipelines() - 1));
  d.grant_fns.push_back(fn);
  d.grant_replicas.push_back(replica);
  auto ticket = static_cast<uint64_t>(d.grant_fns.size());
  d.send_grants(ticket, false);
  return step_handle{d.active, ticket};
}

void cluster::end_steps() {
  auto& d = *impl_;
  if (!d.active || !d.scheduled) throw std::logic_error("cluster::end_steps: no run of scheduled steps (begin_steps)");
  if (d.grants_ended) return;
  d.grants_ended = true;
  d.send_grants(d.grant_fns.size() + 1, true);
}

void cluster::next_epoch() {
  auto& d = *impl_;
  if (!d.active || !d.scheduled) throw std::logic_error("cluster::next_epoch: no run of scheduled steps (begin_steps)");
  if (d.grants_ended) throw std::logic_error("cluster::next_epoch: the run's steps were ended (end_steps, join)");
  d.grant_fns.push_back(step_grants::epoch_mark);
  d.grant_replicas.push_back(-1);
  ++d.marks;
  d.send_grants(d.grant_fns.size(), false);
}

namespace {

void check_handle(const cluster::impl& d, const cluster::step_handle& h, const char* who) {
  if (h.ticket == 0 || h.ticket > d.grant_fns.size() || (d.active && h.run != d.active) ||
      d.grant_fns[h.ticket - 1] == step_grants::epoch_mark)
    throw std::logic_error(fmt::format("cluster::{}: not a step of the run of scheduled steps in progress", who));
}

}  // namespace

bool cluster::done(const step_handle& h) {
  auto& d = *impl_;
  if (!d.active) return true;
  check_handle(d, h, "done");
  d.drain(std::chrono::milliseconds(0));
  if (d.step_results.count(h.ticket)) return true;
  return d.run_ended();
}

std::optional<model::logs> cluster::fetch(const step_handle& h) {
  auto& d = *impl_;
  if (!d.active) {
    if (!d.failure.empty()) throw run_failed(d.failure, d.failure_retryable);
    if (auto it = d.step_results.find(h.ticket); it != d.step_results.end() && h.run == d.steps_run) return it->second;
    throw std::logic_error("cluster::fetch: not a step of the last run of scheduled steps");
  }
  check_handle(d, h, "fetch");
  d.wait_steps([&d, &h] { return d.step_results.count(h.ticket) > 0; });
  return d.step_results.at(h.ticket);
}

void cluster::join_steps() {
  auto& d = *impl_;
  if (!d.active || !d.scheduled) throw std::logic_error("cluster::join_steps: no run of scheduled steps (begin_steps)");
  auto want = d.grant_fns.size() - d.marks;
  d.wait_steps([&d, want] { return d.step_results.size() >= want; });
}

distributed_dataset cluster::distribute_dataset(dataset::dataset_fn fn, const model::fit_options& opts) {
  auto& d = *impl_;
  if (!fn) throw std::invalid_argument("distribute_dataset: no dataset_fn");
  int64_t most = 0;
  for (int i = 0; i < d.num_pipelines(); ++i) {
    auto ctx = cluster_internals::pipeline_options(d.spec, i).context;
    auto n = fn(ctx).cardinality();
    if (!n.is_known())
      throw std::invalid_argument(fmt::format(
        "distribute_dataset: the number of batches of input pipeline {} is not known ({} dataset): iterate "
        "with begin_steps and a number of schedule() calls instead",
        i, n.kind == dataset::cardinality_kind::infinite ? "an infinite" : "a filtered or otherwise unsized"));
    most = std::max(most, n.n);
  }
  auto h = begin_steps(std::move(fn), opts);
  return distributed_dataset{*this, h, d.num_pipelines(), most};
}

distributed_dataset cluster::distribute_dataset(const dataset::dataset& data, const model::fit_options& opts) {
  auto policy = impl_->spec.auto_shard;
  return distribute_dataset(
    [data, policy](const dataset::input_context& ctx) { return dataset::auto_shard(data, ctx, policy); }, opts);
}

per_replica cluster::run(const std::string& step, const distributed_element& x) {
  auto& d = *impl_;
  if (!d.active || !d.scheduled) throw std::logic_error("cluster::run: no distributed dataset in use (distribute_dataset)");
  (void)x;  // the element stands for the next batch of every replica
  std::vector<step_handle> hs;
  for (int r = 0; r < d.num_pipelines(); ++r) hs.push_back(schedule(step, r));
  per_replica out;
  for (auto& h : hs) out.values.push_back(fetch(h));
  return out;
}

distributed_dataset::iterator distributed_dataset::begin() {
  if (passes_ > 0) c_->next_epoch();
  ++passes_;
  return iterator{distributed_element{0, passes_ - 1}};
}

double reduce(reduce_op op, const per_replica& r, const std::string& key) {
  double sum = 0;
  int n = 0;
  for (size_t i = 0; i < r.values.size(); ++i) {
    if (!r.values[i]) continue;
    auto it = r.values[i]->find(key);
    if (it == r.values[i]->end())
      throw std::invalid_argument(fmt::format("reduce: replica {}'s logs have no \"{}\"", i, key));
    sum += it->second;
    ++n;
  }
  if (op == reduce_op::mean) return n > 0 ? sum / n : 0.0;
  return sum;
}

namespace {

void check_loop_job(const job& j) {
  if (!j.loop) throw std::invalid_argument("train_loop: the job has no loop (job::loop)");
  if (j.fit.epochs < 1) throw std::invalid_argument(fmt::format("train_loop: fit.epochs = {} (>= 1 passes)", j.fit.epochs));
}

model::fit_options loop_options(const job& j) {
  model::fit_options o;
  o.out = j.fit.out;
  o.input = j.fit.input;
  return o;
}

}  // namespace

fit_result train_loop(cluster& c, const job& j, std::ostream& out) {
  check_loop_job(j);
  auto dist = c.distribute_dataset(j.train, loop_options(j));
  for (int epoch = 0; epoch < j.fit.epochs; ++epoch) {
    double total = 0;
    int64_t batches = 0;
    for (const auto& x : dist) {
      total += reduce(reduce_op::mean, c.run(j.loop_step, x));
      ++batches;
    }
    out << fmt::format("Epoch {}, Loss: {:.4f}\n", epoch + 1, batches > 0 ? total / static_cast<double>(batches) : 0.0)
        << std::flush;
  }
  return c.join(dist.handle());
}

cluster::run_handle cluster_internals::schedule_loop(cluster& c, const job& j, dataset::dataset_fn fn) {
  check_loop_job(j);
  auto dist = c.distribute_dataset(std::move(fn), loop_options(j));
  for (int epoch = 0; epoch < j.fit.epochs; ++epoch) {
    for (auto it = dist.begin(); it != dist.end(); ++it)
      for (int r = 0; r < dist.num_replicas(); ++r) c.schedule(j.loop_step, r);
  }
  c.end_steps();
  return dist.handle();
}

}  // namespace actortrain
