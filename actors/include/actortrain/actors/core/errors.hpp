#pragma once
// The actors' error codes: one enum, registered with CAF as category "actortrain", returned
// through caf::result<T> / caf::expected<T>. Every error carries a text naming what is
// wrong and where (variable, shapes, step, shard).

#include <caf/error.hpp>
#include <caf/make_message.hpp>

#include <cstdint>
#include <exception>
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

/// An error of category "actortrain" with a message.
caf::error make_error(error_code code, std::string what);

/// The code of one of our errors; error_code::none for CAF's and others'.
error_code code_of(const caf::error& e);

/// True for errors that re-running cannot fix (user code threw, a gradient or request
/// is malformed): they end a run at once. Everything else (timeouts, lost peers, fences,
/// a shard not yet initialized during recovery) is worth a retry.
bool is_application_error(const caf::error& e);

/// The text of an error: for ours "<code>: <message>", for CAF's its rendering.
std::string describe(const caf::error& e);

/// The message of a caught exception (what(), or "unknown exception"), for the
/// exception handlers every framework actor installs.
std::string exception_text(const std::exception_ptr& eptr);

}  // namespace actortrain

CAF_ERROR_CODE_ENUM(actortrain::error_code, "actortrain")
