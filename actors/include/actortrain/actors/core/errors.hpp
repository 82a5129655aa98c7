#pragma once
// The actors' error codes: one enum, registered with CAF as category "actortrain", returned
// through caf::result<T> / caf::expected<T>. Every error carries a text naming what is
// wrong and where (variable, shapes, step, shard).

#include <actortrain/actors/core/error_code.hpp>

#include <caf/error.hpp>
#include <caf/make_message.hpp>

#include <cstdint>
#include <exception>
#include <string>

namespace actortrain {

/// An error of category "actortrain" with a message.
caf::error make_error(error_code code, std::string what);

/// The caf::error of a CAF-free part's failure.
inline caf::error make_error(failure f) { return make_error(f.code, std::move(f.what)); }

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
