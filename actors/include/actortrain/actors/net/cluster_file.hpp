#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// The cluster of processes a job runs on: which tasks exist, where they listen, and how
// they talk. Read from a cluster file (JSON) or from the TF_CONFIG environment variable,
// which is the same format without the optional sections:
//
//   {
//     "cluster": {"chief": ["127.0.0.1:7000"],
//                 "ps": ["127.0.0.1:7001", "127.0.0.1:7002"],
//                 "worker": ["127.0.0.1:7003", "127.0.0.1:7004"],
//                 "evaluator": ["127.0.0.1:7005"]},
//     "task": {"type": "worker", "index": 0},
//     "tls": {"certificate": "node.pem", "key": "node.key", "ca": "ca.pem"},
//     "checkpoint": {"dir": "/tmp/ckpt", "shared": false, "every_steps": 500, "interval_ms": 0,
//                    "full_every": 8, "keep": 3},
//     "timeouts": {"heartbeat_ms": 500, "connection_ms": 5000, "request_ms": 60000,
//                  "connect_ms": 10000},
//     "consistency": "async"
//   }
//
// "cluster" is required and needs at least one worker; chief and evaluator hold at most
// one address each ("master", TensorFlow 1's name for the chief, is read as "chief").
// An evaluator may also run outside the cluster map, as Kubeflow runs it: task
// evaluator:0 of a cluster without an "evaluator" list listens nowhere and dials the
// chief. Without chief and ps (a worker-only cluster, as in TensorFlow's
// MultiWorkerMirroredStrategy tutorial) worker 0 hosts the coordinator and the ps
// shards, and the consistency defaults to "sync". "task" may also come from the command
// line (--task TYPE:INDEX). Every error names the source and the field
// ("cluster.json: cluster.worker[1]: ..."). This header does not include CAF.

#include <actortrain/actors/core/consistency.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace actortrain {

enum class task_type : uint8_t { chief, worker, ps, evaluator };

/// "chief", "worker", "ps", "evaluator".
const char* to_string(task_type t);

/// One task: its type and its index among the tasks of that type.
struct task_id {
  task_type type = task_type::worker;
  int index = 0;
  friend bool operator==(const task_id& a, const task_id& b) { return a.type == b.type && a.index == b.index; }
  friend bool operator!=(const task_id& a, const task_id& b) { return !(a == b); }
};

/// "worker:1".
std::string to_string(const task_id& t);

/// Parses "TYPE:INDEX" (as --task takes it). Throws cluster_file_error.
task_id parse_task(const std::string& text);

/// Where a task listens.
struct task_address {
  std::string host;
  uint16_t port = 0;
  /// "host:port".
  std::string text() const;
  /// 127.0.0.0/8, ::1 or localhost.
  bool loopback() const;
};

/// Mutual TLS between the tasks: all three files or none.
struct tls_files {
  std::string certificate;  ///< this node's certificate chain (PEM)
  std::string key;          ///< its private key (PEM)
  std::string ca;           ///< the cluster's CA certificate (PEM)
  bool enabled() const { return !certificate.empty(); }
};

/// How strictly a source is read. A cluster file refuses unknown keys: a misspelt key
/// would silently get its default. TF_CONFIG as Kubeflow's training operator and
/// Google's services write it carries keys meant for others ("environment",
/// "rpc_layer", a top-level "job", "task.trial", "task.cloud"): they are accepted and
/// noted in cluster_def::notes, unless the key is one letter or two away from one of
/// ours ("consistancy"), which is refused naming the key meant.
enum class cluster_dialect : uint8_t { file, tf_config };

/// A bad cluster file, TF_CONFIG or --task value; what() names the source and the field.
class cluster_file_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

struct cluster_def {
  std::vector<task_address> chief;      ///< at most one
  std::vector<task_address> worker;     ///< at least one
  std::vector<task_address> ps;
  std::vector<task_address> evaluator;  ///< at most one
  /// The task this process plays, when the source names one.
  std::optional<task_id> task;
  tls_files tls;
  /// Without TLS: the job's secret, a file of mode 0600 whose bytes members prove they
  /// know before a node lets CAF read a byte of theirs (`actortrain launch` makes one).
  /// Relative to the cluster file's directory (TF_CONFIG: to the working directory).
  std::string secret_file;
  /// Checkpoints of the job ("" = none). Unless `shared` (a directory every task sees),
  /// the ps tasks ship their partitions to the chief, which writes them there.
  std::string checkpoint_dir;
  bool checkpoint_shared = false;
  int64_t checkpoint_every = 0;
  std::chrono::milliseconds checkpoint_interval{0};
  /// checkpoint.full_every: cluster_spec::checkpoint_full_every (0: its default).
  int64_t checkpoint_full_every = 0;
  /// checkpoint.keep: cluster_spec::checkpoint_keep, the newest checkpoints kept (0: its
  /// default, 3).
  int64_t checkpoint_keep = 0;
  /// Heartbeats between connected processes (on both ends); a peer silent for
  /// connection_timeout is dropped.
  std::chrono::milliseconds heartbeat_interval{500};
  std::chrono::milliseconds connection_timeout{5000};
  /// Every request between actors.
  std::chrono::milliseconds request_timeout{60000};
  /// How long a task keeps trying to reach a peer at start-up before it gives up
  /// naming the address.
  std::chrono::milliseconds connect_timeout{10000};
  /// Unset = the default: sync for a worker-only cluster, else async.
  std::optional<consistency_mode> consistency;
  /// "wire_floats": "bf16": on the data plane's stream (not its shared memory), the
  /// gradients a worker pushes and the values a training step pulls travel rounded to
  /// bfloat16, half the bytes (data_plane.hpp). Evaluation, checkpoints, restores and
  /// everything the ps tasks keep stay exact. Default "f32": every bit as computed.
  bool wire_bf16 = false;

  /// What the source held that ActorTrain does not use (keys of other tools in
  /// TF_CONFIG), for a --verbose start-up.
  std::vector<std::string> notes;

  /// No chief and no ps: worker 0 hosts the coordinator and the ps shards.
  bool worker_only() const { return chief.empty() && ps.empty(); }
  /// consistency, or its default.
  consistency_mode effective_consistency() const;
  /// The task that runs the coordinator: chief 0, or worker 0 in a worker-only cluster.
  task_id coordinator_task() const;
  /// The tasks of `type`.
  const std::vector<task_address>& tasks(task_type type) const;
  /// Where `t` listens. Throws cluster_file_error when there is no such task.
  const task_address& address(const task_id& t) const;
  /// Whether `t` is in the cluster map (an evaluator outside it listens nowhere).
  bool listed(const task_id& t) const;
};

/// Parses and validates a cluster definition from JSON `text`; `source` names it in
/// errors ("cluster.json", "TF_CONFIG"). Refused, with the field named: malformed JSON,
/// unknown keys and task types, a cluster without workers, more than one chief or
/// evaluator, malformed addresses, ports outside 1..65535, an address used twice, a
/// task index out of range, partial TLS settings (some of certificate, key, ca), any
/// address off loopback without TLS, negative or zero timeouts, an empty secret path.
/// The secret file itself is read when a node starts (a plain node without one is
/// refused then, naming what to do).
///
/// `tls_from_flags` holds --tls-cert/--tls-key/--tls-ca: when set (all three; some of
/// them is refused) it replaces the source's tls section and, like it, allows addresses
/// off loopback. TF_CONFIG has no tls section, so flags are its only way to TLS.
/// `dialect` says how unknown keys are met (above).
cluster_def parse_cluster_def(const std::string& text, const std::string& source,
                              const tls_files& tls_from_flags = {}, cluster_dialect dialect = cluster_dialect::file);

/// Writes a new job secret (32 random bytes) to `path`, created with mode 0600, for a
/// cluster file's "secret". Refused when the file exists (a job's secret is never
/// replaced under running tasks). Throws std::runtime_error naming the path.
void write_job_secret(const std::string& path);

/// Reads and parses the cluster file at `path` (errors name the path).
///
/// With `resolved` (a JSON object with "cluster" and "task", from a resolver such as
/// Slurm's, resolvers.hpp), the file holds only the settings beside that cluster (tls,
/// secret, checkpoint, timeouts, consistency, wire_floats): a "cluster" or "task" of its own is
/// refused, and errors name `resolved_source` and the file.
cluster_def read_cluster_file(const std::string& path, const tls_files& tls_from_flags = {},
                              const std::string& resolved = "", const std::string& resolved_source = "");

/// Checks that every TLS file exists, is readable and holds PEM (before an actor system
/// is built, naming the file). Nothing to check when TLS is off; some
/// but not all of the three is refused. Throws cluster_file_error naming the file.
void check_tls_files(const tls_files& tls, const std::string& source);

}  // namespace actortrain
