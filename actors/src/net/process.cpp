#include <actortrain/actors/net/process.hpp>

#include "basp_guard.hpp"
#include "dial.hpp"
#include "../core/ask.hpp"
#include "../cluster/cluster_internals.hpp"
#include "../core/planted.hpp"
#include <actortrain/actors/core/configure.hpp>
#include <actortrain/actors/net/data_plane.hpp>
#include <actortrain/actors/data/dataset_shard.hpp>
#include <actortrain/actors/core/errors.hpp>
#include <actortrain/actors/core/messages.hpp>
#include <actortrain/actors/ps/ps_shard.hpp>
#include <actortrain/actors/core/send_seam.hpp>
#include <actortrain/actors/worker/worker.hpp>
#include <actortrain/model/checkpoint/checkpoint.hpp>
#include <actortrain/model/trainer.hpp>

#include <nlohmann/json.hpp>

#include <caf/io/middleman.hpp>
#include <caf/io/middleman_actor.hpp>
#include <caf/openssl/all.hpp>

#include <condition_variable>
#include <memory>
#include <dlfcn.h>
#include <future>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <fmt/format.h>

#ifndef ACTORTRAIN_VERSION
#define ACTORTRAIN_VERSION "unknown"
#endif

// A work-around for caf::openssl 0.17.6, which leaves OpenSSL's per-thread error queue
// filled after a failed handshake (a peer with a foreign certificate, a plain client).
// All TLS sessions of a process run on the multiplexer thread, so the next session to
// read there without data (SSL_read < 0, which is "want read" on a healthy one) gets the
// stale entry from SSL_get_error and is closed as broken: one refused peer cut a chief's
// healthy connection to its ps tasks. This definition takes the place of OpenSSL's for
// libcaf_openssl (an executable's symbols come first), asks the real one, and, for calls
// from libcaf_openssl only (other OpenSSL users in the process keep their error details),
// empties the queue once an error has been reported as fatal: it belonged to that session.
// tests/cluster/tls_test.sh fails without it.
extern "C" {
struct ssl_st;
__attribute__((noinline)) int SSL_get_error(const ssl_st* s, int ret) {
  using get_error_fn = int (*)(const ssl_st*, int);
  using clear_fn = void (*)();
  static auto real = reinterpret_cast<get_error_fn>(::dlsym(RTLD_NEXT, "SSL_get_error"));
  static auto clear = reinterpret_cast<clear_fn>(::dlsym(RTLD_DEFAULT, "ERR_clear_error"));
  if (!real) return 1;  // SSL_ERROR_SSL: no OpenSSL, no session
  int r = real(s, ret);
  constexpr int ssl_error_ssl = 1, ssl_error_syscall = 5;
  if ((r == ssl_error_ssl || r == ssl_error_syscall) && clear) {
    Dl_info caller{};
    if (::dladdr(__builtin_return_address(0), &caller) && caller.dli_fname &&
        std::strstr(caller.dli_fname, "libcaf_openssl"))
      clear();
  }
  return r;
}
}

namespace actortrain {

namespace {

using retry_atom = caf::atom_constant<caf::atom("retry")>;
using finish_atom = caf::atom_constant<caf::atom("finish")>;
using host_atom = caf::atom_constant<caf::atom("host")>;
using replica_atom = caf::atom_constant<caf::atom("replica")>;

// Telling the other tasks that the job ended: each must acknowledge within this.
constexpr auto farewell_timeout = std::chrono::seconds(5);

caf::timespan span(std::chrono::milliseconds ms) { return std::chrono::duration_cast<caf::timespan>(ms); }

std::string one_line(std::string s) {
  for (auto& c : s)
    if (c == '\n') c = ';';
  while (!s.empty() && (s.back() == ';' || s.back() == ' ')) s.pop_back();
  return s;
}

// The consistency the job runs with: the cluster definition's, else sync for a
// worker-only cluster, else the job's own.
std::string job_consistency(const job& j, const cluster_def& def) {
  if (!def.consistency.empty()) return def.consistency;
  if (def.worker_only()) return "sync";
  return j.spec.consistency;
}

// Without ps tasks the coordinator's task holds the job's ps shards itself.
bool shards_on_coordinator(const cluster_def& def) { return def.ps.empty(); }

int job_num_ps(const job& j, const cluster_def& def) {
  return shards_on_coordinator(def) ? std::max(1, j.spec.num_ps) : static_cast<int>(def.ps.size());
}

// What the main thread waits for; the node actor fills it in.
struct node_box {
  std::mutex mtx;
  std::condition_variable cv;
  size_t joined = 0;                 // remote workers admitted (coordinator's task)
  std::optional<job_outcome> outcome;  // the end of the job (other tasks)
  std::optional<uint64_t> digest;      // a worker's pull of the final parameters
  std::string digest_error;
  bool stopped = false;              // told to stop (ps tasks)
  std::string fatal;                 // a peer this task cannot do without went away

  template <class F>
  void update(F f) {
    {
      std::lock_guard<std::mutex> g{mtx};
      f(*this);
    }
    cv.notify_all();
  }

  // Waits until `pred` holds or `fatal` is set, at most until `deadline`; true if `pred`.
  template <class Pred>
  bool wait(Pred pred, std::optional<std::chrono::steady_clock::time_point> deadline) {
    std::unique_lock<std::mutex> g{mtx};
    auto ready = [&] { return pred(*this) || !fatal.empty(); };
    if (deadline)
      cv.wait_until(g, *deadline, ready);
    else
      cv.wait(g, ready);
    return pred(*this);
  }
};

// -- the node actor: one per process, published at the task's address ---------------

struct pending_join {
  node_registration reg;
  caf::response_promise rp;
};

// What a node actor starts with.
struct node_init {
  task_id task;
  fingerprint fp;
  std::shared_ptr<node_box> box;
  caf::timespan timeout{};
  uint32_t num_workers = 0;
  caf::timespan orphan_wait{};  // ps tasks: how long to outlive a lost coordinator
};

struct node_state : node_init {
  // ps shards this process holds, by index (ps_handle requests wait until they exist).
  std::map<uint32_t, shard_contact> shards;
  bool shards_final = false;
  std::vector<std::pair<uint32_t, caf::response_promise>> shard_waiters;
  // The coordinator's task: admissions in worker-id order (the coordinator's join wants
  // ids without gaps), held until the coordinator exists.
  caf::actor coordinator;
  uint32_t next_id = 0;
  std::map<uint32_t, pending_join> waiting;
  std::map<uint32_t, caf::actor> worker_nodes;
  std::vector<caf::actor> ps_nodes;
  std::vector<caf::actor> evaluators;  // told the outcome, never waited for
  // A worker task: its replica, which pulls the final parameters when the job ends.
  worker_actor replica;
  // Other tasks: the coordinator's node, whose loss ends this task.
  caf::actor watched;
  std::string watched_name;
  // ps tasks outlive a lost coordinator for orphan_wait (a chief restarted with
  // --resume finds them); watch_epoch tells a stale deadline from the current one.
  uint64_t watch_epoch = 0;
};

using node_ptr = caf::stateful_actor<node_state>*;

void answer_shard_waiters(node_ptr self) {
  auto& st = self->state;
  std::vector<std::pair<uint32_t, caf::response_promise>> still;
  for (auto& [index, rp] : st.shard_waiters) {
    auto i = st.shards.find(index);
    if (i != st.shards.end())
      rp.deliver(i->second);
    else if (st.shards_final)
      rp.deliver(make_error(error_code::invalid_request,
                            fmt::format("{} holds no ps shard {}", to_string(st.task), index)));
    else
      still.emplace_back(index, std::move(rp));
  }
  st.shard_waiters = std::move(still);
}

void admit(node_ptr self, pending_join pj) {
  auto& st = self->state;
  auto id = pj.reg.worker;
  auto name = pj.reg.task;
  auto rp = pj.rp;
  auto node = pj.reg.node;
  self->request(st.coordinator, st.timeout, join_atom::value, pj.reg.replica, id)
    .then(
      [self, rp, id, node, name](uint64_t generation) mutable {
        auto& st = self->state;
        st.worker_nodes[id] = node;
        self->monitor(node);
        st.box->update([](node_box& b) { ++b.joined; });
        rp.deliver(generation);
      },
      [rp, name](caf::error& e) mutable {
        rp.deliver(make_error(error_code::invalid_request, fmt::format("{} cannot join: {}", name, describe(e))));
      });
}

// Admits the held registrations whose turn it is.
void admit_in_order(node_ptr self) {
  auto& st = self->state;
  if (!st.coordinator) return;
  for (auto i = st.waiting.find(st.next_id); i != st.waiting.end(); i = st.waiting.find(st.next_id)) {
    auto pj = std::move(i->second);
    st.waiting.erase(i);
    ++st.next_id;
    admit(self, std::move(pj));
  }
}


caf::behavior node_actor(node_ptr self, node_init init) {
  auto& st = self->state;
  static_cast<node_init&>(st) = std::move(init);
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    if (st.watched && dm.source == st.watched.address()) {
      auto text = fmt::format("lost the coordinator ({}): {}", st.watched_name, describe(dm.reason));
      st.watched = nullptr;
      if (st.task.type == task_type::ps) {
        // A new chief may come back and take this shard over; if none does in time, go.
        self->delayed_send(self, st.orphan_wait, retry_atom::value, ++st.watch_epoch, text);
        return;
      }
      st.box->update([&](node_box& b) {
        if (!b.outcome && !b.stopped) b.fatal = text;
      });
      return;
    }
    for (auto i = st.worker_nodes.begin(); i != st.worker_nodes.end(); ++i)
      if (i->second.address() == dm.source) {
        st.worker_nodes.erase(i);  // the coordinator handles the loss of its replica
        return;
      }
  });
  return {
    // The coordinator's task: the live status, from the coordinator.
    [self](report_atom) -> caf::result<status_report> {
      auto& st = self->state;
      if (!st.coordinator)
        return make_error(error_code::invalid_request,
                          fmt::format("{} hosts no coordinator (ask the chief, or worker 0 of a worker-only cluster)",
                                      to_string(st.task)));
      auto rp = self->make_response_promise<status_report>();
      self->request(st.coordinator, st.timeout, report_atom::value)
        .then([rp](status_report& r) mutable { rp.deliver(std::move(r)); },
              [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
      return rp;
    },
    // Any task: a handle to ps shard `index` held here.
    [self](ps_handle_atom, uint32_t index) -> caf::result<shard_contact> {
      auto rp = self->make_response_promise<shard_contact>();
      self->state.shard_waiters.emplace_back(index, rp);
      answer_shard_waiters(self);
      return rp;
    },
    // This process's own runner: the shards it holds (final: no more will come).
    [self](caf::put_atom, std::map<uint32_t, shard_contact> shards) {
      auto& st = self->state;
      st.shards = std::move(shards);
      st.shards_final = true;
      answer_shard_waiters(self);
    },
    // The coordinator's task: ps task `index` came back as a new process (the job's
    // end is told to this one).
    [self](caf::put_atom, uint32_t index, caf::actor ps_node) {
      auto& nodes = self->state.ps_nodes;
      if (index < nodes.size()) nodes[index] = std::move(ps_node);
    },
    // The coordinator's task: the coordinator exists; `local` workers are its own.
    [self](host_atom, caf::actor coordinator, uint32_t local, std::vector<caf::actor> ps_nodes) {
      auto& st = self->state;
      st.coordinator = std::move(coordinator);
      st.next_id = local;
      st.ps_nodes = std::move(ps_nodes);
      admit_in_order(self);
    },
    [self](register_atom, node_registration& reg) -> caf::result<uint64_t> {
      auto& st = self->state;
      if (auto diff = fingerprint_difference(st.fp, reg.fingerprint); !diff.empty()) {
        auto text = fmt::format("{} belongs to another job: {}", reg.task, diff);
        std::cerr << fmt::format("{}: refused a registration: {}\n", to_string(st.task), text);
        return make_error(error_code::invalid_request, std::move(text));
      }
      if (reg.worker >= st.num_workers)
        return make_error(error_code::invalid_request,
                          fmt::format("{}: the cluster has {} worker task(s)", reg.task, st.num_workers));
      if (!reg.replica || !reg.node) return make_error(error_code::invalid_request, reg.task + ": no replica");
      auto rp = self->make_response_promise<uint64_t>();
      if (st.coordinator && reg.worker < st.next_id) {
        admit(self, pending_join{std::move(reg), rp});  // a restarted task joins again
      } else {
        auto id = reg.worker;
        st.waiting[id] = pending_join{std::move(reg), rp};
        admit_in_order(self);
      }
      return rp;
    },
    // Other tasks: whose loss ends this one.
    // A ps task whose coordinator went away and did not come back in time.
    [self](retry_atom, uint64_t epoch, const std::string& text) {
      auto& st = self->state;
      if (epoch != st.watch_epoch || st.watched) return;  // a new coordinator came
      auto why = fmt::format("{}; no coordinator came back within {} s", text,
                             std::chrono::duration_cast<std::chrono::seconds>(st.orphan_wait).count());
      st.box->update([&](node_box& b) {
        if (!b.stopped) b.fatal = why;
      });
    },
    [self](watch_atom, caf::actor coordinator_node, std::string name) {
      auto& st = self->state;
      ++st.watch_epoch;
      st.watched = std::move(coordinator_node);
      st.watched_name = std::move(name);
      self->monitor(st.watched);
    },
    // The coordinator's task: an evaluator wants to learn when the job ends.
    [self](done_atom, caf::actor evaluator_node) { self->state.evaluators.push_back(std::move(evaluator_node)); },
    [self](replica_atom, worker_actor w) { self->state.replica = std::move(w); },
    [self](done_atom, job_outcome& out) -> caf::result<caf::ok_atom> {
      auto& st = self->state;
      if (!st.replica) {
        st.box->update([&](node_box& b) { b.outcome = std::move(out); });
        return caf::ok_atom::value;
      }
      // A worker's own evidence of the values the run ended with: its replica pulls them
      // before this task says goodbye (the ps tasks are stopped only after every worker
      // did).
      auto rp = self->make_response_promise<caf::ok_atom>();
      self->request(st.replica, farewell_timeout - std::chrono::seconds(1), pull_atom::value)
        .then(
          [self, rp, out](uint64_t d) mutable {
            self->state.box->update([&](node_box& b) {
              b.digest = d;
              b.outcome = std::move(out);
            });
            rp.deliver(caf::ok_atom::value);
          },
          [self, rp, out](caf::error& e) mutable {
            self->state.box->update([&](node_box& b) {
              b.digest_error = describe(e);
              b.outcome = std::move(out);
            });
            rp.deliver(caf::ok_atom::value);
          });
      return rp;
    },
    [self](stop_atom) {
      self->state.box->update([](node_box& b) { b.stopped = true; });
      return caf::ok_atom::value;
    },
    // The coordinator's task at the end: tell every worker task the outcome and stop
    // every ps task, each acknowledging within farewell_timeout; answers when all did
    // (or timed out: a task that went away needs no farewell).
    [self](finish_atom, job_outcome& out) -> caf::result<caf::ok_atom> {
      auto& st = self->state;
      // One-way: the chief never waits for an evaluator (TensorFlow's did, forever).
      for (auto& e : st.evaluators) caf::anon_send(e, done_atom::value, out);
      auto rp = self->make_response_promise<caf::ok_atom>();
      // The workers first (each pulls the final parameters before it answers), then the
      // ps tasks (each writes its ledger as it stops).
      auto ps_nodes = st.ps_nodes;
      auto stop_ps = [self, rp, ps_nodes]() mutable {
        auto left = std::make_shared<size_t>(ps_nodes.size());
        if (*left == 0) {
          rp.deliver(caf::ok_atom::value);
          return;
        }
        for (auto& node : ps_nodes)
          self->request(node, farewell_timeout, stop_atom::value)
            .then([rp, left](caf::ok_atom) mutable { if (--*left == 0) rp.deliver(caf::ok_atom::value); },
                  [rp, left](caf::error&) mutable { if (--*left == 0) rp.deliver(caf::ok_atom::value); });
      };
      auto workers_left = std::make_shared<size_t>(st.worker_nodes.size());
      if (*workers_left == 0) {
        stop_ps();
        return rp;
      }
      auto one = [stop_ps, workers_left]() mutable {
        if (--*workers_left == 0) stop_ps();
      };
      for (auto& [id, node] : st.worker_nodes)
        self->request(node, farewell_timeout, done_atom::value, out)
          .then([one](caf::ok_atom) mutable { one(); }, [one](caf::error&) mutable { one(); });
      return rp;
    },
  };
}

// -- talking to other processes from the application thread --------------------------

// A ps task was lost: once its process is back at the same address (within `budget`),
// hands the new shard to the coordinator, which rolls every shard back to the last
// checkpoint. Runs in its own actor; the application thread does not wait.
void replace_shard_when_back(caf::actor_system& sys, task_address addr, uint32_t index, caf::actor coordinator,
                             caf::actor own_node, std::chrono::milliseconds budget, caf::timespan timeout,
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
            caf::anon_send(node, watch_atom::value, own_node, std::string("the coordinator"));
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

[[noreturn]] void fail(const std::string& text) { throw std::runtime_error(text); }

template <class T>
T must(caf::expected<T> x, const std::string& what) {
  if (!x) fail(what + ": " + describe(x.error()));
  return std::move(*x);
}

std::string task_at(const cluster_def& def, const task_id& t) {
  return fmt::format("{} at {}", to_string(t), def.address(t).text());
}

// -- the roles ---------------------------------------------------------------------

struct node_context {
  const node_options& opts;
  const job& j;
  caf::actor_system& sys;
  caf::actor node;
  std::shared_ptr<node_box> box;
  std::ostream& out;
  std::shared_ptr<detail::defect_switch> plant;  // test-only (node_options::plant)
  caf::timespan timeout() const { return span(opts.cluster.request_timeout); }
  caf::timespan connect_budget() const { return span(opts.cluster.connect_timeout); }
};

// Log lines from the actors' and the data plane's threads, one whole line at a time.
// Whole lines to `out`, each after `prefix`, from any thread (one lock for all of them).
data_plane::log_fn log_lines(std::ostream& out, std::string prefix) {
  static std::mutex mtx;
  return [out = &out, prefix = std::move(prefix)](const std::string& line) {
    auto whole = prefix + line + "\n";
    std::lock_guard<std::mutex> g{mtx};
    *out << whole << std::flush;
  };
}

data_plane::log_fn log_to(node_context& cx) { return log_lines(cx.out, cx.opts.log_prefix); }

// A shard of this process as ps_handle answers it: with a data plane unless the cluster
// runs TLS (tensors then stay inside caf::openssl) or it was turned off. The server
// lives in `planes`, which the caller destroys before the shard stops.
shard_contact serve_shard(node_context& cx, caf::actor shard,
                          std::vector<std::unique_ptr<data_plane::server>>& planes) {
  shard_contact c;
  c.shard = shard;
  if (cx.opts.cluster.tls.enabled() || !cx.opts.data_plane) return c;
  planes.push_back(std::make_unique<data_plane::server>(cx.sys, std::move(shard), cx.opts.cluster.request_timeout,
                                                        log_to(cx)));
  auto at = planes.back()->where();
  c.data_port = at.port;
  c.data_token = at.token;
  return c;
}

// The stand-in carrying this worker's tensors to and from shard `index` (null when the
// shard's process serves no data plane).
caf::actor open_plane(caf::actor_system& sys, const shard_contact& c, const std::shared_ptr<send_seam>& seam,
                      std::chrono::milliseconds budget, const data_plane::log_fn& log, size_t index) {
  if (c.data_port == 0) return {};
  auto say = [log, index](const std::string& line) {
    if (log) log(fmt::format("ps shard {}: {}", index, line));
  };
  return data_plane::open(sys, data_plane::endpoint{c.data_port, c.data_token}, c.shard, seam, budget, say);
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
      caf::anon_send(got.node, watch_atom::value, cx.node, task_at(def, cx.opts.task));
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
  auto coordinator = std::make_shared<caf::actor>();
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
    fail(fmt::format("{} of {} worker task(s) registered within {} ms (expected: {})", joined, remote,
                     def.connect_timeout.count(), fmt::join(expected, ", ")));
  }
  job_outcome outcome;
  node_result result;
  try {
    auto opts = cx.j.fit;
    opts.out = &cx.out;
    if (cx.opts.resume) opts.resume_from = def.checkpoint_dir;
    auto r = c->join(c->schedule(cx.j.train, opts));
    result.history = r.history;
    result.steps = r.steps;
    outcome.summary = to_summary(r.history, r.steps);
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
  if (!outcome.error.empty()) fail(outcome.error);
  return result;
}

node_result play_worker(node_context& cx) {
  auto& def = cx.opts.cluster;
  auto me = cx.opts.task;
  auto host_task = def.coordinator_task();
  auto host = must(dial(cx.sys, def.address(host_task), def.connect_timeout), to_string(host_task));
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
    ps.push_back(caf::actor_cast<ps_shard_actor>(c.shard));
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
  o.seam = std::make_shared<send_seam>(cx.sys);
  o.plant = cx.plant;
  // Tensors to and from each shard on its data plane, when its process serves one.
  auto seam = o.seam;
  auto log = log_to(cx);
  auto connect_budget = std::min(def.connect_timeout, std::chrono::milliseconds(5000));
  std::vector<caf::actor> planes;
  for (size_t i = 0; i < contacts.size(); ++i)
    if (auto p = open_plane(cx.sys, contacts[i], seam, connect_budget, log, i)) planes.push_back(p);
  // Replicas of the training pipelines, so batches are made here (TensorFlow's per-worker
  // datasets) instead of crossing the network from the chief; with pipeline affinity
  // this worker reads its own pipeline in order.
  for (int p = 0; p < cluster_internals::num_pipelines(spec); ++p) {
    auto po = cluster_internals::pipeline_options(spec, p);
    po.plant = cx.plant;
    o.sources.push_back(caf::actor_cast<caf::actor>(spawn_dataset_shard(cx.sys, cx.j.train, std::move(po))));
  }
  auto local_sources = o.sources;
  // Each replica builds its dataset when it starts (the job's dataset_fn): have that done,
  // and a first batch made, before registering, so the run does not wait for it (it made
  // the first ~100 steps of a Fashion-MNIST run wait 9 ms each for their batches).
  for (auto& s : local_sources)
    (void)ask<batch_reply>(cx.sys, s, cx.connect_budget(), batch_atom::value, batch_request{fence{}, step_id{}, 0, 0});
  auto w = spawn_worker(cx.sys, std::move(o));
  caf::anon_send(cx.node, replica_atom::value, w);
  // A ps task that is lost comes back as a new process, whose shard the coordinator's
  // tasks then name: dial it again at its address, so that the traffic to it goes
  // directly instead of through the chief (BASP routes through the node a handle came
  // from until there is a direct connection).
  caf::actor redialer;
  if (!shards_on_coordinator(def)) {
    auto addrs = def.ps;
    auto budget = def.request_timeout;
    redialer = cx.sys.spawn([ps, addrs, budget, seam, log, connect_budget](caf::event_based_actor* self) -> caf::behavior {
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
        [self, index_of, opened, seam, log, connect_budget](watch_atom, shard_contact& c, uint64_t k) {
          (*index_of)[c.shard.address()] = static_cast<size_t>(k);
          self->monitor(c.shard);
          if (auto p = open_plane(self->system(), c, seam, connect_budget, log, static_cast<size_t>(k)))
            opened->push_back(p);
        },
      };
    });
  }
  node_registration reg;
  reg.worker = static_cast<uint32_t>(me.index);
  reg.fingerprint = job_fingerprint(cx.j, def);
  reg.replica = caf::actor_cast<caf::actor>(w);
  reg.node = cx.node;
  reg.task = task_at(def, me);
  // The coordinator admits workers in id order: wait as long as the others may take.
  auto admitted = ask<uint64_t>(cx.sys, host, cx.timeout() + cx.connect_budget(), register_atom::value, reg);
  if (!admitted) {
    caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
    if (redialer) caf::anon_send_exit(redialer, caf::exit_reason::user_shutdown);
    for (auto& p : planes) caf::anon_send_exit(p, caf::exit_reason::user_shutdown);
    for (auto& s : local_sources) caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
    fail(fmt::format("{} refused this task: {}", task_at(def, host_task), describe(admitted.error())));
  }
  cx.box->wait([](node_box& b) { return b.outcome.has_value(); }, std::nullopt);
  caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
  if (redialer) caf::anon_send_exit(redialer, caf::exit_reason::user_shutdown);
  for (auto& p : planes) caf::anon_send_exit(p, caf::exit_reason::user_shutdown);
  for (auto& s : local_sources) caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
  std::lock_guard<std::mutex> g{cx.box->mtx};
  if (!cx.box->outcome) fail(cx.box->fatal);
  if (!cx.box->outcome->error.empty()) fail("the run failed: " + cx.box->outcome->error);
  auto r = from_summary(cx.box->outcome->summary);
  r.parameters_digest = cx.box->digest;
  if (!cx.box->digest) r.note = "could not pull the final parameters: " + cx.box->digest_error;
  return r;
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

node_result play_ps(node_context& cx) {
  auto& def = cx.opts.cluster;
  check_shared_directory(cx);
  ps_shard_options o;
  o.index = static_cast<uint32_t>(cx.opts.task.index);
  o.detached = true;
  if (job_consistency(cx.j, def) == "sync") o.policy = hold_for_round();
  auto shard = spawn_ps_shard(cx.sys, *cx.j.optimizer, o);
  std::vector<std::unique_ptr<data_plane::server>> planes;
  caf::anon_send(cx.node, caf::put_atom::value,
                 std::map<uint32_t, shard_contact>{{o.index, serve_shard(cx, caf::actor_cast<caf::actor>(shard), planes)}});
  cx.box->wait([](node_box& b) { return b.stopped; }, std::nullopt);
  // What this shard applied, from its own ledger (also when the job ended badly).
  node_result r;
  auto ledgers = ask<ps_ledgers>(cx.sys, caf::actor_cast<caf::actor>(shard), cx.timeout(), ledger_atom::value);
  caf::anon_send_exit(shard, caf::exit_reason::user_shutdown);
  if (ledgers) {
    if (!cx.opts.ledger_out.empty()) write_ledgers(ledgers->partitions, cx.opts.ledger_out);
    std::tie(r.steps, r.note) = ledger_summary(ledgers->partitions, cx.opts.ledger_out);
  } else {
    r.note = "its ledger could not be read: " + describe(ledgers.error());
  }
  std::lock_guard<std::mutex> g{cx.box->mtx};
  if (!cx.box->stopped) fail(cx.box->fatal);
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
  caf::anon_send(host, done_atom::value, cx.node);
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

void check_job(const job& j) {
  if (j.structure.empty()) throw std::invalid_argument("run_node: the job has no model");
  if (!j.optimizer) throw std::invalid_argument("run_node: the job has no optimizer");
  if (!j.loss) throw std::invalid_argument("run_node: the job has no loss");
  if (!j.train) throw std::invalid_argument("run_node: the job has no training data (job::train)");
}

}  // namespace

cluster_spec node_spec(const job& j, const cluster_def& def) {
  cluster_spec spec = j.spec;
  spec.num_ps = job_num_ps(j, def);
  spec.num_workers = static_cast<int>(def.worker.size());
  spec.consistency = job_consistency(j, def);
  spec.request_timeout = def.request_timeout;
  spec.restart_lost_workers = false;  // a worker task restarts as a process, then registers again
  spec.simulated = false;
  if (!def.checkpoint_dir.empty()) {
    spec.checkpoint_dir = def.checkpoint_dir;
    spec.checkpoint_every = def.checkpoint_every;
    spec.checkpoint_interval = def.checkpoint_interval;
    spec.checkpoint_shared = def.checkpoint_shared;
  }
  return spec;
}

fingerprint job_fingerprint(const job& j, const cluster_def& def) {
  fingerprint f;
  f.emplace_back("job", j.name);
  f.emplace_back("model", one_line(j.structure.describe()));
  f.emplace_back("optimizer", j.optimizer ? j.optimizer->describe() : "");
  f.emplace_back("loss", j.loss ? j.loss->describe() : "");
  f.emplace_back("partitioner", j.spec.partitioner.empty() ? "none" : j.spec.partitioner);
  f.emplace_back("ps shards", std::to_string(job_num_ps(j, def)));
  f.emplace_back("consistency", job_consistency(j, def));
  f.emplace_back("version", ACTORTRAIN_VERSION);
  return f;
}

std::string fingerprint_difference(const fingerprint& mine, const fingerprint& theirs) {
  std::map<std::string, std::string> a(mine.begin(), mine.end()), b(theirs.begin(), theirs.end());
  std::vector<std::string> diffs;
  for (auto& [k, v] : a) {
    auto i = b.find(k);
    if (i == b.end())
      diffs.push_back(fmt::format("{} '{}' here, none there", k, v));
    else if (i->second != v)
      diffs.push_back(fmt::format("{} '{}' here, '{}' there", k, v, i->second));
  }
  for (auto& [k, v] : b)
    if (!a.count(k)) diffs.push_back(fmt::format("{} none here, '{}' there", k, v));
  return fmt::format("{}", fmt::join(diffs, "; "));
}

// A process of the cluster `def`: our types, the middleman, TLS when the cluster has it,
// heartbeats and connection timeouts.
static void configure_for(caf::actor_system_config& cfg, const cluster_def& def, int threads) {
  configure_options co;
  co.load_middleman = true;
  configure(cfg, co);
  if (def.tls.enabled()) {
    // Mutual authentication: any openssl.* key makes caf::openssl require a peer
    // certificate chained to the CA. The files were checked before (caf::openssl hangs
    // on a bad path).
    check_tls_files(def.tls, "tls");
    cfg.load<caf::openssl::manager>();
    cfg.set("openssl.certificate", def.tls.certificate);
    cfg.set("openssl.key", def.tls.key);
    cfg.set("openssl.cafile", def.tls.ca);
  }
  cfg.set("scheduler.max-threads", std::max(1, threads));
  cfg.set("middleman.heartbeat-interval", span(def.heartbeat_interval));
  cfg.set("middleman.connection-timeout", span(def.connection_timeout));
}

// The registry half of shutting down (see run_task): once the process's actors stopped,
// forget them in the registry until it stays empty for 100 ms (at most 2 s).
static void forget_registry(caf::actor_system& sys) {
  auto forget_all = [&] {
    bool any = false;
    for (caf::actor_id id = 1; id <= sys.latest_actor_id(); ++id)
      if (sys.registry().get(id)) {
        sys.registry().erase(id);
        any = true;
      }
    return any;
  };
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (int quiet = 0; quiet < 10 && std::chrono::steady_clock::now() < give_up;) {
    quiet = forget_all() ? 0 : quiet + 1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// The largest payload a BASP message of this job may announce: every variable with two
// optimizer slots (a checkpoint partition shipped to the chief), twice, and room for
// validation batches and the rest; at least 64 MiB.
uint64_t max_basp_payload(const job& j) {
  uint64_t floats = 0;
  for (auto& v : j.structure.variables()) floats += static_cast<uint64_t>(v.shape.size());
  return std::max<uint64_t>(uint64_t{64} << 20, floats * sizeof(float) * 3 * 2 + (uint64_t{16} << 20));
}

node_result run_task(const node_options& opts, const job& j) {
  check_job(j);
  auto& def = opts.cluster;
  const auto& me = opts.task;
  const auto& addr = def.address(me);  // throws for a task that is not in the cluster
  std::ostream& out = opts.out ? *opts.out : std::cout;
  caf::actor_system_config cfg;
  configure_for(cfg, def, opts.threads);
  caf::actor_system sys{cfg};
  auto box = std::make_shared<node_box>();
  node_init init;
  init.task = me;
  init.fp = job_fingerprint(j, def);
  init.box = box;
  init.timeout = span(def.request_timeout);
  init.num_workers = static_cast<uint32_t>(def.worker.size());
  init.orphan_wait = span(def.request_timeout);
  auto node = sys.spawn(node_actor, std::move(init));
  // Shutting down. Every actor here was told to stop; wait until all have (the node
  // actor last: it holds this process's coordinator and shards). Then forget them in the
  // registry: an actor whose handle went to another process stays there until the peer
  // says it dropped its proxy, which a peer that exited never does, and the system
  // empties the registry only after waiting for its detached actors' threads, which wait
  // for their actors to be released. Erasing before every actor stopped would not do: a
  // stopping actor's last message to a peer puts it back.
  auto stop_all = [&] {
    {
      caf::scoped_actor waiter{sys};
      waiter->monitor(node);
      caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
      waiter->receive([](const caf::down_msg&) {}, caf::after(std::chrono::seconds(5)) >> [] {});
    }
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (sys.registry().running() > 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the application thread, at exit
    if (auto n = sys.registry().running(); n > 0)
      std::cerr << fmt::format("{}: warning: {} actor(s) still running 10 s after the end\n", to_string(me), n);
    // An actor's last messages to peers may still wait in the middleman's queue, which
    // puts the sender back into the registry when it writes them: forget again until
    // the registry stays empty for 100 ms (at most 2 s).
    forget_registry(sys);
  };
  // Plain BASP sits behind a guard (basp_guard.hpp): the node listens on a loopback port
  // of the kernel's, the guard at the task's address. It must outlive every connection,
  // so it ends after stop_all.
  std::unique_ptr<detail::basp_guard> guard;
  try {
    if (def.tls.enabled()) {
      auto port = caf::openssl::publish(node, addr.port, addr.host.c_str(), /*reuse=*/true);
      if (!port) fail(fmt::format("{}: cannot listen on {}: {}", to_string(me), addr.text(), describe(port.error())));
    } else {
      auto inner = sys.middleman().publish(node, 0, "127.0.0.1", /*reuse_addr=*/true);
      if (!inner) fail(fmt::format("{}: cannot listen on 127.0.0.1: {}", to_string(me), describe(inner.error())));
      try {
        guard = std::make_unique<detail::basp_guard>(addr.host, addr.port, *inner, max_basp_payload(j),
                                                     log_lines(out, opts.log_prefix + to_string(me) + ": "));
      } catch (const std::runtime_error& e) {
        fail(fmt::format("{}: {}", to_string(me), e.what()));
      }
    }
    node_context cx{opts, j, sys, node, box, out, nullptr};
    if (opts.plant != planted_defect::none) {
      cx.plant = std::make_shared<detail::defect_switch>();
      cx.plant->which = opts.plant;
    }
    node_result r;
    if (me == def.coordinator_task())
      r = host_coordinator(cx);
    else if (me.type == task_type::worker)
      r = play_worker(cx);
    else if (me.type == task_type::evaluator)
      r = play_evaluator(cx);
    else
      r = play_ps(cx);
    stop_all();
    return r;
  } catch (...) {
    stop_all();
    throw;
  }
}

node_flags parse_node_flags(int argc, char** argv, int first) {
  node_flags f;
  auto value = [&](int& i, const std::string& name) -> std::string {
    std::string a = argv[i];
    auto eq = a.find('=');
    if (eq != std::string::npos) return a.substr(eq + 1);
    if (i + 1 >= argc) throw cluster_file_error(fmt::format("{} needs a value", name));
    return argv[++i];
  };
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    auto name = a.substr(0, a.find('='));
    if (name == "--help" || name == "-h")
      f.help = true;
    else if (name == "--resume")
      f.resume = true;
    else if (name == "--no-data-plane")
      f.no_data_plane = true;
    else if (name == "--ledger")
      f.ledger_out = value(i, name);
    else if (name == "--cluster")
      f.cluster_file = value(i, name);
    else if (name == "--task")
      f.task = value(i, name);
    else if (name == "--tls-cert")
      f.tls_cert = value(i, name);
    else if (name == "--tls-key")
      f.tls_key = value(i, name);
    else if (name == "--tls-ca")
      f.tls_ca = value(i, name);
    else if (name == "--threads") {
      auto v = value(i, name);
      if (v.empty() || v.size() > 3 || v.find_first_not_of("0123456789") != std::string::npos || std::stoi(v) < 1)
        throw cluster_file_error(fmt::format("--threads '{}': expected a whole number >= 1", v));
      f.threads = std::stoi(v);
    } else
      throw cluster_file_error(fmt::format("unknown flag '{}' (see --help)", a));
  }
  return f;
}

std::string node_usage(const std::string& program) {
  return fmt::format(
    "usage: {} [--cluster FILE] [--task TYPE:INDEX] [--threads N] [--resume] [--no-data-plane]\n"
    "       [--ledger FILE] [--tls-cert F --tls-key F --tls-ca F]\n"
    "Plays one task of a cluster of processes (every task runs this same program).\n"
    "  --cluster FILE      the cluster (JSON, see actortrain/actors/net/cluster_file.hpp); without it\n"
    "                      the TF_CONFIG environment variable, e.g.\n"
    "                      {{\"cluster\": {{\"worker\": [\"localhost:12345\", \"localhost:23456\"]}},\n"
    "                       \"task\": {{\"type\": \"worker\", \"index\": 0}}}}\n"
    "  --task TYPE:INDEX   the task this process plays (chief, worker, ps), overriding the\n"
    "                      definition's \"task\"\n"
    "  --threads N         scheduler threads of this process (default 2)\n"
    "  --resume            (chief) continue the run checkpointed in the cluster's checkpoint\n"
    "                      directory, e.g. after the chief crashed; the other tasks may live on\n"
    "  --no-data-plane     (ps, worker) move tensors over BASP instead of the tensor data plane\n"
    "                      (a TCP connection of their own per worker and ps; never with TLS)\n"
    "  --ledger FILE       (a task holding ps shards) write what the shards applied, step by\n"
    "                      step, to FILE as it stops, for `actortrain ledger check`\n"
    "  --tls-cert/--tls-key/--tls-ca FILE\n"
    "                      mutual TLS through caf::openssl: this node's certificate and key and\n"
    "                      the cluster's CA (tools/make-certs makes them); needed off loopback\n"
    "Exit status: 0 the job succeeded, 1 it failed, 2 bad flags or cluster definition.\n",
    program);
}

std::string query_status(const node_flags& flags) {
  node_flags f = flags;
  f.resume = false;
  if (f.task.empty()) f.task = "worker:0";  // only for reading the definition: every cluster has one
  auto o = resolve_node(f);
  const auto& def = o.cluster;
  auto chief = def.coordinator_task();
  caf::actor_system_config cfg;
  configure_for(cfg, def, 1);
  caf::actor_system sys{cfg};
  std::string text;
  std::string failure;
  {
    auto node = dial(sys, def.address(chief), def.connect_timeout);
    if (!node) {
      failure = describe(node.error());
    } else {
      auto r = ask<status_report>(sys, *node, span(def.request_timeout), report_atom::value);
      if (r)
        text = fmt::format("{}\n{}", task_at(def, chief), describe(*r));
      else
        failure = fmt::format("{} did not report: {}", task_at(def, chief), describe(r.error()));
    }
  }
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (sys.registry().running() > 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the application thread, at exit
  forget_registry(sys);
  if (!failure.empty()) throw std::runtime_error(failure);
  return text;
}

node_options resolve_node(const node_flags& flags) {
  node_options o;
  std::string source;
  // TLS flags stand in for a tls section (TF_CONFIG has none); the parser checks them.
  tls_files from_flags{flags.tls_cert, flags.tls_key, flags.tls_ca};
  if (!flags.cluster_file.empty()) {
    o.cluster = read_cluster_file(flags.cluster_file, from_flags);
    source = flags.cluster_file;
  } else if (const char* tf = std::getenv("TF_CONFIG"); tf && *tf) {
    o.cluster = parse_cluster_def(tf, "TF_CONFIG", from_flags);
    source = "TF_CONFIG";
  } else {
    throw cluster_file_error("no cluster: give --cluster FILE or set TF_CONFIG");
  }
  bool any_tls = !flags.tls_cert.empty() || !flags.tls_key.empty() || !flags.tls_ca.empty();
  if (o.cluster.tls.enabled()) check_tls_files(o.cluster.tls, any_tls ? std::string("--tls flags") : source);
  if (!flags.task.empty())
    o.task = parse_task(flags.task);
  else if (o.cluster.task)
    o.task = *o.cluster.task;
  else
    throw cluster_file_error(fmt::format("{} names no task: give --task TYPE:INDEX", source));
  const auto& list = o.cluster.tasks(o.task.type);
  if (o.task.index < 0 || static_cast<size_t>(o.task.index) >= list.size())
    throw cluster_file_error(fmt::format("--task {}: the cluster has {} {} task(s)", to_string(o.task), list.size(),
                                         to_string(o.task.type)));
  if (!o.cluster.evaluator.empty() && o.cluster.checkpoint_dir.empty())
    throw cluster_file_error(fmt::format(
      "{}: cluster.evaluator: an evaluator evaluates the chief's checkpoints: give a checkpoint section", source));
  o.threads = flags.threads;
  o.resume = flags.resume;
  o.data_plane = !flags.no_data_plane;
  o.ledger_out = flags.ledger_out;
  if (const char* plant = std::getenv("ACTORTRAIN_PLANT_DEFECT"); plant && *plant) {
    try {
      o.plant = planted_defect_from_string(plant);
    } catch (const std::invalid_argument& e) {
      throw cluster_file_error(std::string("ACTORTRAIN_PLANT_DEFECT: ") + e.what());
    }
  }
  if (o.resume && o.cluster.checkpoint_dir.empty())
    throw cluster_file_error(fmt::format("--resume: {} has no checkpoint section to resume from", source));
  return o;
}

int run_node(int argc, char** argv, const job& j) {
  node_flags flags;
  try {
    flags = parse_node_flags(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  if (flags.help) {
    std::cout << node_usage(argc > 0 ? argv[0] : "program");
    return 0;
  }
  return run_node(flags, j);
}

int run_node(const node_flags& flags, const job& j) {
  node_options o;
  try {
    o = resolve_node(flags);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  if (o.plant != planted_defect::none)
    std::cerr << fmt::format("warning: {}: test-only defect {} planted (ACTORTRAIN_PLANT_DEFECT)\n", to_string(o.task),
                             to_string(o.plant));
  try {
    auto r = run_task(o, j);
    auto& h = r.history;
    for (size_t e = 0; e < h.epochs(); ++e) {
      std::string line = fmt::format("epoch {}/{}:", e + 1, h.epochs());
      for (auto& [k, v] : h.values())
        if (e < v.size()) line += fmt::format(" {} {:.6f}", k, v[e]);
      std::cout << line << "\n";
    }
    if (r.parameters_digest)
      std::cout << fmt::format("{} final parameters: digest {:016x} (pulled from the ps shards)\n", to_string(o.task),
                               *r.parameters_digest);
    if (!r.note.empty()) std::cout << fmt::format("{} {}\n", to_string(o.task), r.note);
    std::cout << fmt::format("{} done: {} steps\n", to_string(o.task), r.steps) << std::flush;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "error: " << to_string(o.task) << ": " << e.what() << "\n";
    return 1;
  }
}

}  // namespace actortrain
