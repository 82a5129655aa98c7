// A task of a cluster of processes: its actor system (TLS, heartbeats), its node actor
// published behind the BASP guard, the role it plays, and a clean shutdown
// (process.hpp; node_internals.hpp has what the node's files share).
#include <actortrain/actors/net/process.hpp>
#include <actortrain/actors/net/transport.hpp>

#include "basp_guard.hpp"

#include <sys/resource.h>
#include "node_internals.hpp"
#include "dial.hpp"
#include "../core/ask.hpp"
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
#include <caf/io/basp_broker.hpp>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <future>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
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

namespace actortrain {

namespace {

using namespace detail;

std::string one_line(std::string s) {
  for (auto& c : s)
    if (c == '\n') c = ';';
  while (!s.empty() && (s.back() == ';' || s.back() == ' ')) s.pop_back();
  return s;
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
    if (def.checkpoint_full_every > 0) spec.checkpoint_full_every = static_cast<int>(def.checkpoint_full_every);
    if (def.checkpoint_keep > 0) spec.checkpoint_keep = static_cast<int>(def.checkpoint_keep);
  }
  return spec;
}

fingerprint job_fingerprint(const job& j, const cluster_def& def) {
  fingerprint f;
  f.emplace_back("job", j.name);
  f.emplace_back("model", one_line(j.structure.describe()));
  f.emplace_back("optimizer", j.optimizer ? model::optimizer_set{*j.optimizer, j.spec.variable_groups}.describe() : "");
  f.emplace_back("loss", j.loss ? j.loss->describe() : "");
  f.emplace_back("train step", j.spec.train_step ? j.spec.train_step.name : "built-in");
  std::vector<std::string> steps;
  for (auto& s : j.spec.steps) steps.push_back(s.name);
  f.emplace_back("registered steps", steps.empty() ? std::string{"none"} : fmt::format("{}", fmt::join(steps, ", ")));
  f.emplace_back("custom loop", j.loop ? (j.loop_step.empty() ? std::string{"the fit step"} : j.loop_step) : std::string{"no"});
  f.emplace_back("partitioner", j.spec.partitioner ? j.spec.partitioner->describe() : "none");
  f.emplace_back("ps shards", std::to_string(job_num_ps(j, def)));
  f.emplace_back("consistency", job_consistency(j, def).to_string());
  f.emplace_back("compensation", j.spec.compensation.to_string());
  // Every task rounds or none does: a ps set to f32 must not take rounded gradients.
  f.emplace_back("wire floats", def.wire_bf16 ? "bf16" : "f32");
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
void detail::configure_for(caf::actor_system_config& cfg, const cluster_def& def, int threads) {
  configure_options co;
  co.load_middleman = true;
  configure(cfg, co);
  if (def.tls.enabled()) {
    // Mutual TLS, ours (tls.hpp): the guard is the server of every connection, the dialer
    // the client; CAF's BASP sees the plaintext. The files ride in the system's config,
    // where dial() finds them; their PEM is read now, so that a bad file fails here.
    check_tls_files(def.tls, "tls");
    try {
      tls::context_for({def.tls.certificate, def.tls.key, def.tls.ca});
    } catch (const std::runtime_error& e) {
      throw cluster_file_error(fmt::format("tls: {}", e.what()));
    }
    caf::put(cfg.content, tls_certificate_option, def.tls.certificate);  // not options of CAF
    caf::put(cfg.content, tls_key_option, def.tls.key);
    caf::put(cfg.content, tls_ca_option, def.tls.ca);
  } else {
    // Plain BASP: members prove the job's secret before CAF reads a byte of theirs
    // (job_auth.hpp); the key rides in the system's config, where dial() finds it.
    if (def.secret_file.empty())
      throw cluster_file_error(
        "secret: a cluster without TLS needs the job's secret, a file of mode 0600 named by the cluster file's "
        "\"secret\" (actortrain launch makes one; by hand: (umask 077; head -c 32 /dev/urandom > job.secret)). "
        "Without it any local process could join the job");
    caf::put(cfg.content, job_key_option, key_to_hex(read_job_secret(def.secret_file)));  // not an option of CAF
  }
  cfg.set("scheduler.max-threads", std::max(1, threads));
  cfg.set("middleman.heartbeat-interval", span(def.heartbeat_interval));
  cfg.set("middleman.connection-timeout", span(def.connection_timeout));
}

void detail::apply_caf_options(caf::actor_system_config& cfg, const std::vector<std::string>& options) {
  for (auto& o : options) {
    // CAF 0.17 spells its options without the "caf." that the flags carry (as CAF 0.18 does).
    std::istringstream no_ini;
    auto err = cfg.parse(caf::actor_system_config::string_list{"--" + o.substr(6)}, no_ini);
    if (!err && cfg.remainder.empty()) continue;
    auto text = err ? cfg.render(err) : std::string{};
    throw cluster_file_error(text.find("not_an_option") != std::string::npos || !err
                               ? fmt::format("{}: CAF has no option {}", o, o.substr(6, o.find('=') - 6))
                               : fmt::format("{}: CAF cannot read this value ({})", o, text));
  }
}

// The registry half of shutting down (see run_task; transport.hpp).
void forget_registry(caf::actor_system& sys) {
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

size_t stop_and_forget(caf::actor_system& sys, const caf::actor& last, std::chrono::milliseconds bound) {
  {
    caf::scoped_actor waiter{sys};
    waiter->monitor(last);
    caf::anon_send_exit(last, caf::exit_reason::user_shutdown);
    waiter->receive([](const caf::down_msg&) {}, caf::after(std::chrono::seconds(5)) >> [] {});
  }
  auto until = std::chrono::steady_clock::now() + bound;
  while (sys.registry().running() > 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the application thread, at exit
  auto left = sys.registry().running();
  // An actor's last messages to peers may still wait in the middleman's queue, which
  // puts the sender back into the registry when it writes them: forget_registry forgets
  // again until the registry stays empty for 100 ms.
  forget_registry(sys);
  return left;
}

uint64_t detail::max_message_bytes(const job& j) {
  uint64_t floats = 0;
  for (auto& v : j.structure.variables()) floats += static_cast<uint64_t>(v.shape.size());
  return std::max<uint64_t>(uint64_t{64} << 20, floats * sizeof(float) * 3 * 2 + (uint64_t{16} << 20));
}

// What the BASP guard allows a node of this job (basp_guard.hpp): messages up to the
// job's largest, and for connections not yet past their handshake, a few per task of the
// cluster (each task dials each other at most once or twice at a time).
static detail::basp_guard::limits guard_limits(const cluster_def& def, uint64_t max_message) {
  detail::basp_guard::limits l;
  l.max_payload = max_message;
  auto caps = caps_for(def.chief.size() + def.ps.size() + def.worker.size() + def.evaluator.size());
  l.max_pending = caps.pending;
  l.max_connections = caps.open;
  l.handshake_deadline = def.connect_timeout;
  if (def.tls.enabled())
    l.tls = detail::tls::context_for({def.tls.certificate, def.tls.key, def.tls.ca});
  else
    l.key = read_job_secret(def.secret_file);
  return l;
}

void configure_transport(caf::actor_system_config& cfg, const cluster_def& def, int threads, uint64_t max_message) {
  configure_for(cfg, def, threads);
  caf::put(cfg.content, max_message_option, static_cast<int64_t>(max_message));
}

// Each guarded connection goes to CAF's BASP broker, which serves it as a connection it
// accepted at `port` itself (the guard's thread hands it over).
guarded_listener::guarded_listener(caf::actor_system& sys, caf::strong_actor_ptr served, const cluster_def& def,
                                   const std::string& host, uint16_t port, uint64_t max_message, log_fn log) {
  // Looked up (made) here, once, on the application thread before any connection.
  auto basp = sys.middleman().named_broker<caf::io::basp_broker>(caf::atom("BASP"));
  // The port CAF records as the one it published at (the guard's, once it listens).
  auto published = std::make_shared<std::atomic<uint16_t>>(port);
  auto hand_over = [&sys, basp, whom = std::move(served), published](net::unique_fd fd) {
    auto scribe = sys.middleman().backend().new_scribe(fd.get());
    fd.release();  // the scribe owns it now
    caf::anon_send(basp, caf::publish_atom::value, std::move(scribe), published->load(), whom,
                   std::set<std::string>{});
  };
  guard_ = std::make_unique<detail::basp_guard>(host, port, guard_limits(def, max_message), hand_over, std::move(log));
  published->store(guard_->port());
}

guarded_listener::~guarded_listener() = default;

uint16_t guarded_listener::port() const { return guard_->port(); }

caf::expected<caf::actor> dial_actor(caf::actor_system& sys, const task_address& addr, std::chrono::milliseconds budget) {
  return dial(sys, addr, budget);
}

// Descriptors: the soft limit (often 1,024) up to the hard one, so that a flood of
// connections meets the guard's caps, not EMFILE.
static void raise_descriptor_limit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &r);
  }
}

node_result run_task(const node_options& opts, const job& j) {
  check_job(j, "run_node");
  raise_descriptor_limit();
  net::ignore_sigpipe();  // a node owns its process: a vanished peer is a write error
  auto& def = opts.cluster;
  const auto& me = opts.task;
  // An evaluator outside the cluster map (as Kubeflow runs it) listens nowhere: it dials
  // the chief, which answers on that connection. Every other task must be in the map.
  const bool listens = !(me.type == task_type::evaluator && !def.listed(me));
  const task_address addr = listens ? def.address(me) : task_address{};
  std::ostream& out = opts.out ? *opts.out : std::cout;
  caf::actor_system_config cfg;
  configure_transport(cfg, def, opts.threads, max_message_bytes(j));
  apply_caf_options(cfg, opts.caf_options);
  caf::actor_system sys{cfg};
  auto box = std::make_shared<node_box>();
  node_init init;
  init.task = me;
  init.fp = job_fingerprint(j, def);
  init.box = box;
  init.timeout = span(def.request_timeout);
  init.num_workers = static_cast<uint32_t>(def.worker.size());
  init.orphan_wait = span(def.request_timeout);
  auto node = spawn_node_actor(sys, std::move(init));
  // Shutting down. Every actor here was told to stop; wait until all have (the node
  // actor last: it holds this process's coordinator and shards). Then forget them in the
  // registry: an actor whose handle went to another process stays there until the peer
  // says it dropped its proxy, which a peer that exited never does, and the system
  // empties the registry only after waiting for its detached actors' threads, which wait
  // for their actors to be released. Erasing before every actor stopped would not do: a
  // stopping actor's last message to a peer puts it back.
  auto stop_all = [&] {
    if (auto n = stop_and_forget(sys, caf::actor_cast<caf::actor>(node), std::chrono::seconds(10)); n > 0)
      std::cerr << fmt::format("{}: warning: {} actor(s) still running 10 s after the end\n", to_string(me), n);
  };
  // BASP sits behind a guard (basp_guard.hpp): the guard is the only listener (the TLS
  // server too), and hands each member's connection to CAF's BASP broker as one end of a
  // Unix socket pair. It must outlive every connection, so it ends after stop_all.
  std::unique_ptr<guarded_listener> guard;
  try {
    if (listens) try {
        guard = std::make_unique<guarded_listener>(sys, caf::actor_cast<caf::strong_actor_ptr>(node), def,
                                                   net::listen_host(addr.host), addr.port, max_message_bytes(j),
                                                   log_lines(out, opts.log_prefix + to_string(me) + ": "));
      } catch (const std::runtime_error& e) {
        fail(fmt::format("{}: {}", to_string(me), e.what()));
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

}  // namespace actortrain
