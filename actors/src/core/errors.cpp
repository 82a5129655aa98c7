#include <actortrain/actors/core/errors.hpp>

#include <caf/all.hpp>

#include <fmt/format.h>

namespace actortrain {

std::string to_string(error_code x) {
  switch (x) {
    case error_code::none: return "none";
    case error_code::fenced_out: return "fenced_out";
    case error_code::invalid_gradient: return "invalid_gradient";
    case error_code::invalid_request: return "invalid_request";
    case error_code::not_initialized: return "not_initialized";
    case error_code::not_configured: return "not_configured";
    case error_code::no_workers: return "no_workers";
    case error_code::user_error: return "user_error";
    case error_code::poison_step: return "poison_step";
    case error_code::timeout: return "timeout";
    case error_code::worker_lost: return "worker_lost";
    case error_code::stopped: return "stopped";
    case error_code::source_lost: return "source_lost";
    case error_code::checkpoint_failed: return "checkpoint_failed";
    case error_code::shard_lost: return "shard_lost";
  }
  return "unknown";
}

caf::error make_error(error_code code, std::string what) { return caf::make_error(code, std::move(what)); }

error_code code_of(const caf::error& e) {
  return e.category() == caf::atom("actortrain") ? static_cast<error_code>(e.code()) : error_code::none;
}

bool is_application_error(const caf::error& e) {
  auto c = code_of(e);
  return c == error_code::user_error || c == error_code::invalid_gradient || c == error_code::invalid_request;
}

namespace {

// CAF's names for what people meet most, in words: the name stays first (logs and scripts
// search for it), the words follow in parentheses.
const char* in_words(caf::sec s) {
  switch (s) {
    case caf::sec::request_receiver_down: return "the actor asked had ended";
    case caf::sec::request_timeout: return "no answer in time";
    case caf::sec::cannot_connect_to_node: return "cannot connect to its process";
    case caf::sec::unexpected_message: return "a message it does not handle";
    case caf::sec::disconnect_during_handshake: return "the connection closed during the handshake";
    default: return nullptr;
  }
}

const char* in_words(caf::exit_reason r) {
  switch (r) {
    case caf::exit_reason::remote_link_unreachable: return "the connection to its process was lost";
    case caf::exit_reason::unreachable: return "it cannot be reached";
    case caf::exit_reason::user_shutdown: return "stopped";
    case caf::exit_reason::kill: return "killed";
    case caf::exit_reason::unhandled_exception: return "an exception ended it";
    case caf::exit_reason::out_of_workers: return "no threads left to run it";
    default: return nullptr;
  }
}

template <class Code>
std::string named(Code c) {
  auto text = caf::to_string(c);
  if (auto words = in_words(c)) text += fmt::format(" ({})", words);
  return text;
}

}  // namespace

std::string describe(const caf::error& e) {
  if (!e) return "no error";
  std::string text;
  if (e.category() == caf::atom("actortrain"))
    text = to_string(static_cast<error_code>(e.code()));
  else if (e.category() == caf::atom("system"))
    text = named(static_cast<caf::sec>(e.code()));
  else if (e.category() == caf::atom("exit"))
    text = named(static_cast<caf::exit_reason>(e.code()));  // "remote_link_unreachable (...)", ...
  else
    text = caf::to_string(e.category()) + ":" + std::to_string(e.code());
  auto& ctx = e.context();
  if (ctx.size() == 1 && ctx.match_element<std::string>(0))
    text += ": " + ctx.get_as<std::string>(0);
  else if (!ctx.empty())
    text += ": " + caf::to_string(ctx);
  return text;
}

std::string exception_text(const std::exception_ptr& eptr) {
  try {
    std::rethrow_exception(eptr);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

}  // namespace actortrain
