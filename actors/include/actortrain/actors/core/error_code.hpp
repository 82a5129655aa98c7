#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// The actors' error codes as plain values, for the CAF-free parts (the step queue, the
// shard store, ...): they return a `failure`, and the actor that called them turns it
// into a caf::error (errors.hpp: make_error).

#include <cstdint>
#include <string>

namespace actortrain {

enum class error_code : uint8_t {
  none = 0,
  fenced_out,        ///< the message's epochs or worker generation are older than the receiver's
  invalid_gradient,  ///< wrong shape, not finite, unknown partition or rows out of range
  invalid_request,   ///< a malformed request (bad ids, wrong partition, empty step)
  not_initialized,   ///< a ps shard asked to serve before it received its partitions
  not_configured,    ///< actortrain::configure() was not called on the system's config
  no_workers,        ///< a run was started with zero workers
  user_error,        ///< an exception thrown by user code (a layer, a dataset_fn, a map)
  poison_step,       ///< a step failed the same way too often
  timeout,           ///< a request between actors timed out
  worker_lost,       ///< the worker running a step went down
  stopped,           ///< the cluster was stopped while the request was pending
  source_lost,       ///< the dataset shard serving a step is gone (it is rebuilt; the step re-runs)
  checkpoint_failed, ///< a coordinated checkpoint could not be written (the run ends)
  shard_lost,        ///< a ps shard serving a step is gone (it is respawned; the step re-runs after the roll-back)
};

std::string to_string(error_code x);

/// What went wrong in a CAF-free part: a code and a text naming what and where.
/// Converts to true when there is a failure.
struct failure {
  error_code code = error_code::none;
  std::string what;
  explicit operator bool() const { return code != error_code::none; }
};

}  // namespace actortrain
