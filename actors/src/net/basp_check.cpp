// The BASP stream check (basp_check.hpp).
#include "basp_check.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace actortrain::detail {

namespace {

constexpr unsigned char server_handshake = 0x00;
constexpr unsigned char client_handshake = 0x01;
constexpr unsigned char first_client_op = 0x01;  // client_handshake (CAF 0.17 sends it twice)
constexpr unsigned char last_op = 0x06;          // heartbeat (either side)

}  // namespace

bool basp_check::feed(const char* data, size_t n) {
  if (!why_.empty()) return false;
  for (size_t i = 0; i < n;) {
    if (payload_left_ > 0) {
      auto take = std::min<uint64_t>(payload_left_, n - i);
      payload_left_ -= take;
      i += static_cast<size_t>(take);
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
