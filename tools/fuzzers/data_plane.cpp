// Fuzzes what a ps task's data plane reads of a member's connection after the greeting
// (actors/src/net/data_plane_wire.cpp, receive()): any bytes, cut into frames as the
// server cuts them — a header, the tensors' shapes, the message, the floats — are
// either refused with a reason or decoded, within the job's bounds (1 MiB per frame
// here, a budget of 4 MiB), never a crash or an allocation the header alone asked for.
// The bytes come through a socket pair, as they would from a peer.
#include "../../actors/src/net/data_plane_wire.hpp"
#include "read_frames.hpp"

#include <actortrain/actors/core/configure.hpp>
#include <actortrain/actors/core/messages.hpp>

#include <caf/all.hpp>
#include <caf/io/middleman.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace wire = actortrain::data_plane::wire;
namespace at = actortrain;

namespace {

caf::actor_system* sys = nullptr;  // never deleted: ~actor_system at exit is not the code under test

// Well-formed frames as a worker sends them (how tools/fuzzers/corpus/data_plane was
// made: ACTORTRAIN_FUZZ_SEEDS=DIR build-fuzz/fuzz_data_plane).
void write_seeds(const char* dir) {
  auto t = at::tensor{std::make_shared<const at::model::matrix>(at::model::matrix::Constant(4, 3, 0.25f))};
  at::pull_request pull;
  pull.partitions.push_back(at::partition_key{0, 1});
  at::push_request push;
  push.step = at::step_id{1, 0, 7};
  push.dense.push_back(at::dense_slice{at::partition_key{0, 0}, 3, t});
  int k = 0;
  // The push twice: its gradient as floats, then as bfloat16 ("wire_floats": "bf16").
  for (auto& m : {caf::make_message(at::pull_atom::value, pull), caf::make_message(at::push_atom::value, push),
                  caf::make_message(at::push_atom::value, push)}) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) std::abort();
    wire::socket_link link{at::net::unique_fd{sv[0]}};
    link.bf16 = k == 2;
    if (!link.send(*sys, 5, m).empty()) std::abort();
    ::shutdown(sv[0], SHUT_WR);
    std::string bytes(1 << 16, '\0');
    auto n = ::read(sv[1], bytes.data(), bytes.size());
    ::close(sv[1]);
    auto path = std::string(dir) + "/seed" + std::to_string(k++);
    auto* f = std::fopen(path.c_str(), "wb");
    std::fwrite(bytes.data(), 1, static_cast<size_t>(n), f);
    std::fclose(f);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  auto* cfg = new caf::actor_system_config;
  at::configure(*cfg);
  cfg->load<caf::io::middleman>();  // its message types too, as every node of a cluster has them
  cfg->set("scheduler.max-threads", 1);
  sys = new caf::actor_system(*cfg);
  if (const char* dir = std::getenv("ACTORTRAIN_FUZZ_SEEDS")) {
    write_seeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 60000) return 0;  // the socket pair's buffer holds it all
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) std::abort();
  at::net::unique_fd reader{sv[0]}, writer{sv[1]};
  int buf = 1 << 17;
  ::setsockopt(writer.get(), SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  if (size > 0 && ::write(writer.get(), data, size) != static_cast<ssize_t>(size)) return 0;
  writer.reset();  // the peer is done: a read past the bytes is an early end
  wire::socket_link link{std::move(reader)};
  at::fuzzing::read_frames(*sys, link);
  return 0;
}
