// A compromised member of a plain cluster, for attack_test.sh: it knows the job's secret
// (it reads the cluster file as any task does), so the ps task hands it shard 0's
// data-plane contact, token included. With the token it sends what no legitimate member
// sends: frame headers announcing 1 GiB of message and a 16384 x 16384 tensor, and a
// shared-memory region it shrinks after offering it (unsealed: not mapped; sealed: the
// shrink itself fails). Stalled frames against the node's budget are in
// actors_data_plane_test (here they would wait out the job's 60 s request timeout). It prints one line per attack and exits 1 when any
// of them was not refused as it should be; the test then checks that the ps task lived
// on with its memory small and the job exact.
//   member_attacker CLUSTER_FILE

#include "../../actors/src/net/data_plane_wire.hpp"
#include "../../actors/src/net/dial.hpp"
#include "../../actors/src/net/node_internals.hpp"

#include <actortrain/actors/core/errors.hpp>
#include <actortrain/actors/net/cluster_file.hpp>
#include <actortrain/actors/net/sockets.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <iostream>
#include <vector>

namespace at = actortrain;
namespace wire = actortrain::data_plane::wire;
using namespace std::chrono_literals;

namespace {

int failures = 0;

void report(const std::string& attack, bool as_expected, const std::string& what) {
  std::cout << (as_expected ? "refused: " : "NOT REFUSED: ") << attack << " (" << what << ")" << std::endl;
  if (!as_expected) ++failures;
}

// Connects and greets with `token`; the server's one-byte answer (0 when it closed).
at::net::unique_fd greet(uint16_t port, const std::string& token, char& answer, const wire::shm_offer* offer = nullptr) {
  auto fd = at::net::connect_to("127.0.0.1", port, 5s);
  at::net::set_receive_timeout(fd.get(), 10s);
  wire::hello h;
  if (offer) h.version = wire::protocol_shm;
  std::memcpy(h.token, token.data(), std::min(token.size(), wire::token_chars));
  at::net::write_exact(fd.get(), &h, sizeof h);
  if (offer) at::net::write_exact(fd.get(), offer, sizeof *offer);
  answer = 0;
  try {
    if (!at::net::read_exact(fd.get(), &answer, 1)) answer = 0;
  } catch (const at::net::socket_error&) {
    answer = 0;
  }
  return fd;
}

// True when the server closes the connection (within the receive timeout).
bool closed(int fd) {
  char buf[256];
  try {
    while (at::net::read_some(fd, buf, sizeof buf) > 0) {
    }
    return true;
  } catch (const at::net::socket_error& e) {
    return e.code() == ECONNRESET;
  }
}

void send_frame(int fd, uint32_t tensors, uint64_t meta, const std::vector<wire::shape_entry>& shapes) {
  wire::frame_header h;
  h.tensors = tensors;
  h.id = 1;
  h.meta_bytes = meta;
  at::net::write_exact(fd, &h, sizeof h);
  if (!shapes.empty()) at::net::write_exact(fd, shapes.data(), shapes.size() * sizeof(wire::shape_entry));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: member_attacker CLUSTER_FILE\n";
    return 2;
  }
  auto def = at::read_cluster_file(argv[1]);
  caf::actor_system_config cfg;
  at::detail::configure_for(cfg, def, 1);  // reads the job's secret: a member
  caf::actor_system sys{cfg};
  auto got = at::fetch_shard(sys, def.ps.at(0), 0, 10000ms, std::chrono::duration_cast<caf::timespan>(10s));
  if (!got) {
    std::cerr << "member_attacker: no contact for shard 0: " << at::describe(got.error()) << "\n";
    return 1;
  }
  auto port = got->contact.data_port;
  auto token = got->contact.data_token;
  if (port == 0) {
    std::cerr << "member_attacker: shard 0 serves no data plane\n";
    return 1;
  }
  std::cout << "shard 0's data plane at 127.0.0.1:" << port << ", token known" << std::endl;
  char ok = 0;
  {
    auto fd = greet(port, std::string(32, '0'), ok);
    report("a greeting with a wrong token", ok == 0 && closed(fd.get()), "closed at the greeting");
  }
  for (int i = 0; i < 4; ++i) {
    auto fd = greet(port, token, ok);
    send_frame(fd.get(), 0, uint64_t{1} << 30, {});
    report("a frame announcing 1 GiB of message", ok == 1 && closed(fd.get()), "closed at its header");
    auto fd2 = greet(port, token, ok);
    send_frame(fd2.get(), 1, 0, {{16384, 16384}});
    report("a frame announcing a 16384 x 16384 tensor (1 GiB)", ok == 1 && closed(fd2.get()), "closed at its header");
  }
  {
    // An unsealed region: the server must not map it (it could be shrunk under it).
    at::net::unique_fd mem{::memfd_create("attack", MFD_CLOEXEC | MFD_ALLOW_SEALING)};
    auto bytes = wire::region_header + 2 * wire::ring_bytes;
    bool made = mem && ::ftruncate(mem.get(), static_cast<off_t>(bytes)) == 0;
    wire::shm_offer offer;
    auto name = wire::offer_name(mem);
    std::memcpy(offer.name, name.data(), std::min(name.size(), wire::shm_name_chars - 1));
    auto fd = greet(port, token, ok, &offer);
    bool shrunk = ::ftruncate(mem.get(), 0) == 0;
    // A frame that claims to be in the region: refused, the region was never taken.
    wire::frame_header h;
    h.tensors = 1 | wire::in_shm_flag;
    at::net::write_exact(fd.get(), &h, sizeof h);
    report("an unsealed region, shrunk after the offer", made && ok == 1 && shrunk && closed(fd.get()),
           "not mapped (answer " + std::to_string(int{ok}) + "), a frame in it closed the connection");
    // A region made as members make it: sealed, it cannot shrink at all.
    std::string why;
    at::net::unique_fd sealed;
    auto region = wire::make_region(sealed, why);
    int shrink = region ? ::ftruncate(sealed.get(), 0) : 0;
    int e = errno;
    report("shrinking a sealed region", region && shrink != 0 && e == EPERM,
           region ? "ftruncate: " + std::string(std::strerror(e)) : "no region: " + why);
  }
  std::cout << (failures == 0 ? "every attack refused" : std::to_string(failures) + " attack(s) not refused")
            << std::endl;
  return failures == 0 ? 0 : 1;
}
