#include <actortrain/actors/net/data_plane.hpp>

#include <actortrain/actors/core/errors.hpp>
#include <actortrain/actors/core/messages.hpp>
#include <actortrain/actors/worker/shard_routes.hpp>

#include <caf/actor_companion.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/scoped_execution_unit.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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
#include <random>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "socket_io.hpp"
#include "../core/thread_name.hpp"

namespace actortrain::data_plane {

namespace {

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

struct hello {
  uint32_t magic = hello_magic;
  uint32_t version = protocol_version;
  char token[token_chars] = {};
};
static_assert(sizeof(hello) == 40, "hello layout");

using detail::errno_text;
using detail::loopback;
using detail::no_delay;
using detail::read_exactly;
using detail::set_timeout;
using detail::write_all;

// Version 2 of the greeting: the hello, then the name of a shared-memory region the
// client made for the tensors of this connection. The server answers 2 when it mapped
// it, 1 when it did not (frames then carry their floats inline); the client unlinks the
// name either way, so a killed process leaves nothing behind in /dev/shm.
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
std::shared_ptr<shared_region> map_shared(int fd, uint64_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  int saved = errno;
  ::close(fd);
  errno = saved;
  if (p == MAP_FAILED) return nullptr;
  auto r = std::make_shared<shared_region>();
  r->base = p;
  r->bytes = bytes;
  r->ring = ring_bytes;
  return r;
}

// Makes and maps a fresh region; null (and `why`) when the system has no /dev/shm.
std::shared_ptr<shared_region> make_region(const std::string& name, std::string& why) {
  int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    why = errno_text();
    return nullptr;
  }
  constexpr uint64_t bytes = region_header + 2 * ring_bytes;
  // Allocated now, not on first touch: a /dev/shm too small for it (a container's 64 MiB)
  // says so here, and the connection keeps its floats on TCP, instead of a SIGBUS later.
  int err = ::ftruncate(fd, static_cast<off_t>(bytes)) != 0 ? errno : ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (err != 0) ::close(fd);
  auto r = err == 0 ? map_shared(fd, bytes) : nullptr;
  if (!r) {
    why = err != 0 ? std::strerror(err) : errno_text();
    ::shm_unlink(name.c_str());
    return nullptr;
  }
  auto* h = static_cast<uint64_t*>(r->base);
  h[0] = region_magic;
  h[1] = ring_bytes;
  r->released(0).store(0);
  r->released(1).store(0);
  return r;
}

// Maps the region a client named; null when it is not one of ours (wrong size or magic).
std::shared_ptr<shared_region> map_region(const shm_offer& offer) {
  std::string name(offer.name, strnlen(offer.name, shm_name_chars));
  if (name.rfind("/actortrain-dp-", 0) != 0 || name.find('/', 1) != std::string::npos) return nullptr;
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) return nullptr;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != region_header + 2 * ring_bytes) {
    ::close(fd);
    return nullptr;
  }
  auto r = map_shared(fd, static_cast<uint64_t>(st.st_size));
  if (!r) return nullptr;
  auto* h = static_cast<uint64_t*>(r->base);
  if (h[0] != region_magic || h[1] != ring_bytes) return nullptr;
  return r;
}


std::string fresh_token() {
  std::random_device rd;
  std::string t;
  for (int i = 0; i < 4; ++i) t += fmt::format("{:08x}", rd());
  return t;
}

// Compares without stopping at the first difference (no timing hint for a guesser).
bool same_token(const char* a, const std::string& b) {
  if (b.size() != token_chars) return false;
  unsigned diff = 0;
  for (size_t i = 0; i < token_chars; ++i) diff |= static_cast<unsigned>(a[i] ^ b[i]);
  return diff == 0;
}

// Installs a side channel on this thread for one (de)serialization.
struct side_scope {
  detail::tensor_side_channel channel;
  explicit side_scope() { detail::side_channel() = &channel; }
  ~side_scope() { detail::side_channel() = nullptr; }
  side_scope(const side_scope&) = delete;
  side_scope& operator=(const side_scope&) = delete;
};

// One connection's socket, written by one thread at a time; closed when the last user
// lets go (shutdown() before that wakes a blocked reader).
struct socket_link {
  int fd = -1;
  std::mutex write_mtx;
  // The shared-memory region (null: floats inline), the ring this side writes and the
  // one it reads; the next free position of the first (under write_mtx) and the next
  // expected one of the second (the reader thread's).
  std::shared_ptr<shared_region> region;
  int out_ring = 0;
  uint64_t out_next = 0, in_next = 0;
  std::atomic<uint64_t> frames_in_shm{0};
  explicit socket_link(int f) : fd(f) {}
  ~socket_link() {
    if (fd >= 0) ::close(fd);
  }
  void shutdown() { ::shutdown(fd, SHUT_RDWR); }

  // Sends `msg` as the frame of request `id`.
  std::string send(caf::actor_system& sys, uint64_t id, const caf::message& msg) {
    std::vector<char> meta;
    std::vector<std::shared_ptr<const model::matrix>> tensors;
    {
      side_scope side;
      caf::binary_serializer sink{sys, meta};
      if (auto err = sink(const_cast<caf::message&>(msg))) return "cannot serialize a message: " + sys.render(err);
      tensors = std::move(side.channel.out);
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
      return write_all(fd, iov);
    }
    if (!meta.empty()) iov.push_back({meta.data(), meta.size()});
    for (auto& t : tensors)
      if (t->size() > 0) iov.push_back({const_cast<float*>(t->data()), static_cast<size_t>(t->size()) * sizeof(float)});
    return write_all(fd, iov);
  }

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
std::string receive(caf::actor_system& sys, socket_link& link, frame& out) {
  int fd = link.fd;
  frame_header h;
  if (auto e = read_exactly(fd, &h, sizeof h); !e.empty()) return e;
  if (h.magic != frame_magic) return fmt::format("not a data-plane frame (magic {:#010x})", h.magic);
  bool in_shm = (h.tensors & in_shm_flag) != 0;
  h.tensors &= ~in_shm_flag;
  if (in_shm && !link.region) return "a frame in shared memory on a connection without it";
  if (h.tensors > max_tensors) return fmt::format("a frame announced {} tensors (at most {})", h.tensors, max_tensors);
  if (h.meta_bytes > max_meta_bytes) return fmt::format("a frame announced {} bytes of message", h.meta_bytes);
  std::vector<shape_entry> shapes(h.tensors);
  if (h.tensors > 0)
    if (auto e = read_exactly(fd, shapes.data(), shapes.size() * sizeof(shape_entry)); !e.empty())
      return e == "eof" ? "the peer closed the connection inside a frame" : e;
  for (auto& s : shapes)
    if (s.rows > max_wire_floats || s.cols > max_wire_floats || (s.cols != 0 && s.rows > max_wire_floats / s.cols) ||
        (s.rows == 0 && s.cols == 0))
      return fmt::format("a frame announced a {} x {} tensor", s.rows, s.cols);
  uint64_t at = 0, payload = 0;
  const char* src = nullptr;
  if (in_shm) {
    if (auto e = read_exactly(fd, &at, sizeof at); !e.empty()) return e == "eof" ? "the peer closed the connection inside a frame" : e;
    for (auto& s : shapes) payload += s.rows * s.cols * sizeof(float);  // each bounded above
    auto size = link.region->ring;
    // Only where the writer may have put it: at or after what this side released,
    // within one ring, not wrapping.
    if (at < link.in_next || payload > size || at % size + payload > size || at - link.in_next > size)
      return fmt::format("a frame placed its {} bytes at {} of a ring of {} (expected from {})", payload, at, size,
                         link.in_next);
    src = link.region->ring_data(1 - link.out_ring) + at % size;
  }
  std::vector<char> meta(static_cast<size_t>(h.meta_bytes));
  if (!meta.empty())
    if (auto e = read_exactly(fd, meta.data(), meta.size()); !e.empty())
      return e == "eof" ? "the peer closed the connection inside a frame" : e;
  side_scope side;
  side.channel.in.reserve(shapes.size());
  if (in_shm) std::atomic_thread_fence(std::memory_order_acquire);
  for (auto& s : shapes) {
    auto m = std::make_shared<model::matrix>(static_cast<Eigen::Index>(s.rows), static_cast<Eigen::Index>(s.cols));
    auto n = static_cast<size_t>(m->size()) * sizeof(float);
    if (in_shm) {
      if (n > 0) std::memcpy(m->data(), src, n);
      src += n;
    } else if (n > 0) {
      if (auto e = read_exactly(fd, m->data(), n); !e.empty()) return e == "eof" ? "the peer closed the connection inside a frame" : e;
    }
    side.channel.in.push_back(std::move(m));
  }
  if (in_shm) {
    // Copied out: the writer may use the bytes again.
    link.in_next = at + payload;
    link.region->released(1 - link.out_ring).store(link.in_next, std::memory_order_release);
    ++link.frames_in_shm;
  }
  caf::binary_deserializer source{sys, meta};
  if (auto err = source(out.msg)) return "a malformed message: " + sys.render(err);
  if (source.remaining() != 0) return fmt::format("{} bytes after the message", source.remaining());
  if (side.channel.next != side.channel.in.size())
    return fmt::format("the message used {} of the frame's {} tensors", side.channel.next, side.channel.in.size());
  out.id = h.id;
  return {};
}

void say(const log_fn& log, const std::string& text) {
  if (log) log(text);
}

// -- the ps side -------------------------------------------------------------------

// Where the shard's replies of one connection go: a companion actor (its enqueue runs
// on the replying thread, the shard's own) hands each reply to the connection's writer
// thread, which writes it back as the frame of its request. The reader thread puts the
// requests into the shard's mailbox itself, with the companion as their sender: per
// request, two thread hand-offs (reader to shard, shard to writer) and no timer. The
// writer keeps a peer that does not read (SIGSTOP) from stalling the shard's thread.
struct reply_sink {
  std::mutex mtx;
  std::condition_variable cv;
  std::deque<std::pair<uint64_t, caf::message>> replies;  // (frame id, reply)
  std::map<uint64_t, uint64_t> frame_of;                   // request id -> frame id
  uint64_t next_request = 0;                                // the reader's
  bool closed = false;

  // The request id for frame `id` (never 0, below CAF's 60 bits, whatever the peer sent).
  uint64_t open(uint64_t frame) {
    std::lock_guard<std::mutex> g{mtx};
    next_request = next_request % caf::message_id::request_id_mask + 1;
    frame_of[next_request] = frame;
    return next_request;
  }

  void take(caf::mailbox_element& e) {
    if (!e.mid.is_response()) return;  // only the shard's answers
    std::lock_guard<std::mutex> g{mtx};
    auto i = frame_of.find(e.mid.request_id().integer_value());
    if (i == frame_of.end() || closed) return;
    replies.emplace_back(i->second, e.move_content_to_message());
    frame_of.erase(i);
    cv.notify_one();
  }

  void close() {
    std::lock_guard<std::mutex> g{mtx};
    closed = true;
    cv.notify_one();
  }

  // The writer thread: every reply, in the order the shard gave them, until closed.
  void write_all_replies(caf::actor_system& sys, socket_link& link) {
    detail::name_this_thread("at.dp.write");
    std::unique_lock<std::mutex> lock{mtx};
    for (;;) {
      cv.wait(lock, [this] { return closed || !replies.empty(); });
      if (closed) return;
      auto [id, reply] = std::move(replies.front());
      replies.pop_front();
      lock.unlock();
      auto e = link.send(sys, id, reply);
      lock.lock();
      if (!e.empty()) {
        link.shutdown();  // the reader sees it and ends the connection
        return;
      }
    }
  }
};

bool data_plane_request(const caf::message& msg) {
  if (msg.size() == 0 || !msg.match_element<caf::atom_value>(0)) return false;
  auto kind = msg.get_as<caf::atom_value>(0);
  return kind == pull_atom::value || kind == push_atom::value || kind == pull_rows_atom::value;
}

}  // namespace

struct server::impl : std::enable_shared_from_this<server::impl> {
  caf::actor_system& sys;
  caf::actor shard;
  std::chrono::milliseconds timeout;
  log_fn log;
  int listener = -1;
  uint16_t port = 0;
  std::string token = fresh_token();
  std::atomic<bool> stopping{false};
  std::atomic<size_t> open{0};
  std::atomic<size_t> refused{0};
  std::atomic<size_t> shared{0};
  std::atomic<size_t> served{0};
  std::thread acceptor;

  struct connection {
    std::shared_ptr<socket_link> link;
    std::thread reader;
    std::atomic<bool> done{false};
  };
  std::mutex mtx;
  std::list<connection> connections;

  impl(caf::actor_system& s, caf::actor sh, std::chrono::milliseconds t, log_fn l)
      : sys(s), shard(std::move(sh)), timeout(t), log(std::move(l)) {}

  void refuse(const std::string& why) {
    ++refused;
    say(log, "data plane: closed a connection: " + why);
  }

  // The reader thread of one accepted connection: the token, then frames until the end.
  void serve(connection& c) {
    detail::name_this_thread("at.dp.serve");
    int fd = c.link->fd;
    set_timeout(fd, SO_RCVTIMEO, timeout);
    set_timeout(fd, SO_SNDTIMEO, timeout);
    no_delay(fd);
    hello h;
    auto e = read_exactly(fd, &h, sizeof h);
    if (!e.empty() || h.magic != hello_magic || (h.version != protocol_version && h.version != protocol_shm) ||
        !same_token(h.token, token)) {
      refuse(!e.empty() ? "no greeting (" + e + ")" : "a wrong greeting or token");
      c.link->shutdown();
      c.done = true;
      return;
    }
    char ok = 1;
    if (h.version == protocol_shm) {
      shm_offer offer;
      if (auto oe = read_exactly(fd, &offer, sizeof offer); !oe.empty()) {
        refuse("a greeting without its shared-memory offer (" + oe + ")");
        c.link->shutdown();
        c.done = true;
        return;
      }
      if (auto region = map_region(offer)) {
        c.link->region = std::move(region);
        c.link->out_ring = 1;
        ok = 2;
        ++shared;
      }
    }
    if (::send(fd, &ok, 1, MSG_NOSIGNAL) != 1) {
      c.link->shutdown();
      c.done = true;
      return;
    }
    set_timeout(fd, SO_RCVTIMEO, std::chrono::milliseconds(0));  // idle between frames is fine
    ++open;
    auto sink = std::make_shared<reply_sink>();
    auto companion = sys.spawn<caf::actor_companion, caf::hidden>();
    auto* comp = static_cast<caf::actor_companion*>(caf::actor_cast<caf::abstract_actor*>(companion));
    comp->on_enqueue([sink](caf::mailbox_element_ptr e) {
      if (e) sink->take(*e);
    });
    auto sender = caf::actor_cast<caf::strong_actor_ptr>(companion);
    std::thread writer([this, sink, link = c.link] { sink->write_all_replies(sys, *link); });
    for (;;) {
      frame f;
      auto err = receive(sys, *c.link, f);
      if (err == "eof" || stopping) break;
      if (!err.empty()) {
        refuse(err);
        break;
      }
      if (!data_plane_request(f.msg)) {
        auto no = caf::make_message(make_error(error_code::invalid_request,
                                               "the data plane carries pulls and pushes only, not " + to_string(f.msg)));
        if (!c.link->send(sys, f.id, no).empty()) break;
        continue;
      }
      ++served;
      shard->enqueue(sender, caf::make_message_id(sink->open(f.id)), std::move(f.msg), nullptr);
    }
    --open;
    c.link->shutdown();
    sink->close();
    writer.join();
    caf::scoped_execution_unit here{&sys};
    comp->cleanup(caf::make_error(caf::exit_reason::user_shutdown), &here);  // no handler left
    c.done = true;
  }

  // Joins the readers of connections that ended.
  void reap() {
    std::lock_guard<std::mutex> g{mtx};
    for (auto i = connections.begin(); i != connections.end();) {
      if (i->done) {
        if (i->reader.joinable()) i->reader.join();
        i = connections.erase(i);
      } else {
        ++i;
      }
    }
  }

  void accept_loop() {
    detail::name_this_thread("at.dp.accept");
    for (;;) {
      int fd = ::accept(listener, nullptr, nullptr);
      if (stopping) {
        if (fd >= 0) ::close(fd);
        return;
      }
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        say(log, "data plane: accept failed: " + errno_text());
        return;
      }
      reap();
      std::lock_guard<std::mutex> g{mtx};
      auto& c = connections.emplace_back();
      c.link = std::make_shared<socket_link>(fd);
      c.reader = std::thread([this, &c] { serve(c); });
    }
  }
};

server::server(caf::actor_system& sys, caf::actor shard, std::chrono::milliseconds request_timeout, log_fn log)
    : impl_(std::make_shared<impl>(sys, std::move(shard), request_timeout, std::move(log))) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("data plane: no socket: " + errno_text());
  auto a = loopback(0);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 64) != 0) {
    auto text = errno_text();
    ::close(fd);
    throw std::runtime_error("data plane: cannot listen on 127.0.0.1: " + text);
  }
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  impl_->listener = fd;
  impl_->port = ntohs(a.sin_port);
  impl_->acceptor = std::thread([i = impl_.get()] { i->accept_loop(); });
}

server::~server() {
  impl_->stopping = true;
  ::shutdown(impl_->listener, SHUT_RDWR);  // wakes accept()
  impl_->acceptor.join();
  ::close(impl_->listener);
  std::lock_guard<std::mutex> g{impl_->mtx};
  for (auto& c : impl_->connections) c.link->shutdown();
  for (auto& c : impl_->connections)
    if (c.reader.joinable()) c.reader.join();
  impl_->connections.clear();
}

endpoint server::where() const { return {impl_->port, impl_->token}; }

size_t server::connections() const { return impl_->open; }

size_t server::refused() const { return impl_->refused; }

size_t server::shared_memory_connections() const { return impl_->shared; }

size_t server::requests() const { return impl_->served; }

// -- the worker side ---------------------------------------------------------------

namespace {

// What a stand-in shares with its reader thread and its exit: the socket, the open
// requests, the route it entered. The reader answers each requester itself, as a
// response promise would (saving a hand-off through the stand-in per reply).
struct stand_in_core {
  struct waiting {
    caf::strong_actor_ptr requester;
    caf::message_id mid;
  };
  std::shared_ptr<socket_link> link;
  std::thread reader;
  std::mutex mtx;
  std::map<uint64_t, waiting> pending;  // guarded by mtx
  bool closed = false;                  // guarded by mtx: requests are refused at once
  std::atomic<uint64_t> next_id{1};
  std::weak_ptr<shard_routes> routes;
  caf::actor_addr shard;
  caf::actor_addr entry;       // the companion the route table sends requests to
  caf::actor_addr stand_in;    // told when a write fails
  caf::strong_actor_ptr self;  // the stand-in, as the sender of replies
  std::string where;

  // A request routed here, on the requester's thread (the companion's enqueue):
  // written at once, answered by the reader. No hand-off to another thread on the way out.
  void request(caf::actor_system& sys, const caf::strong_actor_ptr& sender, caf::message_id mid, caf::message msg) {
    if (!mid.is_request() || !sender) return;  // not a request: nothing to carry
    auto id = next_id++;
    bool open;
    {
      std::lock_guard<std::mutex> g{mtx};
      open = !closed;
      if (open) pending.emplace(id, waiting{sender, mid});
    }
    if (!open) {
      sender->enqueue(self, mid.response_id(),
                      caf::make_message(make_error(error_code::shard_lost, "the data plane to " + where + " closed")),
                      nullptr);
      return;
    }
    if (auto err = link->send(sys, id, msg); !err.empty()) {
      answer(id, caf::make_message(make_error(error_code::shard_lost, "data plane to " + where + ": " + err)));
      if (auto me = caf::actor_cast<caf::actor>(stand_in)) caf::anon_send(me, closed_atom::value, err);
    }
  }

  // Answers request `id` with `reply` (nothing when it was answered already).
  void answer(uint64_t id, caf::message reply) {
    waiting w;
    {
      std::lock_guard<std::mutex> g{mtx};
      auto i = pending.find(id);
      if (i == pending.end()) return;
      w = std::move(i->second);
      pending.erase(i);
    }
    w.requester->enqueue(self, w.mid.response_id(), std::move(reply), nullptr);
  }

  // Out of the route table and no request left open: before the stand-in quits (a
  // monitor of it is told before its own exit functors run).
  void leave(const std::string& why) {
    if (auto r = routes.lock()) r->leave(shard, entry);
    fail_pending(why);
  }

  void fail_pending(const std::string& why) {
    auto err = caf::make_message(make_error(error_code::shard_lost, "the data plane to " + where + " closed: " + why));
    std::map<uint64_t, waiting> all;
    {
      std::lock_guard<std::mutex> g{mtx};
      closed = true;
      all.swap(pending);
    }
    for (auto& [id, w] : all) w.requester->enqueue(self, w.mid.response_id(), err, nullptr);
  }
};

// Connects and greets, offering a shared-memory region when `shared_memory`; -1 and
// `why` on failure. `region` is the region when the server mapped it.
int connect_and_greet(const endpoint& at, std::chrono::milliseconds timeout, bool shared_memory,
                      std::shared_ptr<shared_region>& region, std::string& why) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    why = "no socket: " + errno_text();
    return -1;
  }
  set_timeout(fd, SO_RCVTIMEO, timeout);
  set_timeout(fd, SO_SNDTIMEO, timeout);
  no_delay(fd);
  auto a = loopback(at.port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    why = errno_text();
    ::close(fd);
    return -1;
  }
  hello h;
  std::memcpy(h.token, at.token.data(), std::min(at.token.size(), token_chars));
  shm_offer offer;
  std::string name;
  if (shared_memory) {
    name = "/actortrain-dp-" + fresh_token();
    std::string no_shm;
    region = make_region(name, no_shm);  // without one (no /dev/shm), the floats go inline
    if (region) {
      h.version = protocol_shm;
      std::memcpy(offer.name, name.data(), std::min(name.size(), shm_name_chars - 1));
    }
  }
  std::vector<iovec> greeting{{&h, sizeof h}};
  if (region) greeting.push_back({&offer, sizeof offer});
  char ok = 0;
  auto sent = write_all(fd, greeting);
  auto answer = sent.empty() ? read_exactly(fd, &ok, 1) : std::string{};
  if (region) ::shm_unlink(name.c_str());  // mapped by both, or by none: the name is done
  if (!sent.empty()) {
    why = "cannot greet: " + sent;
  } else if (!answer.empty() || (ok != 1 && ok != 2)) {
    why = answer == "eof" || answer.empty() ? std::string("the token was refused")
                                            : "no answer to the greeting (" + answer + ")";
  } else {
    if (ok != 2) region.reset();
    set_timeout(fd, SO_RCVTIMEO, std::chrono::milliseconds(0));
    return fd;
  }
  region.reset();
  ::close(fd);
  return -1;
}

struct stand_in_state {
  std::shared_ptr<stand_in_core> core;
  caf::actor entry;  // the companion requests are routed to (it holds the core)
};

caf::behavior stand_in(caf::stateful_actor<stand_in_state>* self, endpoint at, caf::actor shard,
                       std::shared_ptr<shard_routes> routes, std::chrono::milliseconds timeout, log_fn log,
                       bool shared_memory) {
  detail::name_this_thread("at.dp.standin");
  auto where = fmt::format("127.0.0.1:{}", at.port);
  std::string why;
  std::shared_ptr<shared_region> region;
  int fd = connect_and_greet(at, timeout, shared_memory, region, why);
  if (fd < 0) {
    say(log, fmt::format("data plane: cannot connect to {} ({}); the ps shard is reached over BASP", where, why));
    self->quit(make_error(error_code::shard_lost, "data plane to " + where + ": " + why));
    return {};
  }
  auto core = std::make_shared<stand_in_core>();
  self->state.core = core;
  core->link = std::make_shared<socket_link>(fd);
  core->link->region = std::move(region);
  core->link->out_ring = 0;
  core->routes = routes;
  core->shard = shard.address();
  core->self = caf::actor_cast<caf::strong_actor_ptr>(self);
  core->where = where;
  auto* sys = &self->system();
  // Holds the core only (not the stand-in): replies go straight to their requesters.
  core->reader = std::thread([sys, core, me_addr = self->address()] {
    detail::name_this_thread("at.dp.read");
    for (;;) {
      frame f;
      auto err = receive(*sys, *core->link, f);
      if (!err.empty()) {
        if (auto me = caf::actor_cast<caf::actor>(me_addr))
          caf::anon_send(me, closed_atom::value, err == "eof" ? std::string("the ps side closed it") : err);
        return;
      }
      core->answer(f.id, std::move(f.msg));
    }
  });
  // Whatever ends the stand-in: no route through it, no request left open, no thread.
  self->attach_functor([core](const caf::error&) {
    core->leave("the stand-in ended");
    core->link->shutdown();
    if (core->reader.joinable()) core->reader.join();
    core->self = nullptr;  // the core outlives the stand-in in nobody's hands but its own
  });
  self->monitor(shard);
  self->set_down_handler([self](caf::down_msg& dm) {
    self->state.core->leave("the ps shard went down");
    self->quit(dm.reason);
  });
  self->set_exit_handler([self](caf::exit_msg& em) {
    self->state.core->leave("closed by its owner");
    self->quit(em.reason);
  });
  // Requests go to a companion, whose enqueue writes them on the requester's own thread
  // (a worker's); the stand-in itself only watches the shard, the reader and its owner.
  auto entry = sys->spawn<caf::actor_companion, caf::hidden>();
  static_cast<caf::actor_companion*>(caf::actor_cast<caf::abstract_actor*>(entry))
    ->on_enqueue([sys, core](caf::mailbox_element_ptr e) {
      if (e) core->request(*sys, e->sender, e->mid, e->move_content_to_message());
    });
  // Requests sent to the stand-in itself (not through the route) take the same way.
  self->set_default_handler([self](caf::scheduled_actor*, caf::message_view& mv) -> caf::result<caf::message> {
    auto mid = self->current_message_id();
    auto requester = self->current_sender();
    if (!mid.is_request() || !requester) return caf::message{};
    self->drop_current_message_id();  // answered by the reader, not by this handler
    self->state.core->request(self->system(), requester, mid, mv.move_content_to_message());
    return caf::delegated<caf::message>{};
  });
  core->entry = entry.address();
  core->stand_in = self->address();
  self->state.entry = entry;
  if (routes) routes->enter(core->shard, entry);
  say(log, fmt::format("data plane: connected to {}{}", where, core->link->region ? " (tensors in shared memory)" : ""));
  return {
    [self](closed_atom, std::string& why) {
      self->state.core->leave(why);
      self->quit(make_error(error_code::shard_lost, "data plane to " + self->state.core->where + ": " + why));
    },
  };
}

}  // namespace

caf::actor open(caf::actor_system& sys, const endpoint& at, caf::actor shard, std::shared_ptr<shard_routes> routes,
                std::chrono::milliseconds timeout, log_fn log, bool shared_memory) {
  return sys.spawn<caf::detached>(stand_in, at, std::move(shard), std::move(routes), timeout, std::move(log),
                                  shared_memory);
}

}  // namespace actortrain::data_plane
