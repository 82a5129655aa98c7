// The BASP stream check (basp_check.hpp).
#include "basp_check.hpp"

#include <algorithm>
#include <cstring>
#include <string_view>

#include <fmt/format.h>

namespace actortrain::detail {

namespace {

constexpr unsigned char server_handshake = 0x00;
constexpr unsigned char client_handshake = 0x01;
constexpr unsigned char first_client_op = 0x01;  // client_handshake (CAF 0.17 sends it twice)
constexpr unsigned char last_op = 0x06;          // heartbeat (either side)

struct refused_type {
  std::string_view name;
  std::string_view why;
};

// Why each is refused: refused_caf_type in basp_check.hpp.
constexpr refused_type refused_types[] = {
  {"@config_value", "its deserializer in CAF 0.17.6 throws on bad input and would end the node"},
  {"@charbuf", "its deserializer in CAF 0.17.6 allocates whatever length the bytes announce, up to 4 GiB"},
};

constexpr size_t longest_name() {
  size_t n = 0;
  for (auto& t : refused_types) n = std::max(n, t.name.size());
  return n;
}
static_assert(longest_name() == longest_refused_caf_type);

std::string_view why_refused(std::string_view name) {
  for (auto& t : refused_types)
    if (t.name == name) return t.why;
  return {};
}

}  // namespace

std::string_view refused_caf_type(std::string_view bytes) {
  for (auto& t : refused_types)
    if (bytes.find(t.name) != std::string_view::npos) return t.name;
  return {};
}

std::string_view basp_check::names_refused_type(const char* data, size_t n) {
  // Across the cut: what the last chunk ended with, then this chunk's start.
  constexpr auto keep = sizeof carry_;
  if (carry_len_ > 0) {
    char joint[2 * keep];
    std::memcpy(joint, carry_, carry_len_);
    auto more = std::min(n, keep);
    std::memcpy(joint + carry_len_, data, more);
    if (auto t = refused_caf_type(std::string_view(joint, carry_len_ + more)); !t.empty()) return t;
  }
  if (auto t = refused_caf_type(std::string_view(data, n)); !t.empty()) return t;
  // The last keep bytes seen of this payload.
  if (n >= keep) {
    std::memcpy(carry_, data + n - keep, keep);
    carry_len_ = keep;
  } else {
    auto drop = carry_len_ + n > keep ? carry_len_ + n - keep : 0;
    std::memmove(carry_, carry_ + drop, carry_len_ - drop);
    carry_len_ -= drop;
    std::memcpy(carry_ + carry_len_, data, n);
    carry_len_ += n;
  }
  return {};
}

bool basp_check::feed(const char* data, size_t n) {
  if (!why_.empty()) return false;
  for (size_t i = 0; i < n;) {
    if (payload_left_ > 0) {
      auto take = std::min<uint64_t>(payload_left_, n - i);
      if (auto t = names_refused_type(data + i, static_cast<size_t>(take)); !t.empty()) {
        why_ = fmt::format("BASP message {} names CAF's type {}, which no ActorTrain message carries ({})", messages_,
                           t, why_refused(t));
        return false;
      }
      payload_left_ -= take;
      i += static_cast<size_t>(take);
      if (payload_left_ == 0) carry_len_ = 0;
      continue;
    }
    auto take = std::min(header_size - have_, n - i);
    std::memcpy(header_ + have_, data + i, take);
    have_ += take;
    i += take;
    if (have_ < header_size) continue;
    have_ = 0;
    if (!check_header()) return false;
  }
  return true;
}

bool basp_check::check_header() {
  auto op = header_[0];
  uint64_t len = (uint64_t{header_[payload_len_offset]} << 24) | (uint64_t{header_[payload_len_offset + 1]} << 16) |
                 (uint64_t{header_[payload_len_offset + 2]} << 8) | uint64_t{header_[payload_len_offset + 3]};
  auto first = messages_ == 0;
  ++messages_;
  auto server = limits_.server_stream;
  auto side = server ? "server" : "client";
  auto handshake = server ? server_handshake : client_handshake;
  if (first && op != handshake) {
    why_ = fmt::format("the first BASP header is operation {} where a {}'s handshake ({}) was due", op, side, handshake);
    return false;
  }
  if (!first && (op < (server ? server_handshake : first_client_op) || op > last_op)) {
    why_ = fmt::format("BASP header {} has operation {}, which no {} sends", messages_, op, side);
    return false;
  }
  auto bound = op == handshake ? limits_.max_handshake_payload : limits_.max_payload;
  if (len > bound) {
    why_ = fmt::format("a BASP header announced {} bytes (at most {} here)", len, bound);
    return false;
  }
  payload_left_ = len;
  return true;
}

}  // namespace actortrain::detail
