#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// Where a task learns its cluster and its own place in it: the cluster resolvers, in
// one place, at the edge. Each turns what a launcher gives a process into the same
// cluster_def (cluster_file.hpp) and task:
//
//   file       --cluster FILE, a cluster file (cluster_file.hpp)
//   tf_config  the TF_CONFIG environment variable, as TensorFlow, Kubeflow's training
//              operator and Google's services write it (keys of other tools accepted,
//              "master" read as "chief", an evaluator outside the cluster map)
//   slurm      a Slurm job step (srun): SLURM_PROCID, SLURM_STEP_NUM_TASKS,
//              SLURM_STEP_NODELIST, SLURM_STEP_TASKS_PER_NODE, laid out as TensorFlow's
//              SlurmClusterResolver does (slurm_layout), and checked: the rank's host
//              must be this host
//   mpi        an MPI launcher (Open MPI's mpirun, or any PMI/PMIx one): the rank and
//              size from OMPI_COMM_WORLD_RANK/SIZE, PMIX_RANK or PMI_RANK/PMI_SIZE;
//              the hosts from a rendezvous in a directory every rank sees, where each
//              rank publishes its address (mpi_rendezvous)
//   automatic  the first that applies, in the order --cluster (a file with a "cluster"
//              section), TF_CONFIG, Slurm, MPI
//
// Slurm and MPI give ranks, not roles: --jobs gives the roles as counts
// ("chief=1,ps=2,worker=2"; default: every rank a worker, as TensorFlow does), and
// ranks take them in name order (chief, evaluator, ps, worker), each role the next
// block of ranks. Their other settings (checkpoints, timeouts, TLS, consistency) come
// from a cluster file without a "cluster" section (--cluster FILE beside
// --resolver slurm|mpi), or the flags that override them. Every error names the
// variable, flag or file at fault.

#include <actortrain/actors/net/cluster_file.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace actortrain {

enum class resolver_kind : uint8_t { automatic, file, tf_config, slurm, mpi };

/// "auto", "file", "tf_config", "slurm", "mpi".
const char* to_string(resolver_kind k);
/// Parses one of those names (--resolver). Throws cluster_file_error naming the choices.
resolver_kind parse_resolver(const std::string& name);

/// Roles as counts, as --jobs gives them.
struct job_counts {
  std::map<task_type, int> count;  ///< only roles with at least one task
  int total() const;
  /// "chief 1, ps 2, worker 4".
  std::string text() const;
};
/// Parses "ps=2,worker=4" (each role at most once, counts >= 1; chief and evaluator at
/// most 1; at least one worker). Throws cluster_file_error naming the part at fault.
job_counts parse_job_counts(const std::string& text);

/// A Slurm hostlist, in its order, duplicates kept: "n[1-2],m5,o[3-4,6,7-9]" ->
/// n1 n2 m5 o3 o4 o6 o7 o8 o9; zero padding kept ("o[009-011]" -> o009 o010 o011).
/// Throws cluster_file_error for unbalanced brackets, bad ranges, an empty name.
std::vector<std::string> expand_hostlist(const std::string& text);
/// Slurm's tasks per node: "3(x2),2,1" -> 3 3 2 1. Throws cluster_file_error.
std::vector<int> expand_tasks_per_node(const std::string& text);

/// Ranks laid out on hosts: where each rank listens and which task it plays.
struct rank_layout {
  std::vector<task_address> address;  ///< by rank
  std::vector<task_id> task;          ///< by rank
  /// The cluster section as a cluster file would hold it.
  std::map<task_type, std::vector<task_address>> cluster;
};

/// TensorFlow's SlurmClusterResolver: hosts sorted by name (each with its number of
/// tasks), the k-th task on a host at port_base + k, these addresses in that order
/// taken by the ranks 0, 1, ...; roles in name order each take the next block of ranks.
/// Needs sum(tasks) == jobs.total(); throws cluster_file_error naming both otherwise.
rank_layout slurm_layout(std::vector<std::pair<std::string, int>> hosts_and_tasks, const job_counts& jobs,
                         uint16_t port_base);

/// What the MPI resolver's rendezvous found: each rank's host (as it published it)
/// and its host identity (host_identity()).
struct rank_host {
  std::string host;
  std::string identity;
};

/// Ranks whose hosts are known (MPI's rendezvous): rank r listens on its own host, at
/// port_base + (its place among the ranks of that host, in rank order); roles as for
/// Slurm. When every rank shares one host identity, every address is 127.0.0.1.
rank_layout rank_layout_of(const std::vector<rank_host>& hosts, const job_counts& jobs, uint16_t port_base);

/// This process's host identity: the boot id and the network namespace. Two processes
/// share it exactly when they share a kernel and its network (what a hostname does not
/// tell inside containers and namespaces).
std::string host_identity();

/// What a resolver reads about its process: the environment and this host. Tests give
/// their own; of_this_process() reads the real ones.
struct resolver_inputs {
  std::map<std::string, std::string> env;
  /// Names of this host: gethostname(), its short form, SLURMD_NODENAME.
  std::vector<std::string> host_names;
  std::string identity;  ///< host_identity()
  /// The address other hosts reach this one at, by default: the first IPv4 address of
  /// an interface that is up and not loopback ("" when there is none).
  std::string default_address;
  static resolver_inputs of_this_process();
  const std::string* get(const std::string& name) const;
};

struct resolve_options {
  resolver_kind kind = resolver_kind::automatic;
  /// A cluster file: the cluster itself (file), or the settings beside a Slurm or MPI
  /// cluster (no "cluster" section then).
  std::string cluster_file;
  tls_files tls_from_flags;
  std::string jobs;  ///< --jobs ("" = every rank a worker)
  uint16_t port_base = 8888;
  /// MPI: a directory every rank sees (a shared file system across hosts).
  std::string rendezvous_dir;
  /// MPI: the host other ranks reach this one at ("" = resolver_inputs::default_address).
  std::string advertise;
  /// MPI: how long a rank waits for every other rank to publish its address.
  std::chrono::milliseconds rendezvous_timeout{60000};
};

struct resolution {
  cluster_def cluster;
  /// The task this process plays, when the source says (a Slurm or MPI rank always does).
  std::optional<task_id> task;
  resolver_kind kind = resolver_kind::file;
  /// Names the source in messages: "cluster.json", "TF_CONFIG", "Slurm (rank 3 of 5 on n2)".
  std::string source;
};

/// Resolves the cluster with `opts.kind` (automatic: the first that applies). Throws
/// cluster_file_error naming what is missing or wrong and where.
resolution resolve_cluster(const resolve_options& opts, const resolver_inputs& in);

/// The start-up line: "task worker:1 of chief 1, ps 2, worker 4 at host:port (from SOURCE)".
std::string describe_resolution(const resolution& r, const task_id& task);

}  // namespace actortrain
