#pragma once
// The data plane's wire (private to actors/src/net/; data_plane.hpp has the design):
// the greeting and its token, frames of a serialized message with its tensors beside
// it, the shared-memory region and its rings, and a socket link that sends and receives
// frames with every announced length checked before anything is allocated. The ps side
// (data_plane.cpp) and the worker side (data_plane_client.cpp) both speak it.
#include <actortrain/actors/net/data_plane.hpp>

#include <actortrain/actors/core/errors.hpp>
#include <actortrain/actors/core/messages.hpp>
#include <actortrain/actors/net/sockets.hpp>

#include <caf/actor_companion.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/scoped_execution_unit.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "../core/thread_name.hpp"
#include "bf16.hpp"
#include "tls.hpp"


namespace actortrain::data_plane::wire {

using closed_atom = caf::atom_constant<caf::atom("dp_closed")>;

constexpr uint32_t hello_magic = 0x48445441;  // "ATDH"
constexpr uint32_t frame_magic = 0x46445441;  // "ATDF"
constexpr uint32_t protocol_version = 1;
constexpr size_t token_chars = 32;
constexpr uint32_t max_tensors = 1u << 16;
constexpr uint64_t max_meta_bytes = uint64_t{1} << 30;

struct frame_header {
  uint32_t magic = frame_magic;
  uint32_t tensors = 0;
  uint64_t id = 0;
  uint64_t meta_bytes = 0;
};
static_assert(sizeof(frame_header) == 24, "frame header layout");

struct shape_entry {
  uint64_t rows = 0;
  uint64_t cols = 0;
};
static_assert(sizeof(shape_entry) == 16, "shape entry layout");

// A shape entry whose rows have this bit set: the tensor's floats travel as bfloat16
// (bf16.hpp), 2 bytes each, on the stream (never in shared memory).
constexpr uint64_t bf16_flag = uint64_t{1} << 63;

// Records of a TLS link gather in a buffer of this size before they are written to the
// socket (tls::session::buffer_writes), and a reader waiting for more than this much of
// a read has the socket wake it only once this much has come (SO_RCVLOWAT).
constexpr size_t tls_batch_bytes = 256 * 1024;
constexpr int tls_wake_bytes = 128 * 1024;

struct hello {
  uint32_t magic = hello_magic;
  uint32_t version = protocol_version;
  char token[token_chars] = {};
};
static_assert(sizeof(hello) == 40, "hello layout");

// The socket helpers (net/sockets.hpp) in the wire's way of reporting: "" when done,
// else what went wrong, as text for the log and the requester's error.

// Reads exactly `n` bytes; "eof" when the peer closed before the first one.
std::string read_exactly(int fd, void* p, size_t n);

// Writes every byte of `iov` (partial writes continue where they stopped).
std::string write_all(int fd, std::vector<iovec>& iov);

// TCP_NODELAY and the receive and send timeouts (0: none) of a connection.
std::string tune(int fd, std::chrono::milliseconds receive_timeout, std::chrono::milliseconds send_timeout);

// Version 2 of the greeting: the hello, then where the server finds the shared-memory
// region the client made for the tensors of this connection: a sealed memfd, by its
// /proc/PID/fd/N path. The server answers 2 when it mapped it, 1 when it did not (frames
// then carry their floats inline); the client closes the memfd either way, so the region
// lives exactly as long as the two mappings and leaves no name behind.
constexpr uint32_t protocol_shm = 2;
constexpr size_t shm_name_chars = 64;
struct shm_offer {
  char name[shm_name_chars] = {};
};
static_assert(sizeof(shm_offer) == 64, "offer layout");

// A frame whose tensor count has this bit set carries its floats in the sender's ring of
// the connection's region, from the 8-byte position that follows the shape table.
constexpr uint32_t in_shm_flag = 0x80000000u;

// The region: a header page (magic, ring size, then each ring's release position on a
// cache line of its own), then ring 0 (written by the client) and ring 1 (by the server).
// Positions count bytes since the start and only grow; a frame's floats never wrap.
constexpr uint64_t region_magic = 0x4d48535444544100ull;  // "\0ATDTSHM"
constexpr uint64_t ring_bytes = uint64_t{8} << 20;
constexpr uint64_t region_header = 4096;
constexpr uint64_t shm_threshold = 512 * 1024;  // smaller payloads go inline (measured: no faster below)

struct shared_region {
  void* base = nullptr;
  uint64_t bytes = 0;
  uint64_t ring = 0;  // bytes per ring
  ~shared_region() {
    if (base) ::munmap(base, bytes);
  }
  std::atomic<uint64_t>& released(int r) {
    return *reinterpret_cast<std::atomic<uint64_t>*>(static_cast<char*>(base) + 64 * (1 + r));
  }
  char* ring_data(int r) { return static_cast<char*>(base) + region_header + static_cast<uint64_t>(r) * ring; }
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "positions shared between processes");

// Maps `bytes` of the shared-memory object `fd` as a region (closing `fd`), every page
// faulted in now, not mid-frame; null when mmap fails (errno says why).
std::shared_ptr<shared_region> map_shared(int fd, uint64_t bytes);

// Makes and maps a fresh region (data_plane_wire.cpp says how it is sealed).
std::shared_ptr<shared_region> make_region(net::unique_fd& fd, std::string& why);
// Where the server opens the memfd `fd` of this process.
std::string offer_name(const net::unique_fd& fd);

// Maps the region a client named; null when it is not one of ours (data_plane_wire.cpp).
std::shared_ptr<shared_region> map_region(const shm_offer& offer);

std::string fresh_token();

// Compares without stopping at the first difference (no timing hint for a guesser).
bool same_token(const char* a, const std::string& b);

// Installs a side channel on this thread for one (de)serialization.
struct side_scope {
  detail::tensor_side_channel channel;
  explicit side_scope() { detail::side_channel() = &channel; }
  ~side_scope() { detail::side_channel() = nullptr; }
  side_scope(const side_scope&) = delete;
  side_scope& operator=(const side_scope&) = delete;
};

// What the frames being read on all of a server's connections may hold at once: a
// frame takes its bytes (message and tensors) before anything is allocated for it and
// gives them back once it is read, so members that announce big frames and then stall
// make the node hold at most this much, however many connections they open.
class byte_budget {
 public:
  explicit byte_budget(uint64_t bytes) : left_(bytes), total_(bytes) {}
  /// Takes `n` bytes, waiting up to `wait` for other frames to give theirs back; false
  /// when they did not (or `n` is more than the whole budget).
  bool take(uint64_t n, std::chrono::milliseconds wait) {
    std::unique_lock<std::mutex> g{mtx_};
    if (n > total_) return false;
    if (!freed_.wait_for(g, wait, [&] { return left_ >= n; })) return false;
    left_ -= n;
    return true;
  }
  void give(uint64_t n) {
    {
      std::lock_guard<std::mutex> g{mtx_};
      left_ += n;
    }
    freed_.notify_all();
  }
  uint64_t total() const { return total_; }
  uint64_t left() const {
    std::lock_guard<std::mutex> g{mtx_};
    return left_;
  }

 private:
  mutable std::mutex mtx_;
  std::condition_variable freed_;
  uint64_t left_, total_;
};

// One connection's socket, written by one thread at a time; closed when the last user
// lets go (shutdown() before that wakes a blocked reader). Plain, the socket is blocking
// and its SO_RCVTIMEO/SO_SNDTIMEO bound each wait. With TLS (between hosts), `tls` runs
// over it, non-blocking: the reader thread and the writers take turns on the session
// under tls_mtx (an OpenSSL session is not for two threads at once) and wait for the
// socket outside it, each wait bounded as the plain socket's would be.
struct socket_link {
  net::unique_fd fd;
  std::unique_ptr<detail::tls::session> tls;
  std::mutex tls_mtx;
  std::chrono::milliseconds read_idle{0}, write_idle{0};  // 0: no bound (as SO_RCVTIMEO 0)
  std::mutex write_mtx;
  // The shared-memory region (null: floats inline), the ring this side writes and the
  // one it reads; the next free position of the first (under write_mtx) and the next
  // expected one of the second (the reader thread's).
  std::shared_ptr<shared_region> region;
  int out_ring = 0;
  uint64_t out_next = 0, in_next = 0;
  std::atomic<uint64_t> frames_in_shm{0};
  // On a link without shared memory (between hosts), tensors marked reducible
  // (tensor::reducible) go as bfloat16 ("wire_floats": "bf16"), narrowed a block at a
  // time into the writer's scratch (under write_mtx).
  bool bf16 = false;
  std::vector<uint16_t> narrow_out;
  // With TLS, the reader thread's SO_RCVLOWAT now (1: the kernel's default), and the
  // most it may be (a quarter of the receive buffer, at most tls_wake_bytes).
  int wake_bytes = 1;
  int wake_cap = tls_wake_bytes;
  // The most bytes a frame read here may announce, message and tensors each (the job's
  // largest legitimate message; the protocol's own bound when nobody said).
  uint64_t max_frame_bytes = max_meta_bytes;
  // The server's budget for frames being read (null: none, a client's link), and how
  // long a frame may wait for it.
  std::shared_ptr<byte_budget> budget;
  std::chrono::milliseconds budget_wait{10000};
  explicit socket_link(net::unique_fd f) : fd(std::move(f)) {}
  void shutdown() { ::shutdown(fd.get(), SHUT_RDWR); }

  // TCP_NODELAY and how long a read or a write may wait for the peer (0: for ever). With
  // TLS, after the handshake: the session's writes batched (tls_batch_bytes) and the
  // reader's wake-up threshold bounded by the receive buffer.
  std::string tune(std::chrono::milliseconds read_timeout, std::chrono::milliseconds write_timeout);
  // Exactly `n` bytes: "" when read, "eof" when the peer closed before the first one, else
  // what went wrong.
  std::string read(void* p, size_t n);
  // The same within `bound` in all: "timeout" when it passed.
  std::string read_within(void* p, size_t n, std::chrono::milliseconds bound);
  // Every byte of `iov` (partial writes continue where they stopped); with TLS, sent on
  // from the session's buffer unless `flush` is false (more of the frame follows).
  std::string write(std::vector<iovec>& iov, bool flush = true);

  // Sends `msg` as the frame of request `id`.
  std::string send(caf::actor_system& sys, uint64_t id, const caf::message& msg) {
    std::vector<char> meta;
    std::vector<std::shared_ptr<const model::matrix>> tensors;
    std::vector<bool> side_reducible;
    {
      side_scope side;
      caf::binary_serializer sink{sys, meta};
      if (auto err = sink(const_cast<caf::message&>(msg))) return "cannot serialize a message: " + sys.render(err);
      tensors = std::move(side.channel.out);
      side_reducible = std::move(side.channel.out_reducible);
    }
    frame_header h;
    h.tensors = static_cast<uint32_t>(tensors.size());
    h.id = id;
    h.meta_bytes = meta.size();
    std::vector<shape_entry> shapes(tensors.size());
    uint64_t payload = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      shapes[i] = {static_cast<uint64_t>(tensors[i]->rows()), static_cast<uint64_t>(tensors[i]->cols())};
      payload += static_cast<uint64_t>(tensors[i]->size()) * sizeof(float);
    }
    std::vector<iovec> iov;
    iov.reserve(4 + tensors.size());
    iov.push_back({&h, sizeof h});
    if (!shapes.empty()) iov.push_back({shapes.data(), shapes.size() * sizeof(shape_entry)});
    uint64_t at = 0;
    std::lock_guard<std::mutex> g{write_mtx};
    if (region && payload >= shm_threshold && place(payload, at)) {
      // The floats go into the ring (one copy), and the frame says where.
      char* dst = region->ring_data(out_ring) + at % region->ring;
      for (auto& t : tensors) {
        auto n = static_cast<size_t>(t->size()) * sizeof(float);
        if (n > 0) std::memcpy(dst, t->data(), n);
        dst += n;
      }
      std::atomic_thread_fence(std::memory_order_release);
      h.tensors |= in_shm_flag;
      iov.push_back({&at, sizeof at});
      if (!meta.empty()) iov.push_back({meta.data(), meta.size()});
      return write(iov);
    }
    if (!meta.empty()) iov.push_back({meta.data(), meta.size()});
    // On the stream: each tensor's floats as they are, or, on a link that reduces and
    // has no shared memory (hosts apart; one host sends every bit, whatever a frame's
    // size), narrowed to bfloat16 when the sender allowed it. The shape entries say which
    // before anything is written.
    const bool reduce = bf16 && !region;
    if (reduce)
      for (size_t i = 0; i < tensors.size(); ++i)
        if (side_reducible[i] && tensors[i]->size() > 0) shapes[i].rows |= bf16_flag;
    constexpr size_t narrow_block = 64 * 1024;  // floats per piece: a scratch of 128 KiB
    for (size_t i = 0; i < tensors.size(); ++i) {
      auto& t = tensors[i];
      auto n = static_cast<size_t>(t->size());
      if (n == 0) continue;
      if (!(reduce && side_reducible[i])) {
        iov.push_back({const_cast<float*>(t->data()), n * sizeof(float)});
        continue;
      }
      if (auto e = write(iov, /*flush=*/false); !e.empty()) return e;
      narrow_out.resize(narrow_block);
      for (size_t done = 0; done < n;) {
        auto k = std::min(n - done, narrow_block);
        bf16::narrow(t->data() + done, k, narrow_out.data());
        iov.assign(1, iovec{narrow_out.data(), k * sizeof(uint16_t)});  // iov's own capacity: no allocation a block
        if (auto e = write(iov, /*flush=*/false); !e.empty()) return e;
        done += k;
      }
      iov.clear();
    }
    return write(iov);  // the rest of the frame, and (TLS) out of the session's buffer
  }

 private:
  std::string tls_read(void* p, size_t n, std::optional<std::chrono::steady_clock::time_point> until);
  std::string tls_write(const char* data, size_t n);

  // Finds `n` contiguous bytes in this side's ring (under write_mtx): false when the
  // reader has not released enough yet (the frame then goes inline).
  bool place(uint64_t n, uint64_t& at) {
    auto size = region->ring;
    if (n > size) return false;
    at = out_next;
    if (at % size + n > size) at += size - at % size;  // never wrap inside a frame
    if (at + n - region->released(out_ring).load(std::memory_order_acquire) > size) return false;
    out_next = at + n;
    return true;
  }
};

struct frame {
  uint64_t id = 0;
  caf::message msg;
};

// Reads one frame: "" when `out` holds it, "eof" at a clean end between frames, else
// what was wrong with it (the connection is then unusable).
std::string receive(caf::actor_system& sys, socket_link& link, frame& out);

void say(const log_fn& log, const std::string& text);

}  // namespace actortrain::data_plane::wire
