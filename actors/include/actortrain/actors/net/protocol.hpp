#pragma once
// What the tasks of a cluster of processes (process.hpp) tell each other: a worker's
// registration, a ps shard's contact, the end of the job.

#include <actortrain/actors/coordinator/protocol.hpp>

#include <actortrain/actors/ps/handle.hpp>
#include <actortrain/actors/worker/handle.hpp>

#include <caf/actor.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace actortrain {

/// A worker task asks the coordinator's task to admit its model replica.
struct node_registration {
  uint32_t worker = 0;  ///< the task's index: the worker id
  std::vector<std::pair<std::string, std::string>> fingerprint;
  worker_actor replica;
  caf::actor node;     ///< the task's node actor (told when the job ends)
  std::string task;    ///< "worker:1 at 127.0.0.1:7004", for messages
};

/// What a task answers (ps_handle_atom, index) with: ps shard `index` and, when its
/// process serves one, the shard's data plane (data_plane.hpp; port 0 = none: turned
/// off), where a client presents `data_token`. The host is the serving task's own (its
/// address in the cluster); with TLS the data plane is a TLS session too.
struct shard_contact {
  ps_shard_actor shard;
  uint16_t data_port = 0;
  std::string data_token;
  std::string data_host;
};

/// The end of a job, sent by the coordinator's task to every other task: the run's
/// summary, or what ended it.
struct job_outcome {
  run_summary summary;
  std::string error;  ///< "" = the run succeeded
  /// The run failed for a cause a restart from the last checkpoint may cure (a lost task
  /// not replaced in time), not an application error: every task exits retryable.
  bool retryable = false;
};

}  // namespace actortrain
