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
//  - no payload may hold what `refused_caf_content` refuses (types of CAF's that are
//    unsafe to read from a peer).
// A refusal is final: the connection is closed, nothing more is read.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace actortrain::detail {

/// CAF 0.17 writes a message's element types by name ("@<>+@str+@charbuf") and builds
/// each element from its name when it reads one, so a peer's bytes choose which of CAF's
/// deserializers run. Some of CAF 0.17.6's own are unsafe on a peer's bytes (the inputs
/// in tools/fuzzers/known/ show most), and no ActorTrain message carries any of them:
///  - a std::vector<char> ("@charbuf", and the buffer of the middleman's "@new_data_msg")
///    is resized to the length the bytes announce before CAF checks that they hold it:
///    21 bytes make it allocate and zero 4 GiB;
///  - a caf::variant with an unknown index throws out of the deserializer, which on BASP
///    ends the node. Variants are in config_value (any type name holding "@config_value",
///    and "settings") and in CAF's stream messages ("@downstream_msg", "@upstream_msg";
///    "@open_stream_msg" goes with them: ActorTrain opens no CAF streams);
///  - a "@duration" is read with its unit unchecked, and printing it indexes a table with
///    that unit: CAF prints a message that no handler takes (print_and_drop), so one such
///    message to a published actor is a crash;
///  - a "@group" (and "@group_down") makes the node spawn and keep an actor for every new
///    group name.
/// A payload is refused when one of these names appears anywhere in it (a nested
/// message's names are in it too); a string of a message that happens to hold one is
/// refused as well (none of ActorTrain's messages names a CAF type in a string).
/// Not refused, and open (docs/security.md): the host of a node id of CAF's uri kind is
/// a variant too, and a node id is in every actor handle, with no type name to find. Its
/// kind's 8 bytes (the atom "uri", 00 00 00 00 00 3f ad ee) are also the big-endian
/// integer 4173294, which a step number or a count of a legitimate message may be.
struct refused_content {
  std::string_view pattern;  ///< the bytes looked for
  std::string_view what;     ///< what they are, for a log line
  std::string_view why;      ///< why CAF 0.17.6 cannot read it from a peer
};

/// The first refused content that `bytes` hold anywhere, or nullptr when none.
const refused_content* refused_caf_content(std::string_view bytes);

/// The longest pattern refused_caf_content looks for.
inline constexpr size_t longest_refused_pattern = 16;

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
  const refused_content* holds_refused_content(const char* data, size_t n);

  limits limits_;
  unsigned char header_[header_size] = {};
  size_t have_ = 0;            // bytes of the current header collected
  uint64_t payload_left_ = 0;  // payload bytes of the current message still to pass
  uint64_t messages_ = 0;      // headers read whole
  char carry_[longest_refused_pattern - 1] = {};  // the current payload's last bytes (a name cut across reads)
  size_t carry_len_ = 0;
  std::string why_;
};

}  // namespace actortrain::detail
