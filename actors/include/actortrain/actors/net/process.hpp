#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// A cluster of processes: the user's own program runs as every task, as in TensorFlow
// ("the same script on every task"). Each process builds the same `job` and calls
// run_node, which reads the cluster (--cluster FILE, or the TF_CONFIG environment
// variable verbatim) and the task it plays (--task TYPE:INDEX or TF_CONFIG's "task"):
//
// example[filescope]:
//   int main(int argc, char** argv) {
//     auto train = dataset::fashion_mnist(dataset::split::train);
//     actortrain::job j;
//     j.name = "fashion_mnist";
//     j.structure = model::model::sequential(784, {model::layers::dense(10)});
//     j.optimizer = model::make_adam();
//     j.loss = model::softmax_cross_entropy();
//     j.metrics = [] { std::vector<model::metric_ptr> m; m.push_back(model::accuracy()); return m; };
//     j.train = [train](const dataset::input_context& ctx) {
//       return train.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(128);
//     };
//     j.fit.epochs = 10;
//     return actortrain::run_node(argc, argv, j);
//   }
//
// Roles. The chief runs the coordinator and the dataset shards and prints the progress;
// each ps task holds one ps shard; each worker task one model replica, which dials every
// ps task directly (tensors never pass through the chief), makes its training batches
// from its own replicas of the pipelines (worker i reads pipeline i in order while it
// has steps: batches never cross the network) and registers with the chief. Without chief and ps (TensorFlow's
// MultiWorkerMirroredStrategy tutorial: two workers on localhost) worker 0 also hosts
// the coordinator and the ps shards, and the consistency defaults to sync. When the run
// ends, the chief sends the history to every worker: every task's run returns the same
// history, and run_node prints it ("epoch 1/10: loss 0.412345 accuracy 0.851234").
//
// An evaluator task (at most one; needs a checkpoint section and job::fit.validation)
// evaluates each newly committed checkpoint of the chief's directory, prints the result
// and appends it to <checkpoint dir>/evaluator.jsonl; the chief tells it when the job
// ends but never waits for it. Without ps tasks, the coordinator's task holds the ps
// shards (job::spec.num_ps of them).
//
// Registration checks a job fingerprint (job name, model structure and shapes,
// optimizer, loss, partitioning, consistency, library version): a task of another job
// is refused with a message naming what differs, on both sides.
//
// Network. CAF's middleman (BASP over TCP). Every connection is made from an
// event-based actor with a timeout and retried until cluster_def::connect_timeout, then
// fails naming the address; heartbeats run on both ends of every connection (a hung peer
// is dropped after connection_timeout); requests outstanding to a lost peer are failed
// by the caller on its down message. Plain mode listens on loopback only
// (cluster_file.hpp refuses other addresses without TLS), and every connection first
// proves the job's secret (a file of mode 0600, the cluster's "secret" or --secret)
// before CAF reads a byte of it; with TLS (a tls section or
// --tls-cert/--tls-key/--tls-ca) every connection authenticates both ends with
// certificates of the cluster's CA (TLS run by the node's guard and its dialer, not by
// CAF: every BASP header is checked as in plain mode), and a refused handshake is final.
// This header does not include CAF.

#include <actortrain/actors/cli/flags.hpp>
#include <actortrain/actors/cluster/cluster.hpp>
#include <actortrain/actors/net/cluster_file.hpp>
#include <actortrain/actors/cluster/job.hpp>
#include <actortrain/actors/sim/simulator.hpp>
#include <actortrain/dataset/dataset.hpp>
#include <actortrain/model/trainer.hpp>

#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace actortrain {

/// One line per field that enters the fingerprint: (field, value).
using fingerprint = std::vector<std::pair<std::string, std::string>>;

/// The job's fingerprint as the cluster `def` would run it.
fingerprint job_fingerprint(const job& j, const cluster_def& def);

/// "" when equal, else what differs ("model: ... here, ... there; version: ...").
std::string fingerprint_difference(const fingerprint& mine, const fingerprint& theirs);

/// The cluster_spec a cluster of processes defined by `def` runs `j` with (the job's
/// tuning; workers, ps shards, consistency, timeouts and checkpoints from `def`).
cluster_spec node_spec(const job& j, const cluster_def& def);

struct node_options {
  cluster_def cluster;
  task_id task;
  /// Scheduler threads of this process (CAF's scheduler.max-threads).
  int threads = 2;
  /// CAF's own options as typed, --caf.NAME=VALUE (e.g. --caf.scheduler.max-threads=2),
  /// applied after the cluster's settings, so they win.
  std::vector<std::string> caf_options;
  /// The coordinator's task continues the run saved in the cluster's checkpoint
  /// directory (a chief restarted after a crash; the ps tasks may have lived on).
  bool resume = false;
  /// Tensors between worker and ps tasks on the data plane (data_plane.hpp) instead of
  /// BASP; inside TLS when the cluster has TLS.
  bool data_plane = true;
  /// (ps tasks, and a coordinator's task that holds the ps shards) When the task ends,
  /// write the ps partitions' ledgers (ledger.hpp: ledgers_to_json) to this file, for
  /// `actortrain ledger check`; "" = none.
  std::string ledger_out;
  /// Test-only: a defect planted in this process's actors (simulator.hpp:
  /// planted_defect), so the process-level tests show that `actortrain ledger check`
  /// catches what it exists for. resolve_node takes it from the environment variable
  /// ACTORTRAIN_PLANT_DEFECT (e.g. skip_step); never set it in a real job.
  planted_defect plant = planted_defect::none;
  /// Where progress and the history go (stdout when null).
  std::ostream* out = nullptr;
  /// Prefix of this process's log lines ("[worker:1] "); "" = none.
  std::string log_prefix;
  /// What the resolver found, as run_node prints it at start-up ("task worker:1 of chief
  /// 1, ps 2, worker 2 at 127.0.0.1:8892 (from Slurm (rank 4 of 5 on n1))").
  std::string started_from;
};

struct node_result {
  model::history history;
  int64_t steps = 0;
  /// A worker task: the digest (model::parameters_digest) of the variables it pulled from
  /// the ps shards itself when the job ended (null: it could not). run_node prints it;
  /// `actortrain inspect --digest` prints the same of the final checkpoint.
  std::optional<uint64_t> parameters_digest;
  /// What the task says of itself at the end (a ps task: what its ledger holds).
  std::string note;
};

/// Plays `opts.task` until the job ends. Returns the run's history (the same on every
/// task); throws std::runtime_error naming what failed (an unreachable peer and its
/// address, a refused registration, a lost coordinator, the run's own error). A task
/// owns its process: it makes it ignore SIGPIPE (net::ignore_sigpipe), so a vanished
/// peer is a write error.
node_result run_task(const node_options& opts, const job& j);

/// run_node's exit statuses, chosen for Kubeflow's ExitCode restart policy, which
/// restarts a pod that exits 130, 137, 143 (killed by a signal) or 138 ("retry me") and
/// fails the job on 1, 2, 126, 127, 128 or 139:
///   ok     the job succeeded;
///   failed the job failed for good (user code threw, a task of another job, a callback);
///   usage  bad flags, cluster definition, environment or files (nothing started);
///   retry  this task should be restarted: a peer it needs was unreachable or lost and
///          not replaced in time, or the run ended for such a cause; restarted (the
///          chief with --resume), the job goes on from its last checkpoint.
namespace exit_status {
constexpr int ok = 0;
constexpr int failed = 1;
constexpr int usage = 2;
constexpr int retry = 138;
}  // namespace exit_status

/// The flags run_node reads; with `help`, usage was asked for.
struct node_flags {
  std::string resolver = "auto";  ///< resolvers.hpp: auto, file, tf_config, slurm, mpi
  std::string cluster_file;  ///< the cluster (file), or the settings beside Slurm's or MPI's
  std::string jobs;          ///< Slurm, MPI: the roles as counts ("" = every rank a worker)
  int port_base = 8888;      ///< Slurm, MPI: a host's k-th task listens at port_base + k
  std::string rendezvous;    ///< MPI: a directory every rank sees
  std::string advertise;     ///< MPI: the host the other ranks reach this one at
  bool verbose = false;      ///< print what the cluster's source held that is not used
  std::string task;          ///< "" = the cluster definition's "task"
  std::string tls_cert, tls_key, tls_ca;
  std::string secret;  ///< "" = the cluster definition's "secret"
  int threads = 2;
  bool resume = false;
  bool no_data_plane = false;
  std::string wire_floats;  ///< "" = the cluster's "wire_floats"; f32 or bf16
  std::string ledger_out;
  std::vector<std::string> caf_options;  ///< --caf.NAME=VALUE, as typed
  bool help = false;                     ///< --help was given (and printed)
};

/// Parses run_node's flags from argv[first..] (cli/flags.hpp): --resolver KIND, --jobs
/// ROLE=N,..., --port-base N, --rendezvous DIR, --advertise HOST, --verbose, --cluster FILE, --task
/// TYPE:INDEX, --tls-cert/--tls-key/--tls-ca FILE, --secret FILE, --threads N, --resume,
/// --no-data-plane, --wire-floats f32|bf16, --ledger FILE, --caf.NAME=VALUE, --help (printed to stdout). Throws
/// cli::usage_error naming the flag for an unknown flag, a missing or bad value.
node_flags parse_node_flags(int argc, char** argv, int first = 1);

/// run_node's flags on a parser of the command-line layer, filling `f` as it parses,
/// for a program that adds flags of its own to them (as `actortrain node` adds
/// --example); its footer tells of TF_CONFIG, CAF's options and the exit status.
cli::flags node_flags_parser(const std::string& program, node_flags& f);

/// What --help prints.
std::string node_usage(const std::string& program);

/// The cluster definition and task the flags (or TF_CONFIG) name, validated (and the
/// CAF options, against CAF's own). Throws cluster_file_error.
node_options resolve_node(const node_flags& flags);

/// parse_node_flags + resolve_node + run_task, printing the history on every task.
/// Returns 0 when the job succeeded, 1 when it failed (the reason on stderr), 2 for bad
/// flags or a bad cluster definition.
int run_node(int argc, char** argv, const job& j);
/// The same from parsed flags (help is not looked at).
int run_node(const node_flags& flags, const job& j);

/// The live status of the running cluster the flags (or TF_CONFIG) name, asked of its
/// coordinator's task (the chief; worker 0 without one) with the definition's timeouts
/// and TLS: workers with state, generation, step rate and staleness; ps shards with
/// their partitions, sizes and versions; the last checkpoint; recent failures and
/// recoveries. Throws cluster_file_error for a bad definition, std::runtime_error when
/// the coordinator cannot be reached or does not answer (naming the address).
std::string query_status(const node_flags& flags);

}  // namespace actortrain
