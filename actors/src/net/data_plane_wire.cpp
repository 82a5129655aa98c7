// The data plane's wire: shared-memory regions, tokens, receiving a frame (data_plane_wire.hpp).
#include "data_plane_wire.hpp"

#include <algorithm>
#include <cstdio>
#include <string_view>

#include "basp_check.hpp"

namespace actortrain::data_plane::wire {

namespace {

std::string errno_text() { return std::strerror(errno); }

}  // namespace

std::string read_exactly(int fd, void* p, size_t n) {
  try {
    return net::read_exact(fd, p, n) ? std::string{} : std::string("eof");
  } catch (const net::socket_error& e) {
    return e.what();
  }
}

std::string write_all(int fd, std::vector<iovec>& iov) {
  try {
    net::write_exact(fd, iov);
    return {};
  } catch (const net::socket_error& e) {
    return e.what();
  }
}

std::string tune(int fd, std::chrono::milliseconds receive_timeout, std::chrono::milliseconds send_timeout) {
  try {
    net::set_no_delay(fd);
    net::set_receive_timeout(fd, receive_timeout);
    net::set_send_timeout(fd, send_timeout);
    return {};
  } catch (const net::socket_error& e) {
    return e.what();
  }
}

std::string socket_link::tune(std::chrono::milliseconds read_timeout, std::chrono::milliseconds write_timeout) {
  read_idle = read_timeout;
  write_idle = write_timeout;
  if (tls) {
    tls->buffer_writes(tls_batch_bytes);  // flushed at the end of each write() below
    // A wake-up threshold stays well inside the receive buffer (which the kernel also
    // raises to fit one): the window never closes with the threshold unmet.
    int rcvbuf = 0;
    socklen_t len = sizeof rcvbuf;
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &rcvbuf, &len) == 0 && rcvbuf > 0)
      wake_cap = std::max(1, std::min(tls_wake_bytes, rcvbuf / 4));
    try {
      net::set_no_delay(fd.get());
      return {};
    } catch (const net::socket_error& e) {
      return e.what();
    }
  }
  return wire::tune(fd.get(), read_timeout, write_timeout);
}

std::string socket_link::read(void* p, size_t n) {
  if (!tls) return read_exactly(fd.get(), p, n);
  return tls_read(p, n, std::nullopt);
}

std::string socket_link::read_within(void* p, size_t n, std::chrono::milliseconds bound) {
  if (tls) return tls_read(p, n, std::chrono::steady_clock::now() + bound);
  try {
    return net::read_exact_within(fd.get(), p, n, bound) ? std::string{} : std::string("eof");
  } catch (const net::socket_error& e) {
    return e.code() == ETIMEDOUT ? std::string("timeout") : std::string(e.what());
  }
}

namespace {

// The most ciphertext a TLS session may hold without being able to decrypt any of it:
// less than one record (16 KiB of plaintext and at most 2 KiB of expansion, TLS 1.2's
// bound; 256 bytes in TLS 1.3) and its 5-byte header.
constexpr size_t held_record_bytes = 16384 + 2048 + 5;

// Before a reader waits for the socket with `left` bytes still to read: the socket wakes
// it once min(left - what the session may hold, tls_wake_bytes) bytes have come, not at
// each arriving segment. Safe: the peer sends at least `left` bytes of ciphertext for
// them, and the session holds less than held_record_bytes of those already.
void wake_reader_after(socket_link& link, size_t left) {
  int want = left > held_record_bytes + 1
               ? static_cast<int>(std::min<size_t>(left - held_record_bytes, static_cast<size_t>(tls_wake_bytes)))
               : 1;
  want = std::min(want, link.wake_cap);
  if (want == link.wake_bytes) return;
  if (::setsockopt(link.fd.get(), SOL_SOCKET, SO_RCVLOWAT, &want, sizeof want) == 0) link.wake_bytes = want;
}

// Moves `n` bytes through the session with `step` (a read or a write of what is left,
// under the link's lock), waiting for the socket outside the lock until `until`; what
// went wrong in words, "" when all moved. `late()` names a wait that ran out (made only
// then: this runs for every frame); `closed_early` and `closed_after` a close before and
// after the first byte. A read (`reading`) that must wait sets the socket's wake-up
// threshold first (wake_reader_after).
template <class Step, class Until, class Late>
std::string move_bytes(socket_link& link, size_t n, Step step, std::mutex& mtx, Until until, Late late,
                       const char* closed_early, const char* closed_after, bool reading) {
  size_t done = 0;
  while (done < n) {
    detail::tls::status s;
    size_t k = 0;
    {
      std::lock_guard<std::mutex> g{mtx};
      s = step(done, k);
    }
    if (s == detail::tls::status::ok) {
      done += k;
      continue;
    }
    if (s == detail::tls::status::closed) return done == 0 ? closed_early : closed_after;
    if (s == detail::tls::status::failed) return link.tls->why();
    if (reading && s == detail::tls::status::want_read) wake_reader_after(link, n - done);
    if (!detail::tls::wait_ready(link.fd.get(), s, until())) return late();
  }
  return {};
}

// A wait as long as a plain socket's timeout would allow (0: for ever).
std::chrono::steady_clock::time_point idle_limit(std::chrono::milliseconds idle) {
  auto now = std::chrono::steady_clock::now();
  return idle.count() > 0 ? now + idle : now + std::chrono::hours(24 * 365);
}

}  // namespace

std::string socket_link::tls_read(void* p, size_t n, std::optional<std::chrono::steady_clock::time_point> until) {
  auto* out = static_cast<char*>(p);
  return move_bytes(
    *this, n, [&](size_t done, size_t& k) { return tls->read(out + done, n - done, k); }, tls_mtx,
    [&] { return until ? *until : idle_limit(read_idle); },
    [&] { return until ? std::string("timeout") : fmt::format("no data within {} ms", read_idle.count()); }, "eof",
    "the peer closed the connection inside a read", /*reading=*/true);
}

std::string socket_link::tls_write(const char* data, size_t n) {
  return move_bytes(
    *this, n, [&](size_t done, size_t& k) { return tls->write(data + done, n - done, k); }, tls_mtx,
    [&] { return idle_limit(write_idle); }, [&] { return fmt::format("cannot write within {} ms", write_idle.count()); },
    "the peer closed the connection", "the peer closed the connection", /*reading=*/false);
}

std::string socket_link::write(std::vector<iovec>& iov, bool flush) {
  if (!tls) return write_all(fd.get(), iov);
  // Small pieces (a header, shapes, a message) go out together as one TLS record, not
  // one record each; the tensors' floats are written straight from their matrices.
  constexpr size_t small = 16 * 1024;
  std::vector<char> gathered;
  for (auto& piece : iov) {
    auto* p = static_cast<const char*>(piece.iov_base);
    if (piece.iov_len < small) {
      gathered.insert(gathered.end(), p, p + piece.iov_len);
      continue;
    }
    if (!gathered.empty()) {
      if (auto e = tls_write(gathered.data(), gathered.size()); !e.empty()) return e;
      gathered.clear();
    }
    if (auto e = tls_write(p, piece.iov_len); !e.empty()) return e;
  }
  if (!gathered.empty())
    if (auto e = tls_write(gathered.data(), gathered.size()); !e.empty()) return e;
  if (!flush) return {};
  // The session gathered the records (tune: buffer_writes): send what is left of them.
  for (;;) {
    detail::tls::status s;
    {
      std::lock_guard<std::mutex> g{tls_mtx};
      s = tls->flush();
    }
    if (s == detail::tls::status::ok) return {};
    if (s == detail::tls::status::closed) return "the peer closed the connection";
    if (s == detail::tls::status::failed) return tls->why();
    if (!detail::tls::wait_ready(fd.get(), s, idle_limit(write_idle)))
      return fmt::format("cannot write within {} ms", write_idle.count());
  }
}

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

// Makes and maps a fresh region in a sealed memfd: it can be neither shrunk nor grown by
// anyone, so the server's copies out of it can never fault (a shrunk mapping would be a
// SIGBUS). Null (and `why`) when the system cannot make one; `fd` keeps the memfd open
// until the server has opened it (offer_name says where).
std::shared_ptr<shared_region> make_region(net::unique_fd& fd, std::string& why) {
  fd.reset(::memfd_create("actortrain-dp", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd) {
    why = errno_text();
    return nullptr;
  }
  constexpr uint64_t bytes = region_header + 2 * ring_bytes;
  // Allocated now, not on first touch: memory too small for it says so here, and the
  // connection keeps its floats on TCP, instead of a SIGBUS later.
  int err = ::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0 ? errno
                                                                   : ::posix_fallocate(fd.get(), 0, static_cast<off_t>(bytes));
  if (err == 0 && ::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) err = errno;
  if (err != 0) {
    why = std::strerror(err);
    fd.reset();
    return nullptr;
  }
  auto r = map_shared(::dup(fd.get()), bytes);
  if (!r) {
    why = errno_text();
    fd.reset();
    return nullptr;
  }
  auto* h = static_cast<uint64_t*>(r->base);
  h[0] = region_magic;
  h[1] = ring_bytes;
  r->released(0).store(0);
  r->released(1).store(0);
  return r;
}

std::string offer_name(const net::unique_fd& fd) { return fmt::format("/proc/{}/fd/{}", ::getpid(), fd.get()); }

// Maps the region a client named; null when it is not one of ours: not a client's memfd
// by its /proc path, not sealed against shrinking and growing (and against new seals),
// or of the wrong size or magic. The floats then travel inline.
std::shared_ptr<shared_region> map_region(const shm_offer& offer) {
  std::string name(offer.name, strnlen(offer.name, shm_name_chars));
  unsigned pid = 0, number = 0;
  int used = 0;
  if (std::sscanf(name.c_str(), "/proc/%u/fd/%u%n", &pid, &number, &used) != 2 || static_cast<size_t>(used) != name.size())
    return nullptr;
  // Only a process on this host as the network sees it: one kernel (its /proc entry is
  // ours to open) and one network namespace. Tasks in two namespaces stand for two hosts
  // and keep their floats on the stream, as on two machines.
  char ours[64] = {}, theirs[64] = {};
  auto ns_of = [](const std::string& path, char* out) { return ::readlink(path.c_str(), out, 63) > 0; };
  if (!ns_of("/proc/self/ns/net", ours) || !ns_of(fmt::format("/proc/{}/ns/net", pid), theirs) ||
      std::strcmp(ours, theirs) != 0)
    return nullptr;
  int fd = ::open(name.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return nullptr;
  constexpr int needed = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
  int seals = ::fcntl(fd, F_GET_SEALS);
  struct stat st {};
  if (seals < 0 || (seals & needed) != needed || ::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<uint64_t>(st.st_size) != region_header + 2 * ring_bytes) {
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

// Reads one frame: "" when `out` holds it, "eof" at a clean end between frames, else
// what was wrong with it (the connection is then unusable).
std::string receive(caf::actor_system& sys, socket_link& link, frame& out) {
  frame_header h;
  if (auto e = link.read(&h, sizeof h); !e.empty()) return e;
  if (h.magic != frame_magic) return fmt::format("not a data-plane frame (magic {:#010x})", h.magic);
  bool in_shm = (h.tensors & in_shm_flag) != 0;
  h.tensors &= ~in_shm_flag;
  if (in_shm && !link.region) return "a frame in shared memory on a connection without it";
  if (h.tensors > max_tensors) return fmt::format("a frame announced {} tensors (at most {})", h.tensors, max_tensors);
  auto bound = std::min(max_meta_bytes, link.max_frame_bytes);
  if (h.meta_bytes > bound) return fmt::format("a frame announced {} bytes of message (at most {} here)", h.meta_bytes, bound);
  std::vector<shape_entry> shapes(h.tensors);
  if (h.tensors > 0)
    if (auto e = link.read(shapes.data(), shapes.size() * sizeof(shape_entry)); !e.empty())
      return e == "eof" ? "the peer closed the connection inside a frame" : e;
  std::vector<bool> narrowed(shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    narrowed[i] = (shapes[i].rows & bf16_flag) != 0;
    if (narrowed[i] && in_shm) return "a frame in shared memory announced bfloat16 floats";
    shapes[i].rows &= ~bf16_flag;
  }
  for (auto& s : shapes)
    if (s.rows > max_wire_floats || s.cols > max_wire_floats || (s.cols != 0 && s.rows > max_wire_floats / s.cols) ||
        (s.rows == 0 && s.cols == 0))
      return fmt::format("a frame announced a {} x {} tensor", s.rows, s.cols);
  uint64_t tensor_bytes = 0;
  for (auto& s : shapes) tensor_bytes += s.rows * s.cols * sizeof(float);  // each bounded above
  if (tensor_bytes > link.max_frame_bytes)
    return fmt::format("a frame announced {} bytes of tensors (at most {} here)", tensor_bytes, link.max_frame_bytes);
  // The node's budget for frames being read, taken before anything is allocated and
  // given back when this frame is read (its tensors then belong to a request).
  struct hold {
    byte_budget* b = nullptr;
    uint64_t n = 0;
    ~hold() {
      if (b) b->give(n);
    }
  } held;
  if (link.budget) {
    auto n = h.meta_bytes + tensor_bytes;
    if (!link.budget->take(n, link.budget_wait))
      return fmt::format("a frame of {} bytes waited {} ms for the node's data-plane budget ({} bytes for frames being "
                         "read, {} free)",
                         n, link.budget_wait.count(), link.budget->total(), link.budget->left());
    held.b = link.budget.get();  // (not an assignment from a temporary: its destructor would give it back)
    held.n = n;
  }
  // With the budget taken, the rest of the frame must come within the same bound: a
  // member that stalls mid-frame gives its share back instead of holding it for ever.
  const auto frame_until = std::chrono::steady_clock::now() + link.budget_wait;
  auto body = [&](void* p, size_t n) -> std::string {
    if (!link.budget) return link.read(p, n);
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(frame_until - std::chrono::steady_clock::now());
    if (left.count() > 0) {
      auto e = link.read_within(p, n, left);
      if (e != "timeout") return e;
    }
    return fmt::format("the rest of a frame of {} bytes did not come within {} ms", h.meta_bytes + tensor_bytes,
                       link.budget_wait.count());
  };
  uint64_t at = 0, payload = tensor_bytes;
  const char* src = nullptr;
  if (in_shm) {
    if (auto e = body(&at, sizeof at); !e.empty()) return e == "eof" ? "the peer closed the connection inside a frame" : e;
    auto size = link.region->ring;
    // Only where the writer may have put it: at or after what this side released,
    // within one ring, not wrapping.
    if (at < link.in_next || payload > size || at % size + payload > size || at - link.in_next > size)
      return fmt::format("a frame placed its {} bytes at {} of a ring of {} (expected from {})", payload, at, size,
                         link.in_next);
    src = link.region->ring_data(1 - link.out_ring) + at % size;
  }
  // The message grows as its bytes arrive (1 MiB first, then doubling, so the copies of
  // growing stay linear): a header alone reserves nothing.
  std::vector<char> meta;
  for (uint64_t got = 0; got < h.meta_bytes;) {
    auto step = std::min<uint64_t>(h.meta_bytes - got, std::max<uint64_t>(got, uint64_t{1} << 20));
    meta.resize(static_cast<size_t>(got + step));
    if (auto e = body(meta.data() + got, static_cast<size_t>(step)); !e.empty())
      return e == "eof" ? "the peer closed the connection inside a frame" : e;
    got += step;
  }
  side_scope side;
  side.channel.in.reserve(shapes.size());
  if (in_shm) std::atomic_thread_fence(std::memory_order_acquire);
  for (size_t i = 0; i < shapes.size(); ++i) {
    auto& s = shapes[i];
    auto m = std::make_shared<model::matrix>(static_cast<Eigen::Index>(s.rows), static_cast<Eigen::Index>(s.cols));
    auto n = static_cast<size_t>(m->size()) * sizeof(float);
    if (in_shm) {
      if (n > 0) std::memcpy(m->data(), src, n);
      src += n;
    } else if (n > 0 && narrowed[i]) {
      // Read into the matrix's upper half, then widened where they lie: no other buffer.
      auto k = static_cast<size_t>(m->size());
      if (auto e = body(reinterpret_cast<char*>(m->data()) + 2 * k, k * sizeof(uint16_t)); !e.empty())
        return e == "eof" ? "the peer closed the connection inside a frame" : e;
      bf16::widen_in_place(m->data(), k);
    } else if (n > 0) {
      if (auto e = body(m->data(), n); !e.empty()) return e == "eof" ? "the peer closed the connection inside a frame" : e;
    }
    side.channel.in.push_back(std::move(m));
  }
  if (in_shm) {
    // Copied out: the writer may use the bytes again.
    link.in_next = at + payload;
    link.region->released(1 - link.out_ring).store(link.in_next, std::memory_order_release);
    ++link.frames_in_shm;
  }
  if (auto r = detail::refused_caf_content(std::string_view(meta.data(), meta.size())))
    return fmt::format("a message holding {}, which no ActorTrain message carries ({})", r->what, r->why);
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

}  // namespace actortrain::data_plane::wire
