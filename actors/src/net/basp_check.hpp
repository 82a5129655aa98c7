#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// What the BASP guard (basp_guard.hpp) reads of a peer's byte stream before any of it
// reaches CAF (a client's, or with server_stream a server's that our node dialed): the stream is cut into BASP 0.17 headers (32 bytes) and the payloads they
// announce, and each header is checked before its payload is let through:
//  - the first message is the client's handshake (operation 1; CAF 0.17 sends it again
//    once the server's arrived), and a handshake's payload is small (it names a node and
//    the application: `max_handshake_payload`);
//  - every later one is an operation a client sends (1 to 6) with a payload of at most
//    `max_payload`, the largest message this job can legitimately send;
//  - CAF's own BASP broker would reserve whatever a header announces (up to 4 GiB)
//    before reading it, and aborts on 0xFFFFFFFF;
//  - no payload may name a type of CAF's that `refused_caf_type` refuses (each message
//    names its element types).
// A refusal is final: the connection is closed, nothing more is read.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace actortrain::detail {

/// CAF 0.17 writes a message's element types by name ("@<>+@str+@charbuf") and builds
/// each element from its name when it reads one, so a peer's bytes choose which of CAF's
/// deserializers run. Two of CAF 0.17.6's own are unsafe on a peer's bytes, and no
/// ActorTrain message carries either type:
///  - config_value ("@config_value") throws out of the deserializer on an unknown variant
///    index, which ends the node (tools/fuzzers/known/caf_config_value);
///  - std::vector<char> ("@charbuf") resizes to the length the bytes announce before it
///    checks that the bytes hold it: 5 bytes make it allocate and zero 4 GiB
///    (tools/fuzzers/known/caf_charbuf).
/// The name of the first such type that `bytes` contain anywhere (a nested message's names
/// are in them too), or "" when none. A message whose own strings hold one of these names
/// is refused too: none of ActorTrain's does.
std::string_view refused_caf_type(std::string_view bytes);

/// The longest name refused_caf_type looks for.
inline constexpr size_t longest_refused_caf_type = 13;

class basp_check {
 public:
  static constexpr size_t header_size = 32;
  static constexpr size_t payload_len_offset = 4;  // a big-endian uint32

  struct limits {
    uint64_t max_payload = uint64_t{64} << 20;
    uint64_t max_handshake_payload = uint64_t{64} << 10;
    /// The stream of a server our node dialed: the first message is the server's
    /// handshake (operation 0), and every later one an operation of 0 to 6.
    bool server_stream = false;
  };

  explicit basp_check(limits l) : limits_(l) {}

  /// Reads `n` more bytes of the client's stream. True while every header so far is
  /// within bounds; false once one is not (then why() says which and why, and every
  /// later call is false too).
  bool feed(const char* data, size_t n);

  /// The client's handshake, header and payload, has gone through.
  bool past_handshake() const { return messages_ > 1 || (messages_ == 1 && payload_left_ == 0); }
  /// Why the stream was refused ("" while it is not).
  const std::string& why() const { return why_; }
  /// Whole headers read so far.
  uint64_t headers() const { return messages_; }

 private:
  bool check_header();
  std::string_view names_refused_type(const char* data, size_t n);

  limits limits_;
  unsigned char header_[header_size] = {};
  size_t have_ = 0;            // bytes of the current header collected
  uint64_t payload_left_ = 0;  // payload bytes of the current message still to pass
  uint64_t messages_ = 0;      // headers read whole
  char carry_[longest_refused_caf_type - 1] = {};  // the current payload's last bytes (a name cut across reads)
  size_t carry_len_ = 0;
  std::string why_;
};

}  // namespace actortrain::detail
