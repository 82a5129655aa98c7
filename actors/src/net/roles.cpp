// The roles a task of a cluster of processes plays: the chief (the coordinator, dataset
// shards and, worker-only, ps shards and a replica), a worker, a ps task, an evaluator.
#include <actortrain/actors/core/configure.hpp>
#include <actortrain/actors/core/send_seam.hpp>
#include <actortrain/actors/data/dataset_shard.hpp>
#include <actortrain/actors/ps/ps_shard.hpp>
#include <actortrain/model/checkpoint/checkpoint.hpp>
#include <actortrain/model/trainer.hpp>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <thread>

#include "../cluster/cluster_internals.hpp"
#include "../core/ask.hpp"
#include "dial.hpp"
#include <actortrain/actors/net/sockets.hpp>
#include "node_internals.hpp"

namespace actortrain::detail {

namespace {

// -- talking to other processes from the application thread --------------------------

// A ps task was lost: once its process is back at the same address (within `budget`),
// hands the new shard to the coordinator, which rolls every shard back to the last
// checkpoint. Runs in its own actor; the application thread does not wait.
void replace_shard_when_back(caf::actor_system& sys, task_address addr, uint32_t index, coordinator_actor coordinator,
                             node_actor own_node, std::chrono::milliseconds budget, caf::timespan timeout,
                             std::ostream* log, std::string prefix) {
  auto deadline = std::chrono::steady_clock::now() + budget;
  sys.spawn([=](caf::event_based_actor* self) {
    auto say = [log, prefix](const std::string& text) {
      if (log) *log << prefix << text << std::endl;
    };
    fetch_shard_from(self, addr, index, budget, deadline, timeout, [=](caf::expected<located_shard> back) {
      if (!back) {
        say(fmt::format("ps shard {} did not come back: {}", index, describe(back.error())));
        self->quit();
        return;
      }
      auto node = back->node;
      self->request(coordinator, timeout, replace_atom::value, index, back->contact.shard)
        .then(
          [=](caf::ok_atom) {
            self->send(own_node, caf::put_atom::value, index, node);
            caf::anon_send(node, watch_atom::value, caf::actor_cast<caf::actor>(own_node), std::string("the coordinator"));
            say(fmt::format("ps shard {} is back at {}", index, addr.text()));
            self->quit();
          },
          [=](caf::error& e) {
            say(fmt::format("the coordinator refused the new ps shard {}: {}", index, describe(e)));
            self->quit();
          });
    });
  });
}

data_plane::log_fn log_to(node_context& cx) { return log_lines(cx.out, cx.opts.log_prefix); }

// -- the roles --------------------------------------------------------------------------

// A shard of this process as ps_handle answers it: with a data plane unless it was
// turned off. Plain (loopback), it listens on 127.0.0.1; with TLS (hosts that may be
// others), where the task listens and as a TLS server. The server lives in `planes`,
// which the caller destroys before the shard stops.
shard_contact serve_shard(node_context& cx, ps_shard_actor shard,
                          std::vector<std::unique_ptr<data_plane::server>>& planes) {
  shard_contact c;
  c.shard = shard;
  if (!cx.opts.data_plane) return c;
  const auto& def = cx.opts.cluster;
  data_plane::server::limits l;
  const auto& own = def.address(cx.opts.task);
  if (def.tls.enabled()) {
    l.tls = data_plane::tls_context(def.tls.certificate, def.tls.key, def.tls.ca);
    l.listen_host = net::listen_host(own.host);
  }
  l.max_frame_bytes = max_message_bytes(cx.j);
  l.bf16 = def.wire_bf16;
  // Who dials a ps's data plane: the worker tasks, and the chief and evaluator with replicas.
  auto caps = caps_for(cx.opts.cluster.worker.size() + cx.opts.cluster.evaluator.size() + cx.opts.cluster.chief.size());
  l.max_greeting = caps.pending;
  l.max_connections = caps.open;
  planes.push_back(std::make_unique<data_plane::server>(cx.sys, std::move(shard), cx.opts.cluster.request_timeout, l,
                                                        log_to(cx)));
  auto at = planes.back()->where();
  c.data_port = at.port;
  c.data_token = at.token;
  c.data_host = def.tls.enabled() ? own.host : std::string("127.0.0.1");
  return c;
}

// The stand-in carrying this worker's tensors to and from shard `index` (null when the
// shard's process serves no data plane).
caf::actor open_plane(caf::actor_system& sys, const cluster_def& def, const shard_contact& c,
                      const std::shared_ptr<shard_routes>& routes, std::chrono::milliseconds budget,
                      const data_plane::log_fn& log, size_t index, uint64_t max_frame) {
  if (c.data_port == 0) return {};
  data_plane::endpoint at;
  at.port = c.data_port;
  at.token = c.data_token;
  at.max_frame_bytes = max_frame;
  if (!c.data_host.empty()) at.host = c.data_host;
  if (def.tls.enabled()) at.tls = data_plane::tls_context(def.tls.certificate, def.tls.key, def.tls.ca);
  at.bf16 = def.wire_bf16;
  auto say = [log, index](const std::string& line) {
    if (log) log(fmt::format("ps shard {}: {}", index, line));
  };
  return data_plane::open(sys, at, c.shard, routes, budget, say);
}

std::vector<model::metric_ptr> fresh_metrics(const job& j) {
  return j.metrics ? j.metrics() : std::vector<model::metric_ptr>{};
}


run_summary to_summary(const model::history& h, int64_t steps) {
  run_summary s;
  for (auto& [k, v] : h.values()) {
    s.keys.push_back(k);
    s.values.push_back(v);
  }
  s.steps = steps;
  return s;
}

node_result from_summary(const run_summary& s) {
  node_result r;
  for (size_t i = 0; i < s.keys.size() && i < s.values.size(); ++i)
    for (auto v : s.values[i]) r.history.add(s.keys[i], v);
  r.steps = s.steps;
  return r;
}

// What a task that holds ps shards says at its end: the steps of the newest run its
// ledgers hold (on every partition), and where it wrote them. The steps are the node's
// result (`ps:0 done: N steps`).
std::pair<int64_t, std::string> ledger_summary(const std::vector<partition_ledger>& ls, const std::string& written) {
  auto runs = ledger_runs(ls);
  uint64_t run = runs.empty() ? 0 : *runs.rbegin();
  auto violations = applied_twice(ls);
  auto fewest = steps_on_every_partition(ls, run);
  auto note = fmt::format("ledger: run {}: {} step(s) on each of {} partition(s), {} applied twice{}", run, fewest,
                          ls.size(), violations, written.empty() ? "" : "; written to " + written);
  return {static_cast<int64_t>(fewest), note};
}

// Writes the ledgers to `path` as one JSON document (a new file renamed into place).
void write_ledgers(const std::vector<partition_ledger>& ls, const std::string& path) {
  auto tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << ledgers_to_json(ls).dump() << "\n";
    if (!out) fail(fmt::format("cannot write the ledgers to {}", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    fail(fmt::format("cannot rename {} to {}: {}", tmp, path, std::strerror(errno)));
}

// checkpoint.shared: this task writes its partitions into the directory itself. Found
// out now, not at the first checkpoint, when it cannot.
void check_shared_directory(const node_context& cx) {
  auto& def = cx.opts.cluster;
  if (!def.checkpoint_shared || def.checkpoint_dir.empty()) return;
  auto& fs = model::posix_file_system();
  auto probe = def.checkpoint_dir + "/.probe-" + to_string(cx.opts.task);
  for (auto& c : probe)
    if (c == ':') c = '-';
  model::io_status st = fs.create_dirs(def.checkpoint_dir);
  if (st.ok()) st = fs.write_file(probe, std::string("actortrain\n"));
  if (st.ok()) st = fs.remove_all(probe);
  if (!st.ok())
    fail(fmt::format("checkpoint.shared: {} cannot write into {}: {}", to_string(cx.opts.task), def.checkpoint_dir,
                     st.message()));
}

}  // namespace

std::string log_stamp(const std::string& line, std::chrono::system_clock::time_point now) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm utc{};
  gmtime_r(&secs, &utc);
  const char* level = "INFO ";
  auto has = [&](const char* w) { return line.find(w) != std::string::npos; };
  if (line.rfind("error", 0) == 0 || has(": error")) level = "ERROR";
  else if (line.rfind("warning", 0) == 0 || has(": warning") || has("closed") || has("refused") || has("failed"))
    level = "WARN ";
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z {} ", utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday,
                     utc.tm_hour, utc.tm_min, utc.tm_sec, static_cast<int>(ms % 1000), level);
}

// Log lines from the actors' and the data plane's threads, one whole line at a time.
// Whole lines to `out`, each after `prefix`, from any thread (one lock for all of them),
// stamped with the time (UTC, ISO 8601, milliseconds) and a level (log_stamp).
data_plane::log_fn log_lines(std::ostream& out, std::string prefix) {
  static std::mutex mtx;
  return [out = &out, prefix = std::move(prefix)](const std::string& line) {
    auto whole = log_stamp(line) + prefix + line + "\n";
    std::lock_guard<std::mutex> g{mtx};
    *out << whole << std::flush;
  };
}


// The chief, or worker 0 of a worker-only cluster: the coordinator, the dataset shards,
// (worker-only) the ps shards and a replica of its own.
node_result host_coordinator(node_context& cx) {
  auto& def = cx.opts.cluster;
  auto spec = node_spec(cx.j, def);
  cluster::parts parts;
  std::vector<caf::actor> ps_nodes;
  if (!shards_on_coordinator(def)) {
    for (size_t i = 0; i < def.ps.size(); ++i) {
      task_id t{task_type::ps, static_cast<int>(i)};
      auto got = must(fetch_shard(cx.sys, def.ps[i], static_cast<uint32_t>(i), def.connect_timeout, cx.timeout()),
                      "asking " + task_at(def, t) + " for its ps shard");
      caf::anon_send(got.node, watch_atom::value, cx.node_as_peer(), task_at(def, cx.opts.task));
      ps_nodes.push_back(got.node);
      parts.ps.push_back(got.contact.shard);
    }
  }
  // Worker 0 hosting the coordinator (no chief) is also a replica.
  parts.local_workers = def.coordinator_task().type == task_type::worker ? 1 : 0;
  parts.pipeline_affinity = true;  // the worker tasks read their own pipelines
  parts.plant = cx.plant;
  // A lost ps task comes back as a new process at its address (restarted by hand or by
  // `actortrain launch --restart-failed`); the coordinator pauses until then, at most
  // request_timeout (then the run fails naming the shard).
  auto coordinator = std::make_shared<coordinator_actor>();
  parts.ps_lost = [&cx, &def, coordinator](uint32_t i) {
    if (i >= def.ps.size()) return;
    replace_shard_when_back(cx.sys, def.ps[i], i, *coordinator, cx.node, def.request_timeout, cx.timeout(), &cx.out,
                            cx.opts.log_prefix);
  };
  auto c = cluster_internals::make(cx.sys, spec, cx.j.structure, *cx.j.optimizer, cx.j.loss, fresh_metrics(cx.j), parts);
  *coordinator = cluster_internals::coordinator(*c);
  for (auto& cb : cx.j.callbacks) c->add_callback(cb);
  std::map<uint32_t, shard_contact> local;
  std::vector<std::unique_ptr<data_plane::server>> planes;  // before the shards stop
  if (shards_on_coordinator(def)) {
    auto shards = cluster_internals::ps(*c);
    for (size_t i = 0; i < shards.size(); ++i) local[static_cast<uint32_t>(i)] = serve_shard(cx, shards[i], planes);
  }
  caf::anon_send(cx.node, caf::put_atom::value, local);
  caf::anon_send(cx.node, host_atom::value, cluster_internals::coordinator(*c), static_cast<uint32_t>(parts.local_workers),
                 ps_nodes);
  // Every worker task registers before the run starts.
  size_t remote = def.worker.size() - static_cast<size_t>(parts.local_workers);
  auto deadline = std::chrono::steady_clock::now() + def.connect_timeout;
  if (!cx.box->wait([remote](node_box& b) { return b.joined >= remote; }, deadline)) {
    size_t joined = 0;
    {
      std::lock_guard<std::mutex> g{cx.box->mtx};
      joined = cx.box->joined;
    }
    std::vector<std::string> expected;
    for (size_t i = static_cast<size_t>(parts.local_workers); i < def.worker.size(); ++i)
      expected.push_back(task_at(def, task_id{task_type::worker, static_cast<int>(i)}));
    fail_retryable(fmt::format("{} of {} worker task(s) registered within {} ms (expected: {})", joined, remote,
                     def.connect_timeout.count(), fmt::join(expected, ", ")));
  }
  job_outcome outcome;
  node_result result;
  try {
    auto opts = cx.j.fit;
    opts.out = &cx.out;
    if (cx.opts.resume) opts.resume_from = def.checkpoint_dir;
    if (cx.j.loop && cx.opts.resume)
      throw std::invalid_argument("--resume: a custom loop (--loop) starts over; it does not resume a run");
    auto r = cx.j.loop ? train_loop(*c, cx.j, cx.out) : c->join(c->schedule(cx.j.train, opts));
    result.history = r.history;
    result.steps = r.steps;
    outcome.summary = to_summary(r.history, r.steps);
  } catch (const run_failed& e) {
    outcome.error = e.what();
    outcome.retryable = e.retryable();
  } catch (const std::exception& e) {
    outcome.error = e.what();
  }
  if (shards_on_coordinator(def)) {
    try {
      auto ls = c->ledgers();
      if (!cx.opts.ledger_out.empty()) write_ledgers(ls, cx.opts.ledger_out);
      result.note = ledger_summary(ls, cx.opts.ledger_out).second;
    } catch (const std::exception& e) {
      result.note = std::string("the ps shards' ledgers could not be read: ") + e.what();
    }
  }
  // Tell the others before this process goes (each acknowledges, or is gone).
  ask<caf::ok_atom>(cx.sys, cx.node, std::chrono::duration_cast<caf::timespan>(farewell_timeout * 3), finish_atom::value,
                    outcome);
  if (!outcome.error.empty()) outcome.retryable ? fail_retryable(outcome.error) : fail(outcome.error);
  return result;
}

// A worker task's membership: the coordinator's task dialed, the ps shards found, the
// replica and its pipelines spawned and registered, until the run ends or the
// coordinator's task is lost. `dial_budget` bounds reaching the coordinator's task.
struct coordinator_lost : retryable_failure {
  using retryable_failure::retryable_failure;
};

// The actors a membership spawned, told to exit however it ends (a refusal, a lost
// coordinator, the run's end), so that a rejoin starts from nothing left behind.
struct session_actors {
  std::vector<caf::actor> all;
  ~session_actors() {
    for (auto& a : all)
      if (a) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  }
};

node_result worker_session(node_context& cx, std::chrono::milliseconds dial_budget, bool& admitted_once) {
  auto& def = cx.opts.cluster;
  auto me = cx.opts.task;
  auto host_task = def.coordinator_task();
  auto host = must(dial(cx.sys, def.address(host_task), dial_budget), to_string(host_task));
  caf::anon_send(cx.node, watch_atom::value, host, task_at(def, host_task));
  // The ps shards, each over its own connection (so tensors never pass the chief).
  int num_ps = job_num_ps(cx.j, def);
  std::vector<ps_shard_actor> ps;
  std::vector<shard_contact> contacts;
  for (int i = 0; i < num_ps; ++i) {
    shard_contact c;
    if (shards_on_coordinator(def)) {
      c = must(ask<shard_contact>(cx.sys, host, cx.timeout(), ps_handle_atom::value, static_cast<uint32_t>(i)),
               "asking " + task_at(def, host_task) + " for ps shard " + std::to_string(i));
    } else {
      task_id t{task_type::ps, i};
      c = must(fetch_shard(cx.sys, def.ps[static_cast<size_t>(i)], static_cast<uint32_t>(i), def.connect_timeout,
                           cx.timeout()),
               "asking " + task_at(def, t) + " for ps shard " + std::to_string(i))
            .contact;
    }
    ps.push_back(c.shard);
    contacts.push_back(std::move(c));
  }
  // The replica and its pipelines exactly as the chief's cluster would build them.
  auto spec = node_spec(cx.j, def);
  std::vector<std::shared_ptr<const model::metric>> metrics;
  for (auto& m : fresh_metrics(cx.j)) metrics.push_back(std::move(m));
  auto o = cluster_internals::worker_options_for(spec, static_cast<uint32_t>(me.index), cx.j.structure, cx.j.loss,
                                                 std::move(metrics),
                                                 cluster_internals::placement_for(cx.j.structure, spec));
  o.ps = ps;
  o.seam = std::make_shared<send_seam>(cx.sys, nullptr, /*watch_timeouts=*/true);
  o.plant = cx.plant;
  // Tensors to and from each shard on its data plane, when its process serves one.
  auto routes = std::make_shared<shard_routes>();
  o.routes = routes;
  auto log = log_to(cx);
  auto connect_budget = std::min(def.connect_timeout, std::chrono::milliseconds(5000));
  const uint64_t max_frame = max_message_bytes(cx.j);  // what a reply may announce
  session_actors spawned;  // declared before the handles it ends
  for (size_t i = 0; i < contacts.size(); ++i)
    if (auto p = open_plane(cx.sys, def, contacts[i], routes, connect_budget, log, i, max_frame))
      spawned.all.push_back(p);
  // Replicas of the training pipelines, so batches are made here (TensorFlow's per-worker
  // datasets) instead of crossing the network from the chief; with pipeline affinity
  // this worker reads its own pipeline in order.
  for (int p = 0; p < cluster_internals::num_pipelines(spec); ++p) {
    auto po = cluster_internals::pipeline_options(spec, p);
    if (cx.j.fit.input.per_replica_buffer_size > 0) po.prefetch = cx.j.fit.input.per_replica_buffer_size;
    po.plant = cx.plant;
    o.sources.push_back(spawn_dataset_shard(cx.sys, cx.j.train, std::move(po)));
  }
  auto local_sources = o.sources;
  for (auto& s : local_sources) spawned.all.push_back(caf::actor_cast<caf::actor>(s));
  // Each replica builds its dataset when it starts (the job's dataset_fn): have that done,
  // and a first batch made, before registering, so the run does not wait for it (it made
  // the first ~100 steps of a Fashion-MNIST run wait 9 ms each for their batches).
  for (auto& s : local_sources)
    (void)ask<batch_reply>(cx.sys, s, cx.connect_budget(), batch_atom::value, batch_request{fence{}, step_id{}, 0, 0});
  auto w = spawn_worker(cx.sys, std::move(o));
  spawned.all.push_back(caf::actor_cast<caf::actor>(w));
  caf::anon_send(cx.node, replica_atom::value, w);
  // A ps task that is lost comes back as a new process, whose shard the coordinator's
  // tasks then name: dial it again at its address, so that the traffic to it goes
  // directly instead of through the chief (BASP routes through the node a handle came
  // from until there is a direct connection).
  caf::actor redialer;
  if (!shards_on_coordinator(def)) {
    auto addrs = def.ps;
    auto budget = def.request_timeout;
    redialer = cx.sys.spawn([ps, addrs, budget, routes, log, connect_budget, max_frame,
                             def](caf::event_based_actor* self) -> caf::behavior {
      auto index_of = std::make_shared<std::map<caf::actor_addr, size_t>>();
      // The data planes opened to shards that came back end with the redialer.
      auto opened = std::make_shared<std::vector<caf::actor>>();
      self->attach_functor([opened](const caf::error&) {
        for (auto& p : *opened) caf::anon_send_exit(p, caf::exit_reason::user_shutdown);
      });
      for (size_t i = 0; i < ps.size(); ++i) {
        (*index_of)[ps[i].address()] = i;
        self->monitor(ps[i]);
      }
      self->set_down_handler([self, index_of, addrs, budget](caf::down_msg& dm) {
        auto i = index_of->find(dm.source);
        if (i == index_of->end()) return;
        auto k = i->second;
        index_of->erase(i);
        // Each redial in an actor of its own (dial_from's retries are its behavior), linked:
        // it ends with the redialer.
        auto parent = caf::actor_cast<caf::actor>(self);
        self->spawn<caf::linked>([parent, addr = addrs[k], budget, k](caf::event_based_actor* d) {
          fetch_shard_from(d, addr, static_cast<uint32_t>(k), budget, std::chrono::steady_clock::now() + budget,
                           std::chrono::seconds(10), [d, parent, k](caf::expected<located_shard> back) {
                             // Not back in time: the coordinator fails the run.
                             if (back) d->send(parent, watch_atom::value, back->contact, static_cast<uint64_t>(k));
                             d->quit();
                           });
        });
      });
      return {
        // Watch the shard that came back too.
        [self, index_of, opened, routes, log, connect_budget, max_frame, def](watch_atom, shard_contact& c,
                                                                               uint64_t k) {
          (*index_of)[c.shard.address()] = static_cast<size_t>(k);
          self->monitor(c.shard);
          if (auto p = open_plane(self->system(), def, c, routes, connect_budget, log, static_cast<size_t>(k), max_frame))
            opened->push_back(p);
        },
      };
    });
  }
  spawned.all.push_back(redialer);
  node_registration reg;
  reg.worker = static_cast<uint32_t>(me.index);
  reg.fingerprint = job_fingerprint(cx.j, def);
  reg.replica = w;
  reg.node = cx.node_as_peer();
  reg.task = task_at(def, me);
  // The coordinator admits workers in id order: wait as long as the others may take,
  // but not for a coordinator's task that is gone (a chief killed while this task waits
  // its turn): that is a lost coordinator, rejoined as any other.
  log(fmt::format("registering with {} (it admits workers in id order)", task_at(def, host_task)));
  auto admitted = ask_while_up<uint64_t>(cx.sys, host, cx.timeout() + cx.connect_budget(), register_atom::value, reg);
  if (!admitted && admitted.error() == caf::sec::request_receiver_down)
    throw coordinator_lost(fmt::format("lost the coordinator ({}) while waiting to be admitted",
                                       task_at(def, host_task)));
  if (!admitted) {
    auto text = fmt::format("{} refused this task: {}", task_at(def, host_task), describe(admitted.error()));
    // Another job's fingerprint or a bad registration is final; a coordinator that did
    // not answer in time may answer a restarted task.
    if (code_of(admitted.error()) == error_code::invalid_request) fail(text);
    fail_retryable(text);
  }
  admitted_once = true;
  cx.box->wait([](node_box& b) { return b.outcome.has_value(); }, std::nullopt);
  std::lock_guard<std::mutex> g{cx.box->mtx};
  if (!cx.box->outcome) {
    auto why = std::move(cx.box->fatal);
    cx.box->fatal.clear();  // for the next membership
    throw coordinator_lost(why);
  }
  if (auto& o = *cx.box->outcome; !o.error.empty())
    o.retryable ? fail_retryable("the run failed: " + o.error) : fail("the run failed: " + o.error);
  auto r = from_summary(cx.box->outcome->summary);
  r.parameters_digest = cx.box->digest;
  if (!cx.box->digest) r.note = "could not pull the final parameters: " + cx.box->digest_error;
  return r;
}

// A worker task: members of the run until it ends. A worker whose coordinator's task is
// lost (a partition longer than timeouts.connection_ms, a chief killed) is fenced out
// by the coordinator and its steps re-queued; it dials the coordinator's task again for
// up to timeouts.request_ms (as a ps task waits for a coordinator) and rejoins as a new
// generation, with a new replica. Nothing answers in that time: it exits 138.
node_result play_worker(node_context& cx) {
  auto& def = cx.opts.cluster;
  auto log = log_to(cx);
  std::optional<std::chrono::steady_clock::time_point> rejoin_until;
  for (;;) {
    auto budget = def.connect_timeout;
    if (rejoin_until)
      budget = std::chrono::duration_cast<std::chrono::milliseconds>(*rejoin_until - std::chrono::steady_clock::now());
    bool admitted = false;
    try {
      return worker_session(cx, std::max(budget, std::chrono::milliseconds(1)), admitted);
    } catch (const coordinator_lost& e) {
      rejoin_until = std::chrono::steady_clock::now() + def.request_timeout;
      log(fmt::format("{}; rejoining for up to {} ms", e.what(), def.request_timeout.count()));
    } catch (const std::runtime_error& e) {
      // Within a rejoin, what failed may be the partition still in place, or a
      // coordinator that has not yet noticed this task's loss ("already a member").
      // The run's own end (admitted, then told it failed) is never retried.
      if (admitted || !rejoin_until || std::chrono::steady_clock::now() >= *rejoin_until) throw;
      log(fmt::format("rejoining: {}", e.what()));
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  }
}

node_result play_ps(node_context& cx) {
  auto& def = cx.opts.cluster;
  check_shared_directory(cx);
  ps_shard_options o;
  o.index = static_cast<uint32_t>(cx.opts.task.index);
  o.detached = true;
  if (job_consistency(cx.j, def).mode() == consistency_mode::kind::sync) o.policy = hold_for_round();
  o.groups = cx.j.spec.variable_groups;
  o.compensation = cx.j.spec.compensation;
  o.variables = cx.j.structure.variables();
  auto shard = spawn_ps_shard(cx.sys, *cx.j.optimizer, o);
  std::vector<std::unique_ptr<data_plane::server>> planes;
  caf::anon_send(cx.node, caf::put_atom::value,
                 std::map<uint32_t, shard_contact>{{o.index, serve_shard(cx, shard, planes)}});
  cx.box->wait([](node_box& b) { return b.stopped; }, std::nullopt);
  // The shard's own count of the requests that reached it on the data plane.
  for (auto& p : planes) log_to(cx)(fmt::format("data plane: {} request(s) served", p->requests()));
  // What this shard applied, from its own ledger (also when the job ended badly).
  node_result r;
  // Its own counts of what it refused and what roll-backs took back.
  auto s = ask<ps_stats>(cx.sys, shard, cx.timeout(), stats_atom::value);
  if (s)
    log_to(cx)(fmt::format("{}: {} step(s) in its state (restored at step {}), {} undone by roll-backs, {} push(es) "
                           "fenced out, {} duplicate(s)",
                           to_string(cx.opts.task), s->base + s->applied, s->base, s->undone, s->fenced,
                           s->duplicates));
  // What its parts of dynamic tables hold, and what admission and eviction did.
  if (s)
    for (auto& t : s->tables)
      log_to(cx)(fmt::format("{}: table {} partition {}: {} rows, {} bytes ({:.2f}x the floats of its rows and slots), "
                             "created {}, evicted {}, waiting {}, unadmitted reads {}, dropped gradients {}",
                             to_string(cx.opts.task), cx.j.structure.variables().at(static_cast<size_t>(t.key.variable)).name,
                             t.key.index, t.rows, t.bytes,
                             t.payload_bytes ? static_cast<double>(t.bytes) / static_cast<double>(t.payload_bytes) : 0.0,
                             t.created, t.evicted, t.waiting, t.unadmitted_reads, t.dropped_gradients));
  auto ledgers = ask<ps_ledgers>(cx.sys, shard, cx.timeout(), ledger_atom::value);
  caf::anon_send_exit(shard, caf::exit_reason::user_shutdown);
  if (ledgers && ledgers->partitions.empty()) {
    // It never held a partition (restarted into a run that had ended, say): a file from
    // it would replace what an earlier life of this task wrote at the same path.
    r.note = "it held no partition; no ledger written";
  } else if (ledgers) {
    if (!cx.opts.ledger_out.empty()) write_ledgers(ledgers->partitions, cx.opts.ledger_out);
    std::tie(r.steps, r.note) = ledger_summary(ledgers->partitions, cx.opts.ledger_out);
  } else {
    r.note = "its ledger could not be read: " + describe(ledgers.error());
  }
  std::lock_guard<std::mutex> g{cx.box->mtx};
  if (!cx.box->stopped) fail_retryable(cx.box->fatal);  // no coordinator came back
  // The job's end, as the other tasks end: a failed run fails this task too.
  if (cx.box->outcome && !cx.box->outcome->error.empty())
    cx.box->outcome->retryable ? fail_retryable("the run failed: " + cx.box->outcome->error)
                               : fail("the run failed: " + cx.box->outcome->error);
  return r;
}

// The evaluator: a sidecar that evaluates every newly committed checkpoint of the
// chief's directory on the job's validation data, prints the result and appends it to
// <checkpoint dir>/evaluator.jsonl, until the job ends (the chief tells it, or goes
// away); then it evaluates the last checkpoint once more if it is new.
node_result play_evaluator(node_context& cx) {
  auto& def = cx.opts.cluster;
  if (!cx.j.fit.validation) fail("the job has no validation data (job::fit.validation) to evaluate on");
  auto host_task = def.coordinator_task();
  auto host = must(dial(cx.sys, def.address(host_task), def.connect_timeout), to_string(host_task));
  caf::anon_send(cx.node, watch_atom::value, host, task_at(def, host_task));
  caf::anon_send(host, done_atom::value, cx.node_as_peer());
  model::trainer t{cx.j.structure, cx.j.optimizer->clone(), cx.j.loss, cx.j.spec.seed};
  for (auto& m : fresh_metrics(cx.j)) t.add_metric(std::move(m));
  auto& fs = model::posix_file_system();
  std::ofstream log;  // opened at the first result (the chief creates the directory)
  int64_t done_step = -1;
  node_result result;
  auto evaluate_newest = [&] {
    auto latest = model::latest_checkpoint(fs, def.checkpoint_dir);
    if (!latest || latest->step <= done_step) return;
    try {
      t.restore(model::read_checkpoint(fs, latest->path));
    } catch (const model::checkpoint_error& e) {
      // Pruned while read (the chief keeps the newest few): the next one will do.
      cx.out << cx.opts.log_prefix << "evaluator: skipped " << latest->path << ": " << e.what() << std::endl;
      return;
    }
    auto values = t.evaluate(*cx.j.fit.validation);
    done_step = latest->step;
    std::string line = fmt::format("evaluator: checkpoint at step {}:", latest->step);
    nlohmann::json j{{"event", "evaluation"}, {"step", latest->step}, {"checkpoint", latest->path}};
    for (auto& [k, v] : values) {
      line += fmt::format(" val_{} {:.6f}", k, v);
      j["values"]["val_" + k] = v;
      result.history.add("val_" + k, v);
    }
    cx.out << cx.opts.log_prefix << line << std::endl;
    if (!log.is_open()) log.open(def.checkpoint_dir + "/evaluator.jsonl", std::ios::app);
    if (log) log << j.dump() << "\n" << std::flush;
    result.steps = latest->step;
  };
  auto ended = [](node_box& b) { return b.outcome.has_value(); };
  while (!cx.box->wait(ended, std::chrono::steady_clock::now() + std::chrono::seconds(1))) {
    {
      std::lock_guard<std::mutex> g{cx.box->mtx};
      if (!cx.box->fatal.empty()) break;  // the chief went away: evaluate what it left
    }
    evaluate_newest();
  }
  evaluate_newest();
  return result;
}

}  // namespace actortrain::detail
