// A compromised member of a cluster, for attack_test.sh: it knows the job's secret, or
// holds the job's certificate (it reads the cluster file as any task does), so the ps
// task hands it shard 0's data-plane contact, token included; with TLS it speaks to the
// data plane inside a TLS session with that certificate, as members do. With the token
// it sends what no legitimate member
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
#include "../../actors/src/net/tls.hpp"

#include <actortrain/actors/core/errors.hpp>
#include <actortrain/actors/net/cluster_file.hpp>
#include <actortrain/actors/net/data_plane.hpp>
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

// Where shard 0's data plane is, and the TLS context of the job (null: plain).
std::string host = "127.0.0.1";
std::shared_ptr<const at::detail::tls::context> tls;

// The same bytes, plain or inside the job's TLS, through the link the data plane uses.
void put(wire::socket_link& link, const void* p, size_t n) {
  std::vector<iovec> iov{{const_cast<void*>(p), n}};
  if (auto e = link.write(iov); !e.empty()) throw std::runtime_error("write: " + e);
}

// Connects and greets with `token`; the server's one-byte answer (0 when it closed).
std::unique_ptr<wire::socket_link> greet(uint16_t port, const std::string& token, char& answer,
                                         const wire::shm_offer* offer = nullptr) {
  std::unique_ptr<wire::socket_link> link;
  if (tls) {
    auto c = at::detail::tls::dial(host, port, *tls, 5000ms, /*server_speaks_first=*/false);
    link = std::make_unique<wire::socket_link>(std::move(c.fd));
    link->tls = std::move(c.tls);
  } else {
    link = std::make_unique<wire::socket_link>(at::net::connect_to(host, port, 5s));
  }
  link->tune(10000ms, 10000ms);
  wire::hello h;
  if (offer) h.version = wire::protocol_shm;
  std::memcpy(h.token, token.data(), std::min(token.size(), wire::token_chars));
  put(*link, &h, sizeof h);
  if (offer) put(*link, offer, sizeof *offer);
  answer = 0;
  if (!link->read_within(&answer, 1, 10000ms).empty()) answer = 0;
  return link;
}

// True when the server closes the connection (within 10 s).
bool closed(wire::socket_link& link) {
  char c;
  for (;;) {
    auto e = link.read_within(&c, 1, 10000ms);
    if (e == "timeout") return false;
    if (!e.empty()) return true;  // the end, or the connection reset
  }
}

void send_frame(wire::socket_link& link, uint32_t tensors, uint64_t meta, const std::vector<wire::shape_entry>& shapes) {
  wire::frame_header h;
  h.tensors = tensors;
  h.id = 1;
  h.meta_bytes = meta;
  put(link, &h, sizeof h);
  if (!shapes.empty()) put(link, shapes.data(), shapes.size() * sizeof(wire::shape_entry));
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
  if (!got->contact.data_host.empty()) host = got->contact.data_host;
  if (def.tls.enabled()) tls = at::data_plane::tls_context(def.tls.certificate, def.tls.key, def.tls.ca);
  std::cout << "shard 0's data plane at " << host << ":" << port << (tls ? " (TLS, the job's certificate)" : "")
            << ", token known" << std::endl;
  char ok = 0;
  {
    auto link = greet(port, std::string(32, '0'), ok);
    report("a greeting with a wrong token", ok == 0 && closed(*link), "closed at the greeting");
  }
  for (int i = 0; i < 4; ++i) {
    auto link = greet(port, token, ok);
    send_frame(*link, 0, uint64_t{1} << 30, {});
    report("a frame announcing 1 GiB of message", ok == 1 && closed(*link), "closed at its header");
    auto link2 = greet(port, token, ok);
    send_frame(*link2, 1, 0, {{16384, 16384}});
    report("a frame announcing a 16384 x 16384 tensor (1 GiB)", ok == 1 && closed(*link2), "closed at its header");
  }
  {
    // An unsealed region: the server must not map it (it could be shrunk under it).
    at::net::unique_fd mem{::memfd_create("attack", MFD_CLOEXEC | MFD_ALLOW_SEALING)};
    auto bytes = wire::region_header + 2 * wire::ring_bytes;
    bool made = mem && ::ftruncate(mem.get(), static_cast<off_t>(bytes)) == 0;
    wire::shm_offer offer;
    auto name = wire::offer_name(mem);
    std::memcpy(offer.name, name.data(), std::min(name.size(), wire::shm_name_chars - 1));
    auto link = greet(port, token, ok, &offer);
    bool shrunk = ::ftruncate(mem.get(), 0) == 0;
    // A frame that claims to be in the region: refused, the region was never taken.
    wire::frame_header h;
    h.tensors = 1 | wire::in_shm_flag;
    put(*link, &h, sizeof h);
    report("an unsealed region, shrunk after the offer", made && ok == 1 && shrunk && closed(*link),
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
