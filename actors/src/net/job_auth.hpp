#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// Membership of a plain-BASP job, proved before CAF sees a byte. The job fingerprint and
// the cluster's addresses are public (anyone on the host can read a process list or a
// cluster file) and prove nothing; the job's secret, a file only the user can read,
// does. A node's guard (basp_guard.hpp) runs the server side of this exchange on every
// connection it accepts, and hands only a member's connection to CAF's BASP broker; the
// dialer (dial.hpp) runs the client side on its own socket before it gives the socket to
// its broker.
//
// The exchange (fixed sizes: no length is read from the peer):
//   server -> client  hello:  "ATJOB1\0\0" + 32 random bytes (ns)
//   client -> server  answer: 32 random bytes (nc) + HMAC-SHA256(key, "client" ns nc)
//   server -> client  proof:  HMAC-SHA256(key, "server" nc ns), or 32 zero bytes when
//                             the answer was wrong (then the server closes)
// key = SHA-256 of the secret file's bytes. Both sides prove the key without sending
// it; fresh nonces on both sides make an answer recorded from one connection useless on
// another. The bytes after the proof are BASP's, in the clear: the secret proves
// membership, not privacy (TLS gives both, and needs no secret).

#include <actortrain/actors/net/sockets.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace actortrain::detail {

using job_key = std::array<unsigned char, 32>;

/// Reads the job's secret at `path` and derives the key. Refused with a
/// cluster_file_error naming `path` and what is wrong: a file that cannot be opened, is
/// not a regular file, belongs to another user, can be read or written by group or others
/// (mode & 077), or holds fewer than 16 or more than 4096 bytes.
job_key read_job_secret(const std::string& path);

/// The key as 64 hex digits, and back (nullopt-free: throws std::invalid_argument).
std::string key_to_hex(const job_key& key);
job_key key_from_hex(const std::string& hex);

namespace auth {

constexpr size_t nonce_size = 32;
constexpr size_t hello_size = 8 + nonce_size;
constexpr size_t answer_size = nonce_size + 32;
constexpr size_t proof_size = 32;

using hello = std::array<unsigned char, hello_size>;
using answer = std::array<unsigned char, answer_size>;
using proof = std::array<unsigned char, proof_size>;

/// The server's side of one connection.
class server {
 public:
  explicit server(const job_key& key);  ///< draws its nonce
  const hello& greeting() const { return hello_; }
  /// Whether `a` proves the key for this connection's nonce; `out` is what to send back
  /// (the proof, or the refusal: 32 zero bytes).
  bool admit(const answer& a, proof& out) const;

 private:
  job_key key_;
  hello hello_;
};

/// The client's side. Throws `refused` when the peer is not a member of this job.
class client {
 public:
  explicit client(const job_key& key) : key_(key) {}
  /// The answer to a server's greeting; throws refused when `h` is not an ActorTrain
  /// job's greeting (e.g. a TLS node, which waits for the client to speak).
  answer respond(const hello& h);
  /// Throws refused when `p` is the server's refusal (our answer was wrong) or does not
  /// prove the key (the peer is not of this job).
  void check(const proof& p) const;

 private:
  job_key key_;
  std::array<unsigned char, nonce_size> ns_{}, nc_{};
};

/// The peer is not a member of this job (final: no point in dialing again).
class refused : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Connects to host:port and runs the client side within `bound` in total. The
/// connected socket (blocking, TCP_NODELAY) is then the job's: its next bytes are BASP's.
/// Throws refused when the peer refuses our answer or does not prove the key,
/// net::socket_error for the network's failures (refused, cut, timed out: worth another
/// try).
net::unique_fd dial_member(const std::string& host, uint16_t port, const job_key& key,
                           std::chrono::milliseconds bound);

}  // namespace auth
}  // namespace actortrain::detail
