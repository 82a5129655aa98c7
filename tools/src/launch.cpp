// `actortrain node` and `actortrain launch`: the registered examples as clusters of
// processes. `node` plays one task through actortrain::run_node; `launch` starts every
// task of a cluster on 127.0.0.1 (free ports, a cluster file in a fresh directory),
// prefixes each process's output lines with its task, restarts crashed worker tasks when
// asked, stops all on Ctrl-C or SIGTERM, and exits non-zero when the job fails.

#include "launch.hpp"

#include "fault_schedule.hpp"
#include "restart_policy.hpp"

#include "flags.hpp"
#include <actortrain/actors/core/consistency.hpp>
#include <actortrain/actors/jobs/jobs.hpp>
#include <actortrain/actors/net/process.hpp>
#include <actortrain/actors/net/sockets.hpp>
#include <actortrain/model/checkpoint/checkpoint.hpp>
#include <actortrain/model/checkpoint/file_system.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace actortrain::tools {

namespace {

// Splits argv[first..] at "--": (before, after).
std::pair<std::vector<std::string>, std::vector<std::string>> split_at_dashes(int argc, char** argv, int first) {
  std::vector<std::string> before, after;
  bool past = false;
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (!past && a == "--") {
      past = true;
      continue;
    }
    (past ? after : before).push_back(a);
  }
  return {before, after};
}

std::string example_list() {
  std::string out;
  for (auto& e : jobs::registered()) out += fmt::format("  {:<15} {}\n", e.name, e.summary);
  return out;
}

}  // namespace

// `actortrain node`: run_node's flags, plus --example; the job's own flags after --.
int node_command(int argc, char** argv, int first) {
  auto [mine, theirs] = split_at_dashes(argc, argv, first);
  node_flags nf;
  std::string name;
  auto f = node_flags_parser("actortrain node", nf);
  f.add("example", name, "the registered job this cluster runs (" + jobs::registered_names() + "); its own flags go after --")
    .footer("Plays one task of a cluster of processes running a registered job (every task runs the same\n"
            "command with its own --task); `actortrain node --example NAME -- --help` lists the job's flags.\n"
            "CAF's own options go through as --caf.NAME=VALUE (e.g. --caf.scheduler.max-threads=2).\n"
            "The cluster comes from --cluster FILE, TF_CONFIG, a Slurm step (srun) or an MPI launch\n"
            "(mpirun; --rendezvous DIR), whichever is found first (--resolver picks one), e.g. TF_CONFIG\n"
            "  {\"cluster\": {\"worker\": [\"localhost:12345\", \"localhost:23456\"]},\n"
            "   \"task\": {\"type\": \"worker\", \"index\": 0}}\n"
            "or, in each task of `srun -n 5` or `mpirun -np 5`: --jobs chief=1,ps=2,worker=2.\n"
            "Exit status (Kubeflow's ExitCode policy): 0 the job succeeded, 1 it failed for good, 2 bad\n"
            "flags, cluster definition or environment, 138 restart this task (a peer it needs was\n"
            "unreachable or lost; the job goes on from its last checkpoint).\n\n"
            "jobs:\n" + example_list());
  if (!f.parse(mine)) return 0;
  if (!f.positional().empty())
    throw usage_error(fmt::format("unexpected argument '{}' (the job's flags go after --)", f.positional().front()));
  if (name.empty()) throw usage_error("--example NAME is required (" + jobs::registered_names() + ")");
  job j;
  if (!jobs::make_job(name, theirs, j)) return 0;
  return run_node(nf, j);
}

// -- status ----------------------------------------------------------------------------

int status_command(int argc, char** argv, int first) {
  node_flags nf;
  flags f{"actortrain status",
          "Prints the live status of a running cluster of processes, asked of its coordinator's task\n"
          "(the chief; worker 0 without one): the run (epoch, steps applied); each worker's state (busy,\n"
          "idle, lost), generation, steps, step rate and staleness over its last applied steps; each ps\n"
          "shard's steps and partitions (rows, size, version); the last checkpoint; the recent failures\n"
          "and recoveries."};
  f.add("cluster", nf.cluster_file,
        "the cluster (e.g. the cluster.json `actortrain launch` wrote); without it TF_CONFIG")
    .add("tls-cert", nf.tls_cert, "TLS as the tasks have it: a certificate of the cluster's CA")
    .add("tls-key", nf.tls_key, "its key")
    .add("tls-ca", nf.tls_ca, "the cluster's CA")
    .add("secret", nf.secret, "without TLS: the job's secret file, overriding the cluster's \"secret\" (with TF_CONFIG)")
    .footer("Exit status: 0 printed, 1 the coordinator could not be reached or did not answer, 2 bad\n"
            "flags or cluster definition.");
  if (!f.parse(argc, argv, first)) return 0;
  if (!f.positional().empty())
    throw usage_error(fmt::format("unexpected argument '{}' (see --help)", f.positional().front()));
  std::string text;
  try {
    text = query_status(nf);
  } catch (const cluster_file_error& e) {
    throw usage_error(e.what());
  }
  std::cout << text;
  return 0;
}

// -- launch ----------------------------------------------------------------------------

namespace {

volatile sig_atomic_t stop_requested = 0;

extern "C" void on_stop_signal(int) { stop_requested = 1; }

// A free TCP port on 127.0.0.1 (the kernel's choice; released before the task binds it).
// The kernel's range for outgoing connections' local ports ([32768, 60999] by default).
std::pair<int, int> ephemeral_range() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int lo = 32768, hi = 60999;
  if (!(in >> lo >> hi) || lo < 1025 || hi < lo) return {32768, 60999};
  return {lo, hi};
}

// A free port for a task, below the ephemeral range: while a task is down (killed, being
// restarted) no outgoing connection can take its port then, and a peer that keeps
// redialing it cannot connect to itself (a TCP self-connect, which BASP reads as a
// refused handshake: tests/cluster/kill_ps_test.sh failed so about 1 run in 10 before).
uint16_t free_port(std::set<uint16_t>& taken) {
  auto [lo, hi] = ephemeral_range();
  int first = 10000, last = lo - 1;
  if (last - first < 1000) {  // no room below: above it, else anywhere
    first = hi + 1;
    last = 65535;
  }
  std::mt19937 rng{std::random_device{}()};
  std::uniform_int_distribution<int> pick(first, std::max(first, last));
  for (int attempt = 0; attempt < 500; ++attempt) {
    auto port = static_cast<uint16_t>(pick(rng));
    if (!taken.count(port) && net::can_bind("127.0.0.1", port)) {
      taken.insert(port);
      return port;
    }
  }
  throw std::runtime_error(fmt::format("no free port in [{}, {}] on 127.0.0.1", first, last));
}

struct child {
  std::string task;      // "worker:1"
  pid_t pid = -1;
  int out = -1, err = -1;  // read ends
  std::string out_buf, err_buf;
  bool running = false;
  int status = 0;
  int restarts = 0;
  bool fault_killed = false;  // by --kill, since its last start
  // A worker launch restarted or killed, still running or exiting retryable when the
  // job had ended: stopped, not a failure (it had no part in the run's end).
  bool excused = false;
};

pid_t start_child(const std::vector<std::string>& cmd, int& out_fd, int& err_fd) {
  int out_pipe[2], err_pipe[2];
  if (::pipe(out_pipe) != 0 || ::pipe(err_pipe) != 0) throw std::runtime_error(fmt::format("pipe: {}", std::strerror(errno)));
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(fmt::format("fork: {}", std::strerror(errno)));
  if (pid == 0) {
    ::setpgid(0, 0);  // Ctrl-C reaches the launcher only; it stops the tasks itself
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    ::close(err_pipe[0]);
    ::close(err_pipe[1]);
    std::vector<char*> argv;
    for (auto& s : cmd) argv.push_back(const_cast<char*>(s.c_str()));
    argv.push_back(nullptr);
    ::execv("/proc/self/exe", argv.data());
    std::fprintf(stderr, "exec: %s\n", std::strerror(errno));
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  out_fd = out_pipe[0];
  err_fd = err_pipe[0];
  return pid;
}

// Prints the complete lines in `buf` with the task's prefix (the rest waits).
void flush_lines(std::string& buf, const std::string& prefix, std::ostream& os, bool all) {
  size_t start = 0;
  for (size_t nl = buf.find('\n'); nl != std::string::npos; nl = buf.find('\n', start)) {
    os << prefix << buf.substr(start, nl - start) << '\n';
    start = nl + 1;
  }
  buf.erase(0, start);
  if (all && !buf.empty()) {
    os << prefix << buf << '\n';
    buf.clear();
  }
  os.flush();
}

// Reads what is there; false at end of file.
bool drain(int fd, std::string& buf) {
  char tmp[4096];
  auto n = ::read(fd, tmp, sizeof tmp);
  if (n > 0) {
    buf.append(tmp, static_cast<size_t>(n));
    return true;
  }
  return n < 0 && (errno == EINTR || errno == EAGAIN);
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return "stopped";
}

bool succeeded(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

// A committed checkpoint under `root`: what a restarted chief can resume from.
bool has_checkpoint(const std::string& root) {
  try {
    return model::latest_checkpoint(model::posix_file_system(), root).has_value();
  } catch (const std::exception& e) {
    std::cerr << fmt::format("launch: cannot list the checkpoints in {}: {}; the chief starts over\n", root, e.what());
    return false;
  }
}

}  // namespace

int launch_command(int argc, char** argv, int first) {
  int ps = 1, workers = 2, max_restarts = 3;
  bool restart_failed = false, restart_chief = false, evaluator = false, no_data_plane = false,
       checkpoint_shared = false;
  std::string example, consistency, dir, checkpoint_dir, tls_cert, tls_key, tls_ca, kill_spec, wire_floats;
  uint64_t kill_seed = 1;
  int64_t timeout_s = 0, checkpoint_every = 0, checkpoint_keep = 0, heartbeat_ms = 0, connection_ms = 0, connect_ms = 0;
  flags f{"actortrain launch",
          "Starts a whole cluster of processes on 127.0.0.1 running example --example: a chief\n"
          "(coordinator and input pipelines), --ps ps tasks and --workers worker tasks, each an\n"
          "`actortrain node` process on a free port, described by a cluster file written to\n"
          "--dir. With --ps 0 there is no chief either: a worker-only cluster (TF_CONFIG style),\n"
          "whose worker 0 hosts the coordinator and the ps shards, synchronous by default.\n"
          "Each output line is prefixed with its task. The tasks holding ps shards write what\n"
          "those applied, step by step, to --dir/ledgers/TASK.json (one that never held a\n"
          "partition writes none; actortrain ledger check\n"
          "reads them). Ctrl-C stops every task. Exit status 0 when every task succeeded, 1\n"
          "when the job failed, 2 for bad flags. Flags after -- go to the example\n"
          "(actortrain launch --example linear -- --help lists them)."};
  f.add("example", example, "the registered job to run (" + jobs::registered_names() + ")")
    .add("ps", ps, "ps tasks (0: a worker-only cluster without chief)", range<int>{0, 64})
    .add("workers", workers, "worker tasks", range<int>{1, 256})
    .add("consistency", consistency, "async, bounded_staleness(s) or sync (default: the example's, sync without ps)")
    .add("checkpoint-dir", checkpoint_dir, "coordinated checkpoints here (written by the chief); a lost ps task is "
         "rolled back to the newest")
    .add("checkpoint-shared", checkpoint_shared, "each ps task writes its own partitions into --checkpoint-dir (a "
         "directory every task reaches); the chief commits the manifest")
    .add("checkpoint-every", checkpoint_every, "applied steps between checkpoints (0: only the first and the last)",
         range<int64_t>{0, int64_t{1} << 40})
    .add("checkpoint-keep", checkpoint_keep, "the newest checkpoints kept, with the ones they build on (0: the "
         "default, 3)", range<int64_t>{0, 100000})
    .add("evaluator", evaluator, "also an evaluator task: evaluates each new checkpoint (needs --checkpoint-dir and an "
         "example with validation data); the job never waits for it")
    .add("heartbeat-ms", heartbeat_ms, "heartbeat interval between tasks (0: the cluster file's default, 500)",
         range<int64_t>{0, 3600000})
    .add("connection-ms", connection_ms, "a peer silent this long is dropped (0: the default, 5000)", range<int64_t>{0, 3600000})
    .add("connect-ms", connect_ms, "how long a task waits for its peers at the start (the chief for the workers to "
         "register; raise it when tasks load large data first) (0: the default, 10000)", range<int64_t>{0, 3600000})
    .add("restart-failed", restart_failed, "restart a worker or ps task that is killed (SIGKILL, SIGTERM, SIGINT) or "
         "exits 138, the statuses Kubeflow's ExitCode policy retries (a worker rejoins under a new generation; a ps "
         "task is restored from the last checkpoint); a task that exits 1 (the job failed) is not restarted")
    .add("tls-cert", tls_cert, "mutual TLS between the tasks: a certificate of the cluster's CA "
         "(tools/make-certs makes all three); without TLS the tasks prove the job's secret, --dir/secret")
    .add("tls-key", tls_key, "its key")
    .add("tls-ca", tls_ca, "the cluster's CA")
    .add("no-data-plane", no_data_plane, "move tensors over BASP, not the tensor data plane (worker-ps connections "
         "of their own)")
    .add_choice("wire-floats", wire_floats,
                "bf16: on data-plane links without shared memory, gradients and training pulls travel rounded to "
                "bfloat16 (for clusters across hosts: on this host the tasks share memory and send every bit; see "
                "`actortrain node --help`) (unset: f32)",
                {"f32", "bf16"})
    .add("restart-chief", restart_chief, "restart a chief that is killed or exits 138, with --resume: it continues "
         "the run from the newest committed checkpoint (from the start when there is none yet; needs --checkpoint-dir "
         "and a chief)")
    .add("max-restarts", max_restarts, "restarts per task with --restart-failed or --restart-chief", range<int>{0, 1000})
    .add("kill", kill_spec, "inject faults: kill -9 a task of ROLE every SECONDS on average (ROLE=SECONDS: the k-th at "
         "k*SECONDS +- SECONDS/4, a random running task of the role) or once (ROLE@SECONDS), counted from the start, "
         "e.g. worker=10,ps=30,chief@60; each kill is printed as 'launch: fault: ...'. Without --restart-failed "
         "(and --restart-chief for the chief) a kill fails the job; with --ps 0, worker:0 holds the coordinator and "
         "is never restarted")
    .add("kill-seed", kill_seed, "the seed of --kill's times and tasks")
    .add("timeout", timeout_s, "stop every task and fail after this many seconds (0: no limit)",
         range<int64_t>{0, 31536000})
    .add("dir", dir, "where the cluster file goes (default: a new directory under /tmp)");
  if (!f.parse(argc, argv, first)) return 0;
  auto example_args = f.positional();
  if (example.empty()) throw usage_error("--example NAME is required (" + jobs::registered_names() + ")");
  // The flag, not the cluster file written from it, is what the user gave.
  if (!consistency.empty()) try {
      (void)consistency_mode::parse(consistency);
    } catch (const std::exception& e) {
      throw usage_error(fmt::format("--consistency: {}", e.what()));
    }
  {
    job probe;  // refuses a bad example or bad example flags before anything starts
    if (!jobs::make_job(example, example_args, probe)) return 0;
  }
  if (restart_chief && (checkpoint_dir.empty() || ps == 0))
    throw usage_error("--restart-chief needs --checkpoint-dir (the chief resumes from it) and a chief (--ps > 0)");
  std::optional<fault_schedule> faults;
  if (!kill_spec.empty()) try {
      faults = fault_schedule::parse(kill_spec, {{"chief", ps > 0 ? 1 : 0}, {"ps", ps}, {"worker", workers}}, kill_seed,
                                     timeout_s > 0 ? static_cast<double>(timeout_s) : 24 * 3600);
    } catch (const std::invalid_argument& e) {
      throw usage_error(fmt::format("--kill: {}", e.what()));
    }
  if (dir.empty()) dir = fmt::format("/tmp/actortrain-launch-{}", ::getpid());
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw std::runtime_error(fmt::format("cannot create {}: {}", dir, std::strerror(errno)));
  // The cluster file.
  std::vector<std::string> tasks;
  std::map<std::string, std::vector<std::string>> addrs;
  std::set<uint16_t> ports;
  auto add = [&](const std::string& type, int n) {
    for (int i = 0; i < n; ++i) {
      addrs[type].push_back(fmt::format("\"127.0.0.1:{}\"", free_port(ports)));
      tasks.push_back(fmt::format("{}:{}", type, i));
    }
  };
  if (ps > 0) add("chief", 1);
  add("ps", ps);
  add("worker", workers);
  if (checkpoint_shared && checkpoint_dir.empty()) throw usage_error("--checkpoint-shared needs --checkpoint-dir");
  if (checkpoint_keep > 0 && checkpoint_dir.empty()) throw usage_error("--checkpoint-keep needs --checkpoint-dir");
  if (evaluator) {
    if (checkpoint_dir.empty()) throw usage_error("--evaluator needs --checkpoint-dir (it evaluates the checkpoints)");
    add("evaluator", 1);
  }
  std::string body;
  for (auto& [type, list] : addrs)
    if (!list.empty()) body += fmt::format("{}\"{}\": [{}]", body.empty() ? "" : ", ", type, fmt::join(list, ", "));
  auto file = dir + "/cluster.json";
  // The job's secret (mode 0600), which the tasks prove they know before a node lets
  // CAF read a byte of theirs; a new one per launch (a directory reused by a second
  // launch gets a new secret: the old job's tasks cannot join the new one).
  const std::string secret = dir + "/secret";
  if (::unlink(secret.c_str()) != 0 && errno != ENOENT)
    throw std::runtime_error(fmt::format("cannot replace {}: {}", secret, std::strerror(errno)));
  write_job_secret(secret);
  {
    std::ofstream out(file);
    out << "{\"cluster\": {" << body << "}, \"secret\": \"secret\"";
    if (!tls_cert.empty() || !tls_key.empty() || !tls_ca.empty()) {
      auto absolute = [](const std::string& path) {
        if (path.empty() || path[0] == '/') return path;
        char cwd[4096];
        return ::getcwd(cwd, sizeof cwd) ? std::string(cwd) + "/" + path : path;
      };
      out << ", \"tls\": " << nlohmann::json{{"certificate", absolute(tls_cert)}, {"key", absolute(tls_key)},
                                            {"ca", absolute(tls_ca)}}.dump();
    }
    if (!consistency.empty()) out << ", \"consistency\": \"" << consistency << "\"";
    std::vector<std::string> timeouts;
    if (heartbeat_ms > 0) timeouts.push_back(fmt::format("\"heartbeat_ms\": {}", heartbeat_ms));
    if (connection_ms > 0) timeouts.push_back(fmt::format("\"connection_ms\": {}", connection_ms));
    if (connect_ms > 0) timeouts.push_back(fmt::format("\"connect_ms\": {}", connect_ms));
    if (!timeouts.empty()) out << ", \"timeouts\": {" << fmt::format("{}", fmt::join(timeouts, ", ")) << "}";
    if (!checkpoint_dir.empty())
      out << ", \"checkpoint\": {\"dir\": \"" << checkpoint_dir << "\", \"every_steps\": " << checkpoint_every
          << (checkpoint_shared ? ", \"shared\": true" : "")
          << (checkpoint_keep > 0 ? fmt::format(", \"keep\": {}", checkpoint_keep) : "") << "}";
    out << "}\n";
    if (!out) throw std::runtime_error("cannot write " + file);
  }
  // Checked as a task will read it (a bad --consistency is refused here).
  try {
    auto def = read_cluster_file(file);
    if (def.tls.enabled()) check_tls_files(def.tls, "--tls-cert/--tls-key/--tls-ca");
  } catch (const std::exception& e) {
    throw usage_error(e.what());
  }
  std::cout << fmt::format("launch: cluster file {} ({} task(s))\n", file, tasks.size()) << std::flush;

  struct sigaction sa{};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  const std::string ledger_dir = dir + "/ledgers";
  if (::mkdir(ledger_dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw std::runtime_error(fmt::format("cannot create {}: {}", ledger_dir, std::strerror(errno)));
  std::vector<child> children(tasks.size());
  auto start = [&](child& c, bool resume) {
    std::vector<std::string> cmd{"actortrain", "node", "--cluster", file, "--task", c.task, "--example", example};
    if (no_data_plane) cmd.push_back("--no-data-plane");
    if (!wire_floats.empty()) cmd.insert(cmd.end(), {"--wire-floats", wire_floats});
    if (resume) cmd.push_back("--resume");
    if (c.task.rfind("ps:", 0) == 0 || (ps == 0 && c.task == "worker:0")) {
      // The tasks holding ps shards write what those applied (for `actortrain ledger check`).
      auto name = c.task;
      name[name.find(':')] = '-';
      cmd.insert(cmd.end(), {"--ledger", ledger_dir + "/" + name + ".json"});
    }
    cmd.push_back("--");
    cmd.insert(cmd.end(), example_args.begin(), example_args.end());
    c.pid = start_child(cmd, c.out, c.err);
    c.running = true;
    std::cout << fmt::format("launch: {} is pid {}\n", c.task, c.pid) << std::flush;
  };
  for (size_t i = 0; i < tasks.size(); ++i) {
    children[i].task = tasks[i];
    start(children[i], false);
  }
  auto began = std::chrono::steady_clock::now();
  bool failed = false, stopping = false, killed = false, job_done = false;
  std::string why;
  std::chrono::steady_clock::time_point stop_deadline{};
  auto stop_all = [&](int sig) {
    for (auto& c : children)
      if (c.running) ::kill(c.pid, sig);
  };
  auto begin_stop = [&](const std::string& reason, bool failure) {
    if (stopping) return;
    stopping = true;
    if (failure) {
      failed = true;
      why = reason;
    }
    stop_all(SIGTERM);
    stop_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  };
  const std::string coordinator = ps > 0 ? "chief:0" : "worker:0";
  auto excusable = [&](const child& c) { return excused_after_end(job_done, c.task, c.restarts > 0 || c.fault_killed); };
  while (true) {
    bool any = false;
    for (auto& c : children) any = any || c.running || c.out >= 0 || c.err >= 0;
    if (!any) break;
    if (stop_requested && !stopping) begin_stop("stopped by a signal", true);
    if (timeout_s > 0 && !stopping && std::chrono::steady_clock::now() - began > std::chrono::seconds(timeout_s))
      begin_stop(fmt::format("--timeout {} s reached", timeout_s), true);
    if (stopping && std::chrono::steady_clock::now() > stop_deadline && !killed) {
      // A task restarted as the job ended may still wait for the chief that is gone
      // (it tries for connect_ms): it never had a part in the run's end, so it is
      // stopped (SIGTERM, SIGKILL after 5 s) without failing the job.
      bool excused_any = false;
      for (auto& c : children)
        if (c.running && !c.excused && excusable(c)) {
          std::cout << fmt::format("launch: {} (restarted {} time(s)) was still running when the job ended; stopping it\n",
                                   c.task, c.restarts);
          c.excused = excused_any = true;
          ::kill(c.pid, SIGTERM);
        }
      bool others = false;
      for (auto& c : children)
        if (c.running && !c.excused) {
          std::cerr << fmt::format("launch: {} did not end in time; killing it\n", c.task);
          others = true;
        }
      if (others || !excused_any) {
        stop_all(SIGKILL);
        killed = true;
      } else {
        stop_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      }
    }
    std::vector<pollfd> fds;
    std::vector<std::pair<child*, bool>> owners;  // (child, is stderr)
    for (auto& c : children) {
      if (c.out >= 0) {
        fds.push_back({c.out, POLLIN, 0});
        owners.emplace_back(&c, false);
      }
      if (c.err >= 0) {
        fds.push_back({c.err, POLLIN, 0});
        owners.emplace_back(&c, true);
      }
    }
    if (!fds.empty()) ::poll(fds.data(), fds.size(), 100);
    else ::usleep(100 * 1000);
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      auto& [c, is_err] = owners[i];
      auto& buf = is_err ? c->err_buf : c->out_buf;
      auto& fd = is_err ? c->err : c->out;
      bool open = drain(fd, buf);
      flush_lines(buf, "[" + c->task + "] ", is_err ? std::cerr : std::cout, !open);
      if (!open) {
        ::close(fd);
        fd = -1;
      }
    }
    // Faults: a kill -9 of the planned task, or of the next running one of its role.
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    for (auto& k : faults ? faults->due(elapsed) : std::vector<planned_kill>{}) {
      if (stopping) break;
      int n = k.role == "chief" ? 1 : k.role == "ps" ? ps : workers;
      child* victim = nullptr;
      for (int i = 0; i < n && victim == nullptr; ++i)
        for (auto& c : children)
          if (c.running && c.task == fmt::format("{}:{}", k.role, (k.index + i) % n)) victim = &c;
      if (victim == nullptr) {
        std::cout << fmt::format("launch: fault: no {} task running at {:.1f} s; none killed\n", k.role, elapsed);
        continue;
      }
      ::kill(victim->pid, SIGKILL);
      victim->fault_killed = true;
      auto wall = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
      std::cout << fmt::format("launch: fault: kill -9 {} (pid {}) at {:.1f} s, wall {:.3f}\n", victim->task,
                               victim->pid, elapsed, wall)
                << std::flush;
    }
    // Reap.
    for (auto& c : children) {
      if (!c.running) continue;
      int status = 0;
      auto r = ::waitpid(c.pid, &status, WNOHANG);
      if (r != c.pid) continue;
      c.running = false;
      c.status = status;
      if (succeeded(status)) {
        if (c.task == coordinator && !stopping) {
          // The job is done: the other tasks were told and end by themselves.
          stopping = job_done = true;
          stop_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        }
        continue;
      }
      if (stopping) {
        // It gave up waiting for the chief, or a kill landed as the job ended.
        if (excusable(c) && retryable(status)) {
          c.excused = true;
          std::cout << fmt::format("launch: {} {} after the job ended; not a failure\n", c.task, describe_status(status));
        }
        continue;
      }
      // The coordinator's task is restarted only with --restart-chief, and then resumes
      // from the newest committed checkpoint; before the first one is committed there
      // is nothing to lose, and it starts the run over. Only what the exit status calls
      // retryable is restarted: a task that says the job failed would fail again.
      bool is_coordinator = c.task == coordinator;
      if ((is_coordinator ? restart_chief : restart_failed) && retryable(status) && c.restarts < max_restarts) {
        ++c.restarts;
        bool resume = is_coordinator && has_checkpoint(checkpoint_dir);
        std::cerr << fmt::format("launch: {} {}; restarting it{} ({} of {})\n", c.task, describe_status(status),
                                 resume ? " with --resume" : "", c.restarts, max_restarts);
        if (c.out >= 0) ::close(c.out);
        if (c.err >= 0) ::close(c.err);
        c.out = c.err = -1;
        c.fault_killed = false;
        start(c, resume);
        continue;
      }
      begin_stop(fmt::format("{} {}", c.task, describe_status(status)), true);
    }
  }
  for (auto& c : children)
    if (!failed && !succeeded(c.status) && !c.excused) {
      failed = true;
      why = fmt::format("{} {}", c.task, describe_status(c.status));
    }
  if (failed) {
    std::cerr << "launch: the job failed: " << why << "\n";
    return 1;
  }
  std::cout << "launch: every task succeeded\n";
  std::cout << fmt::format("launch: what the ps shards applied is in {}/*.json (actortrain ledger check reads it)\n",
                           ledger_dir);
  return 0;
}

}  // namespace actortrain::tools
