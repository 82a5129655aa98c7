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

constexpr std::string_view allocates = "CAF 0.17.6 allocates and zeroes whatever length its bytes announce, up to 4 GiB";
constexpr std::string_view throws = "CAF 0.17.6 throws out of its deserializer on an unknown variant index";

// refused_caf_content in basp_check.hpp says why each is here.
constexpr refused_content refused[] = {
  {"@charbuf", "CAF's type @charbuf (std::vector<char>)", allocates},
  {"@new_data_msg", "CAF's type @new_data_msg (a std::vector<char>)", allocates},
  {"@config_value", "CAF's config_value type", throws},
  {"+settings", "CAF's type settings (of config_values)", throws},
  {"@downstream_msg", "CAF's stream message @downstream_msg", throws},
  {"@upstream_msg", "CAF's stream message @upstream_msg", throws},
  {"@open_stream_msg", "CAF's stream message @open_stream_msg", "ActorTrain opens no CAF streams"},
  {"@duration", "CAF's type @duration",
   "CAF 0.17.6 reads its unit unchecked, and printing it (as CAF does with a message no handler takes) indexes "
   "a table with it: a crash"},
  {"@group", "CAF's group types",
   "CAF 0.17.6 makes and keeps an actor for every new group name a peer sends"},
};

constexpr size_t longest_pattern() {
  size_t n = 0;
  for (auto& r : refused) n = std::max(n, r.pattern.size());
  return n;
}
static_assert(longest_pattern() == longest_refused_pattern);

}  // namespace

const refused_content* refused_caf_content(std::string_view bytes) {
  for (auto& r : refused)
    if (bytes.find(r.pattern) != std::string_view::npos) return &r;
  return nullptr;
}

const refused_content* basp_check::holds_refused_content(const char* data, size_t n) {
  // Across the cut: what the last chunk ended with, then this chunk's start.
  constexpr auto keep = sizeof carry_;
  if (carry_len_ > 0) {
    char joint[2 * keep];
    std::memcpy(joint, carry_, carry_len_);
    auto more = std::min(n, keep);
    std::memcpy(joint + carry_len_, data, more);
    if (auto r = refused_caf_content(std::string_view(joint, carry_len_ + more))) return r;
  }
  if (auto r = refused_caf_content(std::string_view(data, n))) return r;
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
  return nullptr;
}

bool basp_check::feed(const char* data, size_t n) {
  if (!why_.empty()) return false;
  for (size_t i = 0; i < n;) {
    if (payload_left_ > 0) {
      auto take = std::min<uint64_t>(payload_left_, n - i);
      if (auto r = holds_refused_content(data + i, static_cast<size_t>(take))) {
        why_ = fmt::format("BASP message {} holds {}, which no ActorTrain message carries ({})", messages_, r->what,
                           r->why);
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
