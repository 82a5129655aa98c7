// The command line of a node process (run_node, actortrain node): flags, usage, the
// cluster definition and task they resolve to, and `actortrain status`.
#include <iostream>

#include <sys/resource.h>

#include <actortrain/actors/cli/flags.hpp>
#include <actortrain/actors/net/resolvers.hpp>
#include <actortrain/actors/net/sockets.hpp>
#include <actortrain/actors/net/transport.hpp>

#include "../core/ask.hpp"
#include "dial.hpp"
#include "node_internals.hpp"

namespace actortrain {

using detail::apply_caf_options;
using detail::configure_for;
using detail::span;
using detail::task_at;

cli::flags node_flags_parser(const std::string& program, node_flags& f) {
  cli::flags p{program, "Plays one task of a cluster of processes (every task runs this same program)."};
  p.add_choice("resolver", f.resolver,
               "where the cluster comes from: auto (the first of --cluster, TF_CONFIG, a Slurm step, an MPI "
               "launch), file, tf_config, slurm, mpi",
               {"auto", "file", "tf_config", "slurm", "mpi"})
    .add("cluster", f.cluster_file,
         "the cluster (JSON, see actortrain/actors/net/cluster_file.hpp); with --resolver slurm or mpi, the "
         "settings beside it (a cluster file without \"cluster\")")
    .add("jobs", f.jobs,
         "(slurm, mpi) the roles as counts, e.g. chief=1,ps=2,worker=2; ranks take them in name order (chief, "
         "evaluator, ps, worker); default: every rank a worker")
    .add("port-base", f.port_base, "(slurm, mpi) the k-th task of a host listens at this port + k",
         cli::range<int>{1, 65535})
    .add("rendezvous", f.rendezvous,
         "(mpi) a directory every rank sees (shared across hosts): each rank publishes its address there")
    .add("advertise", f.advertise,
         "(mpi) the host the other ranks reach this one at (default: this host's first address off loopback; "
         "127.0.0.1 for all when every rank runs on one host)")
    .add("verbose", f.verbose, "print what the cluster's source held that ActorTrain does not use")
    .add("task", f.task, "TYPE:INDEX, the task this process plays (chief, worker, ps), overriding the definition's task")
    .add("threads", f.threads, "scheduler threads of this process", cli::range<int>{1, 256})
    .add("resume", f.resume,
         "(chief) continue the run checkpointed in the cluster's checkpoint directory, e.g. after the chief "
         "crashed; the other tasks may live on")
    .add("no-data-plane", f.no_data_plane,
         "(ps, worker) move tensors over BASP instead of the tensor data plane (which runs inside TLS when the "
         "cluster has TLS)")
    .add_choice("wire-floats", f.wire_floats,
                "(every task alike) bf16: between hosts (data-plane links without shared memory), gradients and "
                "training pulls travel rounded to bfloat16, half the bytes; overrides the cluster's \"wire_floats\" "
                "(which is f32, every bit, unless it says otherwise)",
                {"f32", "bf16"})
    .add("ledger", f.ledger_out,
         "(a task holding ps shards) write what the shards applied, step by step, to this file as it stops, for "
         "`actortrain ledger check`")
    .add("tls-cert", f.tls_cert, "mutual TLS between the tasks: this node's certificate (PEM)")
    .add("tls-key", f.tls_key, "its key")
    .add("tls-ca", f.tls_ca, "the cluster's CA (tools/make-certs makes all three); needed off loopback")
    .add("secret", f.secret,
         "without TLS: the job's secret, a file of mode 0600 every task of the job reads (actortrain launch makes "
         "one; by hand: (umask 077; head -c 32 /dev/urandom > FILE)), overriding the definition's \"secret\"")
    .pass_caf_options(f.caf_options)
    .footer(
      "CAF's own options go through as --caf.NAME=VALUE and win over the cluster's settings, e.g.\n"
      "--caf.scheduler.max-threads=2 or --caf.middleman.heartbeat-interval=500ms.\n"
      "TF_CONFIG, as TensorFlow's ParameterServerStrategy reads it:\n"
      "  {\"cluster\": {\"chief\": [\"host0:2222\"], \"worker\": [\"host1:2222\"], \"ps\": [\"host2:2222\"]},\n"
      "   \"task\": {\"type\": \"worker\", \"index\": 0}}\n"
      "Without TLS, every task names the same secret file (--secret, or the definition's \"secret\").\n"
      "Exit status (Kubeflow's ExitCode policy): 0 the job succeeded, 1 it failed for good, 2 bad flags,\n"
      "cluster definition or environment, 138 restart this task (a peer it needs was unreachable or lost;\n"
      "the job goes on from its last checkpoint).");
  return p;
}

node_flags parse_node_flags(int argc, char** argv, int first) {
  node_flags f;
  auto p = node_flags_parser(argc > 0 ? argv[0] : "program", f);
  if (!p.parse(argc, argv, first)) {
    f.help = true;
    return f;
  }
  if (!p.positional().empty())
    throw cli::usage_error(fmt::format("unexpected argument '{}' (see --help)", p.positional().front()));
  return f;
}

std::string node_usage(const std::string& program) {
  node_flags f;
  return node_flags_parser(program, f).help();
}

std::string query_status(const node_flags& flags) {
  node_flags f = flags;
  f.resume = false;
  if (f.task.empty()) f.task = "worker:0";  // only for reading the definition: every cluster has one
  auto o = resolve_node(f);
  const auto& def = o.cluster;
  auto chief = def.coordinator_task();
  // A cluster that is not running refuses the connection: say so now, instead of
  // retrying for connect_ms as a task starting beside its peers does.
  try {
    net::connect_to(def.address(chief).host, def.address(chief).port, std::chrono::milliseconds(2000));
  } catch (const net::socket_error& e) {
    if (e.code() == ECONNREFUSED)
      throw std::runtime_error(fmt::format("nothing listens at {} ({}'s address): is the cluster running?",
                                           def.address(chief).text(), to_string(chief)));
  }
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
  resolve_options ro;
  ro.kind = parse_resolver(flags.resolver);
  ro.cluster_file = flags.cluster_file;
  // TLS flags stand in for a tls section (TF_CONFIG has none); the parser checks them.
  ro.tls_from_flags = tls_files{flags.tls_cert, flags.tls_key, flags.tls_ca};
  ro.jobs = flags.jobs;
  ro.port_base = static_cast<uint16_t>(flags.port_base);
  ro.rendezvous_dir = flags.rendezvous;
  ro.advertise = flags.advertise;
  auto found = resolve_cluster(ro, resolver_inputs::of_this_process());
  o.cluster = std::move(found.cluster);
  const std::string& source = found.source;
  if (!flags.secret.empty()) o.cluster.secret_file = flags.secret;
  bool any_tls = !flags.tls_cert.empty() || !flags.tls_key.empty() || !flags.tls_ca.empty();
  if (o.cluster.tls.enabled()) check_tls_files(o.cluster.tls, any_tls ? std::string("--tls flags") : source);
  if (!flags.task.empty())
    o.task = parse_task(flags.task);
  else if (found.task)
    o.task = *found.task;
  else
    throw cluster_file_error(fmt::format("{} names no task: give --task TYPE:INDEX", source));
  const auto& list = o.cluster.tasks(o.task.type);
  bool off_map_evaluator = o.task == task_id{task_type::evaluator, 0} && list.empty();
  if (!off_map_evaluator && (o.task.index < 0 || static_cast<size_t>(o.task.index) >= list.size()))
    throw cluster_file_error(fmt::format("--task {}: the cluster has {} {} task(s)", to_string(o.task), list.size(),
                                         to_string(o.task.type)));
  found.cluster = o.cluster;  // for the start-up line, with the task's own address
  o.started_from = describe_resolution(found, o.task);
  if ((!o.cluster.evaluator.empty() || off_map_evaluator) && o.cluster.checkpoint_dir.empty())
    throw cluster_file_error(fmt::format(
      "{}: cluster.evaluator: an evaluator evaluates the chief's checkpoints: give a checkpoint section", source));
  o.threads = flags.threads;
  o.caf_options = flags.caf_options;
  {
    caf::actor_system_config scratch;  // to refuse a bad CAF option now, naming it
    configure_for(scratch, o.cluster, o.threads);
    apply_caf_options(scratch, o.caf_options);
  }
  o.resume = flags.resume;
  o.data_plane = !flags.no_data_plane;
  if (!flags.wire_floats.empty()) o.cluster.wire_bf16 = flags.wire_floats == "bf16";
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
    return exit_status::usage;
  }
  if (flags.help) return exit_status::ok;  // printed
  return run_node(flags, j);
}

int run_node(const node_flags& flags, const job& j) {
  node_options o;
  try {
    o = resolve_node(flags);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return exit_status::usage;
  }
  std::cout << o.started_from << "\n" << std::flush;
  if (flags.verbose)
    for (auto& note : o.cluster.notes) std::cerr << "note: " << note << "\n";
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
    // What the task needed at most, for sizing machines (a ps task's tables, a worker's
    // batches): the kernel's high-water mark of its resident memory.
    struct rusage use {};
    if (::getrusage(RUSAGE_SELF, &use) == 0)
      std::cout << fmt::format("{} peak resident memory: {:.0f} MB\n", to_string(o.task),
                               static_cast<double>(use.ru_maxrss) / 1024.0);
    std::cout << fmt::format("{} done: {} steps\n", to_string(o.task), r.steps) << std::flush;
    return exit_status::ok;
  } catch (const detail::retryable_failure& e) {
    std::cerr << "error: " << to_string(o.task) << ": " << e.what() << " (exit " << exit_status::retry
              << ": restart this task)\n";
    return exit_status::retry;
  } catch (const std::exception& e) {
    std::cerr << "error: " << to_string(o.task) << ": " << e.what() << "\n";
    return exit_status::failed;
  }
}

}  // namespace actortrain