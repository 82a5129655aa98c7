// Fuzzes the data plane's TLS listener (actors/src/net/tls.cpp, data_plane_wire.cpp),
// both ways a peer can reach it:
//   first byte even: the rest is what a stranger sends before or instead of a TLS
//     handshake; tls::accept must end with a refusal or a socket error, within its bound;
//   first byte odd: a member (the job's certificate) finishes the handshake, then sends
//     the rest inside the session; the server reads it as frames, as after a greeting,
//     within the job's bounds (1 MiB per frame, a budget of 4 MiB): refused with a reason
//     or decoded, never a crash, a hang or an allocation the header alone asked for.
// The bytes come through a socket pair. The certificates are made once at start-up by
// tools/make-certs into a temporary directory.
#include "../../actors/src/net/data_plane_wire.hpp"
#include "../../actors/src/net/tls.hpp"
#include "read_frames.hpp"

#include <actortrain/actors/core/configure.hpp>
#include <actortrain/actors/net/sockets.hpp>

#include <caf/all.hpp>
#include <caf/io/middleman.hpp>

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

namespace wire = actortrain::data_plane::wire;
namespace tls = actortrain::detail::tls;
namespace at = actortrain;
using namespace std::chrono_literals;

namespace {

caf::actor_system* sys = nullptr;  // never deleted: ~actor_system at exit is not the code under test
std::shared_ptr<const tls::context> ctx;

std::string make_certs() {
  char dir[] = "/tmp/actortrain-fuzz-tls.XXXXXX";
  if (!::mkdtemp(dir)) std::abort();
  std::string root = __FILE__;
  root = root.substr(0, root.rfind("/tools/fuzzers/"));
  auto cmd = root + "/tools/make-certs " + dir + " node >/dev/null";
  if (std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr, "fuzz_tls_data_plane: %s failed\n", cmd.c_str());
    std::abort();
  }
  return dir;
}

// The client's side of a handshake on `fd`, then `bytes` inside the session, then the end.
void member(int fd, const uint8_t* data, size_t size) {
  try {
    int flags = ::fcntl(fd, F_GETFL);
    ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
    tls::session s(*ctx, fd, /*server=*/false);
    auto until = std::chrono::steady_clock::now() + 5s;
    for (;;) {
      auto st = s.handshake();
      if (st == tls::status::ok) break;
      if (st != tls::status::want_read && st != tls::status::want_write) return;
      if (!tls::wait_ready(fd, st, until)) return;
    }
    size_t done = 0;
    while (done < size) {
      size_t k = 0;
      auto st = s.write(reinterpret_cast<const char*>(data) + done, size - done, k);
      if (st == tls::status::ok) {
        done += k;
        continue;
      }
      if (st != tls::status::want_read && st != tls::status::want_write) return;
      if (!tls::wait_ready(fd, st, until)) return;
    }
  } catch (const std::exception&) {
  }
  ::shutdown(fd, SHUT_WR);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  auto* cfg = new caf::actor_system_config;
  at::configure(*cfg);
  cfg->load<caf::io::middleman>();  // its message types too, as every node of a cluster has them
  cfg->set("scheduler.max-threads", 1);
  sys = new caf::actor_system(*cfg);
  auto dir = make_certs();
  ctx = std::make_shared<const tls::context>(tls::files{dir + "/node.pem", dir + "/node.key", dir + "/ca.pem"});
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > 60000) return 0;
  bool inside = (data[0] & 1) != 0;
  ++data;
  --size;
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) std::abort();
  at::net::unique_fd server{sv[0]}, client{sv[1]};
  if (!inside) {
    // A stranger: its bytes, then nothing more.
    if (size > 0 && ::write(client.get(), data, size) != static_cast<ssize_t>(size)) return 0;
    ::shutdown(client.get(), SHUT_WR);
    try {
      tls::accept(server.get(), *ctx, 2s);
      std::abort();  // random bytes are never a handshake with the job's certificate
    } catch (const tls::refused&) {
    } catch (const at::net::socket_error&) {
    }
    return 0;
  }
  std::thread peer(member, client.get(), data, size);
  std::unique_ptr<tls::session> session;
  try {
    session = tls::accept(server.get(), *ctx, 5s);
  } catch (const std::exception&) {
    peer.join();
    std::abort();  // a member's handshake must succeed
  }
  wire::socket_link link{std::move(server)};
  link.tls = std::move(session);
  link.tune(2000ms, 2000ms);
  at::fuzzing::read_frames(*sys, link);
  link.shutdown();
  peer.join();
  return 0;
}
