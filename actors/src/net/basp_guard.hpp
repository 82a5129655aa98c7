#pragma once
// A guard in front of a plain-BASP port. CAF 0.17.6's BASP broker reads a 32-byte header
// and resizes its read buffer to the payload length it announces (up to 4 GiB) before
// any handshake, so any local process could make a node reserve gigabytes. The node
// publishes its actor on a loopback port of the kernel's choosing; the guard listens at
// the task's address and relays every connection to it, reading the client's stream
// header by header: a header announcing more than `max_payload` bytes closes that
// connection (and is logged), without ever buffering a payload. Replies pass unread.
// TLS nodes need no guard: caf::openssl authenticates before BASP reads a byte.
//
// Threads: an acceptor, and two relays per connection (a node has a few). No CAF.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace actortrain::detail {

class basp_guard {
 public:
  using log_fn = std::function<void(const std::string&)>;

  /// Listens on host:port (SO_REUSEADDR) and relays to 127.0.0.1:`inner_port`. Throws
  /// net::socket_error (a std::runtime_error) naming the address when it cannot listen.
  basp_guard(const std::string& host, uint16_t port, uint16_t inner_port, uint64_t max_payload, log_fn log);
  /// Stops accepting, closes every relayed connection and joins the threads.
  ~basp_guard();
  basp_guard(const basp_guard&) = delete;
  basp_guard& operator=(const basp_guard&) = delete;

  /// The port it listens on (the given one, or the kernel's pick for 0).
  uint16_t port() const;
  /// Connections closed for an oversized header, since the start.
  size_t refused() const;

  /// The byte offset and size of the payload length in a BASP 0.17 header (network order).
  static constexpr size_t header_size = 32;
  static constexpr size_t payload_len_offset = 4;

 private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

}  // namespace actortrain::detail
