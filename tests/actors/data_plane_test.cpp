// The tensor data plane over loopback inside one process: a stand-in carries pulls,
// pushes and row pulls to a shard's server and back with every bit intact, enters itself
// in the worker process's route table (worker/shard_routes.hpp) and leaves it when it
// ends, fails its open requests at once when the connection goes (not at the
// requester's timeout), and a server refuses wrong tokens and malformed frames by
// closing that connection only.

#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <sys/wait.h>
#include <sys/resource.h>

#include <actortrain/actors/core/configure.hpp>
#include <actortrain/actors/net/data_plane.hpp>
#include <actortrain/actors/core/errors.hpp>
#include <actortrain/actors/core/messages.hpp>
#include <actortrain/actors/worker/shard_routes.hpp>

#include "../../actors/src/net/bf16.hpp"
#include "../../actors/src/net/data_plane_wire.hpp"
#include "unsafe_caf_inputs.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <future>
#include <optional>

namespace at = actortrain;
namespace dp = actortrain::data_plane;

namespace {

constexpr auto wait_bound = std::chrono::seconds(10);

using hold_atom = caf::atom_constant<caf::atom("hold")>;

struct fake_state {
  at::tensor value;                      // what pulls get
  std::vector<at::tensor> pushed;        // what pushes brought
  std::vector<caf::response_promise> held;  // pulls of partition 99: never answered
};

// Answers like a ps shard: pulls with its value, pushes with an acknowledgement (keeping
// the gradient), row pulls with the rows asked for; a pull of partition 99 is held.
caf::behavior fake_shard(caf::stateful_actor<fake_state>* self, at::model::matrix value) {
  self->state.value = at::tensor{std::move(value)};
  return {
    [self](at::pull_atom, const at::pull_request& req) -> caf::result<at::pull_reply> {
      if (!req.partitions.empty() && req.partitions[0].index == 99) {
        self->state.held.push_back(self->make_response_promise());
        return caf::delegated<at::pull_reply>{};
      }
      at::pull_reply r;
      r.values.push_back(at::partition_value{req.partitions.at(0), 7, self->state.value});
      r.values.back().value.reducible = req.training;  // as shard_store::pull marks it
      return r;
    },
    [self](at::push_atom, const at::push_request& req) {
      for (auto& d : req.dense) self->state.pushed.push_back(d.grad);
      at::push_reply r;
      r.max_staleness = 3;
      return r;
    },
    [self](at::pull_rows_atom, const at::pull_rows_request& req) {
      at::model::matrix rows(static_cast<Eigen::Index>(req.ids.size()), self->state.value.cols());
      for (size_t i = 0; i < req.ids.size(); ++i)
        rows.row(static_cast<Eigen::Index>(i)) = self->state.value.value->row(req.ids[i]);
      at::rows_reply r{req.variable, 9, req.ids, at::tensor{std::move(rows)}};
      r.rows.reducible = req.training;
      return r;
    },
    [self](at::stats_atom) { return std::string("answered by the shard itself"); },
    [self](hold_atom) { return self->state.pushed; },
  };
}

at::model::matrix pattern(Eigen::Index rows, Eigen::Index cols, float seed) {
  at::model::matrix m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = seed + 0.001f * static_cast<float>(i);
  return m;
}

template <class T>
std::string why(const caf::expected<T>& x) {
  return x ? std::string() : at::describe(x.error());
}

bool same_bits(const at::model::matrix& a, const at::model::matrix& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         std::memcmp(a.data(), b.data(), static_cast<size_t>(a.size()) * sizeof(float)) == 0;
}

// The fake shards answer what a ps shard answers on the data plane and nothing more.
at::ps_shard_actor as_ps(const caf::actor& a) { return caf::actor_cast<at::ps_shard_actor>(a); }

struct plane_fixture {
  caf::actor_system_config cfg;
  std::optional<caf::actor_system> sys;
  caf::actor shard;
  at::model::matrix value = pattern(300, 7, 0.5f);
  plane_fixture() {
    at::configure(cfg);
    cfg.set("scheduler.max-threads", 2);
    sys.emplace(cfg);
    shard = sys->spawn(fake_shard, value);
  }
  ~plane_fixture() { caf::anon_send_exit(shard, caf::exit_reason::user_shutdown); }

  // A request from a fresh scoped actor; the reply or the error.
  template <class Reply, class... Ts>
  caf::expected<Reply> ask(const caf::actor& to, Ts&&... xs) {
    caf::scoped_actor self{*sys};
    caf::expected<Reply> out{caf::make_error(caf::sec::request_timeout)};
    self->request(to, wait_bound, std::forward<Ts>(xs)...)
      .receive([&](Reply& r) { out = std::move(r); }, [&](caf::error& e) { out = std::move(e); });
    return out;
  }

  // A member connects to `srv` and its pull is served.
  void member_pulls(dp::server& srv) {
    auto plane = dp::open(*sys, srv.where(), as_ps(shard), nullptr, std::chrono::seconds(5),
                          [](const std::string& line) { BOOST_TEST_MESSAGE("member: " << line); });
    at::pull_request pull;
    pull.partitions.push_back(at::partition_key{0, 0});
    auto got = ask<at::pull_reply>(plane, at::pull_atom::value, pull);
    BOOST_REQUIRE_MESSAGE(got, why(got));
    caf::anon_send_exit(plane, caf::exit_reason::user_shutdown);
  }

  // Waits (bounded) until `a` is down.
  void wait_down(const caf::actor& a) {
    caf::scoped_actor self{*sys};
    self->monitor(a);
    bool down = false;
    self->receive([&](caf::down_msg&) { down = true; }, caf::after(wait_bound) >> [] {});
    BOOST_REQUIRE(down);
  }
};

int connect_to(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  BOOST_REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

// The greeting a client sends: magic "ATDH", version 1, the token.
void greet(int fd, const std::string& token) {
  char hello[40] = {};
  uint32_t magic = 0x48445441, version = 1;
  std::memcpy(hello, &magic, 4);
  std::memcpy(hello + 4, &version, 4);
  std::memcpy(hello + 8, token.data(), std::min<size_t>(32, token.size()));
  BOOST_REQUIRE(::send(fd, hello, sizeof hello, MSG_NOSIGNAL) == 40);
}

// Reads until the peer closes; true when it closed (not timed out).
bool closed_by_peer(int fd) {
  char buf[64];
  for (;;) {
    auto r = ::recv(fd, buf, sizeof buf, 0);
    if (r == 0) return true;
    if (r < 0) return false;
  }
}

// A forged frame for a server to refuse: the wire's fixed header (data_plane_wire.hpp),
// then raw words (shape entries, a ring position) or a message's bytes.
struct raw_header {
  uint32_t magic, tensors;
  uint64_t id, meta;
};
constexpr uint32_t frame_magic = 0x46445441;

std::string bytes_of(const raw_header& h, const std::vector<uint64_t>& extra = {}) {
  std::string b(reinterpret_cast<const char*>(&h), sizeof h);
  if (!extra.empty()) b.append(reinterpret_cast<const char*>(extra.data()), extra.size() * 8);
  return b;
}

// Greets the server at `where` as a member, sends `bytes`, and checks that the server
// closes the connection.
void send_expecting_close(const dp::endpoint& where, const std::string& bytes) {
  int fd = connect_to(where.port);
  greet(fd, where.token);
  char ok = 0;
  BOOST_REQUIRE_EQUAL(::recv(fd, &ok, 1, MSG_WAITALL), 1);
  ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  BOOST_CHECK(closed_by_peer(fd));
  ::close(fd);
}

}  // namespace

BOOST_FIXTURE_TEST_CASE(pulls_pushes_and_row_pulls_keep_every_bit, plane_fixture) {
  dp::server srv{*sys, as_ps(shard), std::chrono::seconds(10)};
  BOOST_REQUIRE_NE(srv.where().port, 0);
  BOOST_CHECK_EQUAL(srv.where().token.size(), 32u);
  auto routes = std::make_shared<at::shard_routes>();
  auto plane = dp::open(*sys, srv.where(), as_ps(shard), routes, std::chrono::seconds(5));

  at::pull_request pull;
  pull.partitions.push_back(at::partition_key{2, 1});
  auto got = ask<at::pull_reply>(plane, at::pull_atom::value, pull);
  BOOST_REQUIRE_MESSAGE(got, why(got));
  BOOST_REQUIRE_EQUAL(got->values.size(), 1u);
  BOOST_CHECK_EQUAL(got->values[0].key.variable, 2);
  BOOST_CHECK_EQUAL(got->values[0].key.index, 1);
  BOOST_CHECK_EQUAL(got->values[0].version, 7u);
  BOOST_CHECK(same_bits(*got->values[0].value.value, value));
  BOOST_CHECK_EQUAL(srv.connections(), 1u);

  // Once connected the route table sends the shard's tensor requests through the plane
  // (to its entry, which writes on the requester's own thread), and a pull that way works.
  auto route = routes->to(shard);
  BOOST_CHECK(route != shard);
  auto via = ask<at::pull_reply>(route, at::pull_atom::value, pull);
  BOOST_REQUIRE_MESSAGE(via, why(via));
  BOOST_REQUIRE_EQUAL(via->values.size(), 1u);
  BOOST_CHECK(same_bits(*via->values[0].value.value, value));

  at::push_request push;
  auto grad = pattern(64, 3, -2.0f);
  push.dense.push_back(at::dense_slice{at::partition_key{0, 0}, 1, at::tensor{grad}});
  push.dense.push_back(at::dense_slice{at::partition_key{1, 0}, 1, at::tensor{}});  // absent: stays absent
  auto ack = ask<at::push_reply>(plane, at::push_atom::value, push);
  BOOST_REQUIRE_MESSAGE(ack, why(ack));
  BOOST_CHECK_EQUAL(ack->max_staleness, 3u);

  at::pull_rows_request rows;
  rows.variable = 4;
  rows.ids = {299, 0, 17};
  auto r = ask<at::rows_reply>(plane, at::pull_rows_atom::value, rows);
  BOOST_REQUIRE_MESSAGE(r, why(r));
  BOOST_CHECK(r->ids == rows.ids);
  BOOST_CHECK_EQUAL(r->version, 9u);
  BOOST_REQUIRE_EQUAL(r->rows.rows(), 3);
  BOOST_CHECK(same_bits(r->rows.value->row(0), value.row(299)));
  BOOST_CHECK(same_bits(r->rows.value->row(2), value.row(17)));

  // The shard got the gradient bit for bit, and the absent one as absent.
  auto pushed = ask<std::vector<at::tensor>>(shard, hold_atom::value);
  BOOST_REQUIRE(pushed);
  BOOST_REQUIRE_EQUAL(pushed->size(), 2u);
  BOOST_REQUIRE((*pushed)[0].value);
  BOOST_CHECK(same_bits(*(*pushed)[0].value, grad));
  BOOST_CHECK(!(*pushed)[1].value);

  caf::anon_send_exit(plane, caf::exit_reason::user_shutdown);
  wait_down(plane);
  BOOST_CHECK(routes->to(shard) == shard);  // back to BASP
}

// Large tensors (1.2 MB each way, as a worker's pull and push of a small MLP) travel in
// the connection's shared memory, bit for bit, through many laps of the 8 MiB rings with
// a pull and a push in flight at once; without it (the client offers none) they travel
// inline, equally exact. Small ones stay inline either way.
BOOST_FIXTURE_TEST_CASE(large_tensors_travel_in_shared_memory_lap_after_lap, plane_fixture) {
  auto big = pattern(1000, 300, 0.25f);
  auto big_shard = sys->spawn(fake_shard, big);
  for (bool shared : {true, false}) {
    dp::server srv{*sys, as_ps(big_shard), std::chrono::seconds(10)};
    auto plane = dp::open(*sys, srv.where(), as_ps(big_shard), nullptr, std::chrono::seconds(5), nullptr, shared);
    at::pull_request pull;
    pull.partitions.push_back(at::partition_key{0, 0});
    for (int round = 0; round < 24; ++round) {
      at::push_request push;
      auto grad = pattern(1000, 300, static_cast<float>(round));
      push.dense.push_back(at::dense_slice{at::partition_key{0, 0}, 1, at::tensor{grad}});
      caf::scoped_actor self{*sys};
      // Both in flight before either answer is read.
      auto p1 = self->request(plane, wait_bound, at::push_atom::value, push);
      auto p2 = self->request(plane, wait_bound, at::pull_atom::value, pull);
      bool pushed = false, pulled = false;
      p1.receive([&](const at::push_reply& r) { pushed = r.max_staleness == 3; },
                 [&](caf::error& e) { BOOST_ERROR("push " << round << ": " << at::describe(e)); });
      p2.receive([&](const at::pull_reply& r) { pulled = same_bits(*r.values.at(0).value.value, big); },
                 [&](caf::error& e) { BOOST_ERROR("pull " << round << ": " << at::describe(e)); });
      BOOST_REQUIRE(pushed);
      BOOST_REQUIRE_MESSAGE(pulled, "round " << round << " pulled other bits");
    }
    auto kept = ask<std::vector<at::tensor>>(big_shard, hold_atom::value);
    BOOST_REQUIRE(kept);
    BOOST_REQUIRE_GE(kept->size(), 24u);
    for (int round = 0; round < 24; ++round)
      BOOST_REQUIRE_MESSAGE(same_bits(*(*kept)[kept->size() - 24 + static_cast<size_t>(round)].value,
                                      pattern(1000, 300, static_cast<float>(round))),
                            "push " << round << " reached the shard changed");
    BOOST_CHECK_EQUAL(srv.shared_memory_connections(), shared ? 1u : 0u);
    caf::anon_send_exit(plane, caf::exit_reason::user_shutdown);
    wait_down(plane);
  }
  caf::anon_send_exit(big_shard, caf::exit_reason::user_shutdown);
}

BOOST_FIXTURE_TEST_CASE(a_request_of_another_kind_sent_to_the_stand_in_is_refused, plane_fixture) {
  dp::server srv{*sys, as_ps(shard), std::chrono::seconds(10)};
  auto plane = dp::open(*sys, srv.where(), as_ps(shard), nullptr, std::chrono::seconds(5));
  auto r = ask<std::string>(plane, at::stats_atom::value);
  BOOST_REQUIRE(!r);
  BOOST_CHECK_NE(at::describe(r.error()).find("pulls and pushes only"), std::string::npos);
  // The connection stays usable.
  at::pull_request pull;
  pull.partitions.push_back(at::partition_key{0, 0});
  BOOST_CHECK(ask<at::pull_reply>(plane, at::pull_atom::value, pull));
  caf::anon_send_exit(plane, caf::exit_reason::user_shutdown);
}

BOOST_FIXTURE_TEST_CASE(a_wrong_token_is_refused_and_the_stand_in_ends, plane_fixture) {
  dp::server srv{*sys, as_ps(shard), std::chrono::seconds(10)};
  auto bad = srv.where();
  bad.token[0] = bad.token[0] == 'a' ? 'b' : 'a';
  auto routes = std::make_shared<at::shard_routes>();
  auto plane = dp::open(*sys, bad, as_ps(shard), routes, std::chrono::seconds(5));
  wait_down(plane);
  BOOST_CHECK_EQUAL(srv.refused(), 1u);
  BOOST_CHECK_EQUAL(srv.connections(), 0u);
  BOOST_CHECK(routes->to(shard) == shard);  // it never routed anything
  // Nothing listening there at all: the stand-in ends too.
  dp::endpoint nowhere;
  nowhere.port = 1;
  nowhere.token = srv.where().token;
  auto lost = dp::open(*sys, nowhere, as_ps(shard), routes, std::chrono::seconds(5));
  wait_down(lost);
}

BOOST_FIXTURE_TEST_CASE(open_requests_fail_at_once_when_the_connection_goes, plane_fixture) {
  auto routes = std::make_shared<at::shard_routes>();
  std::optional<dp::server> srv;
  srv.emplace(*sys, as_ps(shard), std::chrono::seconds(30));
  auto plane = dp::open(*sys, srv->where(), as_ps(shard), routes, std::chrono::seconds(5));
  at::pull_request first;
  first.partitions.push_back(at::partition_key{0, 0});
  BOOST_REQUIRE(ask<at::pull_reply>(plane, at::pull_atom::value, first));
  caf::scoped_actor self{*sys};
  at::pull_request held;
  held.partitions.push_back(at::partition_key{0, 99});  // the shard never answers it
  auto started = std::chrono::steady_clock::now();
  auto pending = self->request(plane, std::chrono::seconds(60), at::pull_atom::value, held);
  srv.reset();  // the ps side goes, with the request open
  std::string failure;
  pending.receive([&](at::pull_reply&) { failure = "answered"; }, [&](caf::error& e) { failure = at::describe(e); });
  BOOST_CHECK_MESSAGE(failure.find("shard_lost") != std::string::npos, failure);
  BOOST_CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(30));
  wait_down(plane);
  BOOST_CHECK(routes->to(shard) == shard);
}

BOOST_FIXTURE_TEST_CASE(malformed_frames_close_only_their_connection, plane_fixture) {
  dp::server srv{*sys, as_ps(shard), std::chrono::seconds(10)};
  auto where = srv.where();
  auto plane = dp::open(*sys, where, as_ps(shard), nullptr, std::chrono::seconds(5));
  at::pull_request pull;
  pull.partitions.push_back(at::partition_key{0, 0});
  BOOST_REQUIRE(ask<at::pull_reply>(plane, at::pull_atom::value, pull));
  auto attack = [&](const std::string& bytes) { send_expecting_close(where, bytes); };
  constexpr uint32_t magic = frame_magic;
  attack(bytes_of({0x12345678, 0, 1, 0}));                           // not a frame
  attack(bytes_of({magic, 1u << 20, 1, 0}));                         // a million tensors
  attack(bytes_of({magic, 0, 1, uint64_t{1} << 40}));                // a terabyte of message
  attack(bytes_of({magic, 1, 1, 0}, {uint64_t{1} << 40, 1}));        // a 2^40 x 1 tensor
  attack(bytes_of({magic, 1, 1, 0}, {0, 0}));                        // a 0 x 0 tensor in the table
  attack(bytes_of({magic, 0, 1, 8}, {0x0102030405060708}));          // meta that is no message
  attack(bytes_of({magic, 0x80000001u, 1, 0}, {4, 4, 0}));           // floats in shared memory it has none of
  BOOST_CHECK_EQUAL(srv.refused(), 7u);
  // A client that greets wrongly, or not at all before closing.
  {
    int fd = connect_to(where.port);
    greet(fd, std::string(32, 'x'));
    BOOST_CHECK(closed_by_peer(fd));
    ::close(fd);
  }
  BOOST_CHECK_EQUAL(srv.refused(), 8u);
  // The healthy connection never noticed.
  auto again = ask<at::pull_reply>(plane, at::pull_atom::value, pull);
  BOOST_REQUIRE_MESSAGE(again, why(again));
  BOOST_CHECK(same_bits(*again->values[0].value.value, value));
  caf::anon_send_exit(plane, caf::exit_reason::user_shutdown);
}

namespace {

// The process's peak resident memory (VmHWM), in kB.
long peak_kb() {
  FILE* f = std::fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  while (f && std::fgets(line, sizeof line, f))
    if (std::strncmp(line, "VmHWM:", 6) == 0) kb = std::atol(line + 6);
  if (f) std::fclose(f);
  return kb;
}

}  // namespace

BOOST_FIXTURE_TEST_CASE(a_member_announcing_more_than_the_job_sends_reserves_nothing, plane_fixture) {
  dp::server::limits l;
  l.max_frame_bytes = 1 << 20;  // this job's largest message
  dp::server srv{*sys, as_ps(shard), std::chrono::seconds(10), l};
  auto where = srv.where();
  auto before = peak_kb();
  auto attack = [&](const raw_header& h, std::vector<uint64_t> extra) {
    send_expecting_close(where, bytes_of(h, extra));
  };
  constexpr uint32_t magic = frame_magic;
  for (int i = 0; i < 4; ++i) {
    attack({magic, 0, 1, 0x3fffffff}, {});                 // 1 GiB of message
    attack({magic, 1, 1, 0}, {uint64_t{1} << 14, 1 << 14});  // a 1 GiB tensor
  }
  BOOST_CHECK_EQUAL(srv.refused(), 8u);
  auto after = peak_kb();
  BOOST_TEST_MESSAGE("peak resident " << before << " kB before, " << after << " kB after");
  BOOST_CHECK_LT(after - before, 64 * 1024);  // not one of those gigabytes was reserved
}

// A frame's message names its element types, and CAF builds each from its name: some of
// CAF 0.17.6's own types are unsafe on a peer's bytes (refused_caf_content in
// basp_check.hpp). Anywhere in a frame's message, they close the connection before CAF
// reads it.
BOOST_FIXTURE_TEST_CASE(a_message_holding_what_caf_cannot_read_safely_is_refused_before_caf_reads_it, plane_fixture) {
  std::mutex mtx;
  std::vector<std::string> lines;
  dp::server srv{*sys, as_ps(shard), std::chrono::seconds(10), {}, [&](const std::string& line) {
                   std::lock_guard<std::mutex> g{mtx};
                   lines.push_back(line);
                 }};
  auto where = srv.where();
  auto attack = [&](const std::string& meta) {
    send_expecting_close(where, bytes_of({frame_magic, 0, 1, meta.size()}) + meta);
  };
  auto before = peak_kb();
  // Two allocate and zero 4 GiB (CAF would, before finding 1 byte), two throw, one crashes
  // when printed.
  const std::pair<const std::string&, const char*> unsafe[] = {{unsafe_caf::charbuf, "@charbuf"},
                                                               {unsafe_caf::new_data_msg, "@new_data_msg"},
                                                               {unsafe_caf::settings, "settings"},
                                                               {unsafe_caf::config_value, "config_value"},
                                                               {unsafe_caf::duration, "@duration"}};
  for (auto& u : unsafe) attack(u.first);
  // A node id of CAF's uri kind with a bad host is not refused by name (basp_check.hpp):
  // CAF throws, and the connection's reader closes it, the server serving on.
  attack(unsafe_caf::node_uri);
  BOOST_CHECK_EQUAL(srv.refused(), std::size(unsafe) + 1);
  auto after = peak_kb();
  BOOST_CHECK_LT(after - before, 64 * 1024);  // nothing near 4 GiB was touched
  std::lock_guard<std::mutex> g{mtx};
  for (auto& u : unsafe) {
    bool named = false;
    for (auto& x : lines)
      named = named || (x.find("a message holding") != std::string::npos && x.find(u.second) != std::string::npos);
    BOOST_CHECK_MESSAGE(named, "no log line names " << u.second);
  }
  bool thrown = false;
  for (auto& x : lines) thrown = thrown || x.find("a failure reading a frame: invalid type found") != std::string::npos;
  BOOST_CHECK_MESSAGE(thrown, "no log line says what CAF threw");
}

// The node's budget for frames being read: members that announce big frames and stall
// hold at most the budget between them, and each gives its share back at its frame
// deadline (the request timeout), so a member's frame is served after.
BOOST_FIXTURE_TEST_CASE(stalled_frames_hold_at_most_the_nodes_budget_and_give_it_back, plane_fixture) {
  dp::server::limits l;
  l.max_frame_bytes = 1 << 20;
  l.max_bytes_in_flight = (1 << 20) + (1 << 19);  // one whole frame and a half
  std::mutex mtx;
  std::vector<std::string> lines;
  dp::server srv{*sys, as_ps(shard), std::chrono::milliseconds(600), l, [&](const std::string& line) {
                   std::lock_guard<std::mutex> g{mtx};
                   lines.push_back(line);
                 }};
  auto logged = [&](const std::string& part) {
    std::lock_guard<std::mutex> g{mtx};
    for (auto& x : lines)
      if (x.find(part) != std::string::npos) return true;
    return false;
  };
  auto where = srv.where();
  struct header {
    uint32_t magic, tensors;
    uint64_t id, meta;
  };
  // A frame announcing one 256 x 1024 tensor (1 MiB), whose floats never come.
  auto stall = [&] {
    int fd = connect_to(where.port);
    greet(fd, where.token);
    char ok = 0;
    BOOST_REQUIRE_EQUAL(::recv(fd, &ok, 1, MSG_WAITALL), 1);
    header h{0x46445441, 1, 1, 0};
    uint64_t shape[2] = {256, 1024};
    std::vector<char> b(sizeof h + sizeof shape);
    std::memcpy(b.data(), &h, sizeof h);
    std::memcpy(b.data() + sizeof h, shape, sizeof shape);
    BOOST_REQUIRE(::send(fd, b.data(), b.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(b.size()));
    return fd;
  };
  // Three such frames: the first takes 1 MiB of the budget, the other two wait (half a
  // MiB is left). When the first's deadline (the request timeout) ends it, one of the
  // two takes its share, and the other's wait ends first: refused for the budget.
  auto started = std::chrono::steady_clock::now();
  std::vector<int> fds;
  for (int i = 0; i < 3; ++i) fds.push_back(stall());
  for (int fd : fds) {
    BOOST_CHECK(closed_by_peer(fd));
    ::close(fd);
  }
  BOOST_CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(5));
  BOOST_CHECK_EQUAL(srv.refused(), 3u);
  for (auto& x : lines) BOOST_TEST_MESSAGE(x);
  BOOST_CHECK(logged("a frame of 1048576 bytes waited 600 ms for the node's data-plane budget"));
  BOOST_CHECK(logged("the rest of a frame of 1048576 bytes did not come within 600 ms"));
  // The budget is whole again: a member's pull is served.
  member_pulls(srv);
}

// Out of descriptors (EMFILE) in the accept loop: the waiting connections are closed
// and the loop goes on; once descriptors are free again a member is served. (Before, the
// accept loop ended at the first EMFILE and the shard's data plane took no one again.)
BOOST_FIXTURE_TEST_CASE(running_out_of_descriptors_does_not_end_the_accept_loop, plane_fixture) {
  std::mutex mtx;
  std::vector<std::string> lines;
  dp::server srv{*sys, as_ps(shard), std::chrono::seconds(10), dp::server::limits{}, [&](const std::string& line) {
                   std::lock_guard<std::mutex> g{mtx};
                   lines.push_back(line);
                 }};
  auto port = srv.where().port;
  rlimit before{};
  BOOST_REQUIRE(::getrlimit(RLIMIT_NOFILE, &before) == 0);
  // The clients are a child process, with descriptors of its own.
  int go[2];
  BOOST_REQUIRE(::pipe(go) == 0);
  pid_t child = ::fork();
  BOOST_REQUIRE(child >= 0);
  if (child == 0) {
    char c;
    if (::read(go[0], &c, 1) != 1) ::_exit(1);
    std::vector<int> held;
    for (int i = 0; i < 20; ++i) {
      int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(port);
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) held.push_back(fd);
    }
    ::sleep(2);
    ::_exit(0);
  }
  // This process: room for a handful of descriptors more, then the flood.
  size_t open_now = 0;
  for (auto& e : std::filesystem::directory_iterator("/proc/self/fd")) open_now += e.path().empty() ? 0 : 1;
  rlimit tight = before;
  tight.rlim_cur = open_now + 2;
  BOOST_REQUIRE(::setrlimit(RLIMIT_NOFILE, &tight) == 0);
  BOOST_REQUIRE(::write(go[1], "x", 1) == 1);
  int status = 0;
  BOOST_REQUIRE(::waitpid(child, &status, 0) == child);
  BOOST_REQUIRE(::setrlimit(RLIMIT_NOFILE, &before) == 0);
  ::close(go[0]);
  ::close(go[1]);
  BOOST_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  {
    std::lock_guard<std::mutex> g{mtx};
    bool shed = false;
    for (auto& x : lines) shed = shed || (x.find("closed") != std::string::npos && x.find("Too many open files") != std::string::npos);
    for (auto& x : lines) BOOST_TEST_MESSAGE(x);
    BOOST_CHECK_MESSAGE(shed, "no connection was shed for EMFILE");
  }
  member_pulls(srv);  // the accept loop is still there
}

BOOST_FIXTURE_TEST_CASE(a_greeting_must_come_whole_within_its_deadline, plane_fixture) {
  dp::server::limits l;
  l.greeting_deadline = std::chrono::milliseconds(500);
  dp::server srv{*sys, as_ps(shard), std::chrono::seconds(10), l};
  int fd = connect_to(srv.where().port);
  // A byte at a time, slower than the deadline allows in total (each byte well within
  // it: a per-read timeout would wait forever).
  auto started = std::chrono::steady_clock::now();
  for (int i = 0; i < 8; ++i) {
    ::send(fd, "A", 1, MSG_NOSIGNAL);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  BOOST_CHECK(closed_by_peer(fd));
  ::close(fd);
  BOOST_CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(5));
  BOOST_CHECK_EQUAL(srv.refused(), 1u);
}

BOOST_FIXTURE_TEST_CASE(connections_over_the_greeting_cap_are_closed_before_a_thread_exists, plane_fixture) {
  dp::server::limits l;
  l.max_greeting = 3;
  l.greeting_deadline = std::chrono::seconds(30);
  dp::server srv{*sys, as_ps(shard), std::chrono::seconds(30), l};
  auto port = srv.where().port;
  std::vector<int> idle;
  for (int i = 0; i < 3; ++i) idle.push_back(connect_to(port));
  int extra = connect_to(port);
  BOOST_CHECK(closed_by_peer(extra));  // at once: the three hold every slot
  ::close(extra);
  for (int fd : idle) ::close(fd);
  // The slots come back as the three go (each is refused for its missing greeting, after
  // its slot is free): a member then gets in.
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (srv.refused() < 4 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  BOOST_REQUIRE_EQUAL(srv.refused(), 4u);
  member_pulls(srv);
}

namespace {

namespace wire = actortrain::data_plane::wire;

// A region as a client makes it (a memfd holding the header and two rings), not sealed
// yet; closed when the test ends, however it ends.
at::net::unique_fd region_before_its_seals(const char* name) {
  at::net::unique_fd mem{::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING)};
  BOOST_REQUIRE(mem.get() >= 0);
  BOOST_REQUIRE(::ftruncate(mem.get(), static_cast<off_t>(wire::region_header + 2 * wire::ring_bytes)) == 0);
  uint64_t head[2] = {wire::region_magic, wire::ring_bytes};
  BOOST_REQUIRE(::pwrite(mem.get(), head, sizeof head, 0) == sizeof head);
  return mem;
}

}  // namespace

BOOST_FIXTURE_TEST_CASE(an_unsealed_region_is_not_mapped, plane_fixture) {
  dp::server srv{*sys, as_ps(shard), std::chrono::seconds(10)};
  auto where = srv.where();
  // A region as a client would make it, but without the seals: it could be shrunk under
  // the server's copies.
  auto mem = region_before_its_seals("unsealed");
  int fd = connect_to(where.port);
  char hello[40] = {};
  uint32_t magic = 0x48445441, version = 2;
  std::memcpy(hello, &magic, 4);
  std::memcpy(hello + 4, &version, 4);
  std::memcpy(hello + 8, where.token.data(), 32);
  char offer[64] = {};
  auto name = "/proc/" + std::to_string(::getpid()) + "/fd/" + std::to_string(mem.get());
  std::memcpy(offer, name.data(), std::min(name.size(), sizeof offer - 1));
  BOOST_REQUIRE(::send(fd, hello, sizeof hello, MSG_NOSIGNAL) == 40);
  BOOST_REQUIRE(::send(fd, offer, sizeof offer, MSG_NOSIGNAL) == 64);
  char ok = 0;
  BOOST_REQUIRE_EQUAL(::recv(fd, &ok, 1, MSG_WAITALL), 1);
  BOOST_CHECK_EQUAL(int{ok}, 1);  // greeted, floats inline
  BOOST_CHECK_EQUAL(srv.shared_memory_connections(), 0u);
  // Sealed as the client seals it, the same region is taken.
  BOOST_REQUIRE(::fcntl(mem.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0);
  int fd2 = connect_to(where.port);
  BOOST_REQUIRE(::send(fd2, hello, sizeof hello, MSG_NOSIGNAL) == 40);
  BOOST_REQUIRE(::send(fd2, offer, sizeof offer, MSG_NOSIGNAL) == 64);
  BOOST_REQUIRE_EQUAL(::recv(fd2, &ok, 1, MSG_WAITALL), 1);
  BOOST_CHECK_EQUAL(int{ok}, 2);
  BOOST_CHECK_EQUAL(srv.shared_memory_connections(), 1u);
  BOOST_CHECK(::ftruncate(mem.get(), 4096) != 0);  // and nobody can shrink it now
  ::close(fd);
  ::close(fd2);
}

// A member that sends pulls and stops reading: the shard hands each reply to that
// connection's writer thread, so it never waits on that member. Another member's pull,
// queued behind all of the stalled member's, is answered at once; when the stalled
// member reads again, every frame arrives whole and in order.
BOOST_FIXTURE_TEST_CASE(a_member_that_stops_reading_stalls_only_its_own_replies, plane_fixture) {
  auto big = pattern(200, 256, 0.75f);  // 200 KiB a reply: inline, under the shared-memory threshold
  auto big_shard = sys->spawn(fake_shard, big);
  dp::server srv{*sys, as_ps(big_shard), std::chrono::seconds(30)};
  auto where = srv.where();
  // The stalled member greets with a sealed region, as a member on this host does, and a
  // small receive buffer.
  auto mem = region_before_its_seals("stalled");
  BOOST_REQUIRE(::fcntl(mem.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0);
  at::net::unique_fd sock{::socket(AF_INET, SOCK_STREAM, 0)};
  BOOST_REQUIRE(sock.get() >= 0);
  int small = 4096;
  ::setsockopt(sock.get(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(where.port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  BOOST_REQUIRE(::connect(sock.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  wire::socket_link stalled{std::move(sock)};
  BOOST_REQUIRE_EQUAL(stalled.tune(std::chrono::seconds(10), std::chrono::seconds(10)), "");
  wire::hello h;
  h.version = wire::protocol_shm;
  std::memcpy(h.token, where.token.data(), wire::token_chars);
  wire::shm_offer offer;
  auto name = "/proc/" + std::to_string(::getpid()) + "/fd/" + std::to_string(mem.get());
  std::memcpy(offer.name, name.data(), std::min(name.size(), wire::shm_name_chars - 1));
  std::vector<iovec> greeting{{&h, sizeof h}, {&offer, sizeof offer}};
  BOOST_REQUIRE_EQUAL(stalled.write(greeting), "");
  char ok = 0;
  BOOST_REQUIRE_EQUAL(stalled.read(&ok, 1), "");
  BOOST_REQUIRE_EQUAL(int{ok}, 2);
  mem.reset();  // as a client does once greeted: the two mappings keep the region
  // 64 pulls (12.5 MiB of replies, more than the socket's buffers hold: the kernel's
  // tcp_wmem and tcp_rmem allow a few MiB), none of them read now.
  at::pull_request pull;
  pull.partitions.push_back(at::partition_key{0, 0});
  constexpr uint64_t pulls = 64;
  for (uint64_t id = 1; id <= pulls; ++id)
    BOOST_REQUIRE_EQUAL(stalled.send(*sys, id, caf::make_message(at::pull_atom::value, pull)), "");
  for (auto until = std::chrono::steady_clock::now() + wait_bound; srv.requests() < pulls;) {
    BOOST_REQUIRE_MESSAGE(std::chrono::steady_clock::now() < until, srv.requests() << " of the pulls reached the shard");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // Every one of them has been read off the socket (the server counts a request just
  // before it enqueues it): this pull is answered after them, and after the replies that
  // fill the stalled member's socket.
  auto plane = dp::open(*sys, where, as_ps(big_shard), nullptr, std::chrono::seconds(5));
  {
    caf::scoped_actor self{*sys};
    bool answered = false;
    // Within wait_bound, not the server's 30 s send timeout, which a shard that waits on
    // the stalled member would take.
    self->request(plane, wait_bound, at::pull_atom::value, pull)
      .receive([&](const at::pull_reply& r) { answered = same_bits(*r.values.at(0).value.value, big); },
               [&](caf::error& e) { BOOST_ERROR("the other member's pull: " << at::describe(e)); });
    BOOST_CHECK(answered);
  }
  // The stalled member reads again: every reply, whole, in order.
  for (uint64_t id = 1; id <= pulls; ++id) {
    wire::frame f;
    auto e = wire::receive(*sys, stalled, f);
    BOOST_REQUIRE_MESSAGE(e.empty(), "reply " << id << ": " << e);
    BOOST_REQUIRE_EQUAL(f.id, id);
    BOOST_REQUIRE(f.msg.match_elements<at::pull_reply>());
    BOOST_REQUIRE_MESSAGE(same_bits(*f.msg.get_as<at::pull_reply>(0).values.at(0).value.value, big),
                          "reply " << id << " carried other bits");
  }
  caf::anon_send_exit(plane, caf::exit_reason::user_shutdown);
  wait_down(plane);
  caf::anon_send_exit(big_shard, caf::exit_reason::user_shutdown);
}

// -- between hosts: the data plane inside TLS ---------------------------------------------

namespace {

// A CA and one node certificate (tools/make-certs) in a scratch directory of their own.
struct certs {
  std::string dir;
  explicit certs(const std::string& name) {
    dir = (std::filesystem::temp_directory_path() / ("actortrain-dp-" + name + "-" + std::to_string(::getpid()))).string();
    auto cmd = std::string(ACTORTRAIN_SOURCE_DIR) + "/tools/make-certs " + dir + " node >/dev/null";
    BOOST_REQUIRE_EQUAL(std::system(cmd.c_str()), 0);
  }
  ~certs() { std::filesystem::remove_all(dir); }
  std::shared_ptr<const at::detail::tls::context> context() const {
    return dp::tls_context(dir + "/node.pem", dir + "/node.key", dir + "/ca.pem");
  }
};

}  // namespace

BOOST_FIXTURE_TEST_CASE(inside_tls_every_bit_crosses_and_strangers_are_refused, plane_fixture) {
  certs ours{"a"}, theirs{"b"};
  dp::server::limits l;
  l.tls = ours.context();
  l.greeting_deadline = std::chrono::milliseconds(1500);
  dp::server srv{*sys, as_ps(shard), std::chrono::seconds(10), l};
  std::vector<std::string> lines;
  std::mutex lines_mtx;
  auto log = [&](const std::string& line) {
    std::lock_guard<std::mutex> g{lines_mtx};
    lines.push_back(line);
  };
  // A member: the job's certificate. Pulls and pushes keep every bit (a 4 MiB one too:
  // many TLS records, read straight into the matrix).
  auto at = srv.where();
  at.tls = ours.context();
  auto routes = std::make_shared<at::shard_routes>();
  auto plane = dp::open(*sys, at, as_ps(shard), routes, std::chrono::seconds(5), log);
  at::pull_request pull;
  pull.partitions.push_back(at::partition_key{0, 0});
  auto got = ask<at::pull_reply>(plane, at::pull_atom::value, pull);
  BOOST_REQUIRE_MESSAGE(got, why(got));
  BOOST_CHECK(same_bits(*got->values[0].value.value, value));
  at::push_request push;
  push.example_count = 1;
  auto big = pattern(1024, 1024, 0.25f);
  push.dense.push_back(at::dense_slice{at::partition_key{0, 0}, 0, at::tensor{big}});
  auto pushed = ask<at::push_reply>(plane, at::push_atom::value, push);
  BOOST_REQUIRE_MESSAGE(pushed, why(pushed));
  auto kept = ask<std::vector<at::tensor>>(shard, hold_atom::value);
  BOOST_REQUIRE(kept && kept->size() == 1u);
  BOOST_CHECK(same_bits(*(*kept)[0].value, big));
  {
    std::lock_guard<std::mutex> g{lines_mtx};
    bool said = false;
    for (auto& line : lines) said = said || (line.find("connected to 127.0.0.1") != std::string::npos &&
                                               line.find("(TLS") != std::string::npos);
    BOOST_CHECK_MESSAGE(said, "the stand-in did not say it connected over TLS: " << (lines.empty() ? "" : lines.back()));
  }
  caf::anon_send_exit(plane, caf::exit_reason::user_shutdown);
  wait_down(plane);
  BOOST_CHECK_EQUAL(srv.refused(), 0u);

  // A certificate of another CA: refused at the handshake; the stand-in ends.
  auto foreign = srv.where();
  foreign.tls = theirs.context();
  auto refused = dp::open(*sys, foreign, as_ps(shard), routes, std::chrono::seconds(5));
  wait_down(refused);
  // A plaintext greeting with the right token: not TLS, closed.
  int fd = connect_to(srv.where().port);
  greet(fd, srv.where().token);
  BOOST_CHECK(closed_by_peer(fd));
  ::close(fd);
  // Both counted by the server, which serves members on.
  for (int i = 0; i < 100 && srv.refused() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  BOOST_CHECK_EQUAL(srv.refused(), 2u);
  auto again = dp::open(*sys, at, as_ps(shard), routes, std::chrono::seconds(5));
  auto got2 = ask<at::pull_reply>(again, at::pull_atom::value, pull);
  BOOST_REQUIRE_MESSAGE(got2, why(got2));
  caf::anon_send_exit(again, caf::exit_reason::user_shutdown);
  wait_down(again);
}

// "wire_floats": "bf16" between hosts, inside TLS and on a plain socket (the two write
// and read a frame's floats by different paths): a training pull's values, its rows
// and a push's gradients arrive rounded to bfloat16 (each float the nearest bf16, not the
// float sent); an evaluation pull and its rows arrive bit for bit; so does everything
// when the link does not reduce. The two ends decide for what each sends.
BOOST_FIXTURE_TEST_CASE(bf16_rounds_gradients_and_training_pulls_only, plane_fixture) {
  certs ours{"c"};
  auto rounded = [](const at::model::matrix& m) {
    at::model::matrix out(m.rows(), m.cols());
    std::vector<uint16_t> h(static_cast<size_t>(m.size()));
    dp::bf16::narrow(m.data(), h.size(), h.data());
    dp::bf16::widen(h.data(), h.size(), out.data());
    return out;
  };
  BOOST_REQUIRE(!same_bits(rounded(value), value));  // (the pattern does lose bits)
  for (bool tls : {true, false}) {
    for (bool reduce : {true, false}) {
      BOOST_TEST_CONTEXT("tls " << tls << ", reduce " << reduce) {
        dp::server::limits l;
        if (tls) l.tls = ours.context();
        l.bf16 = reduce;
        dp::server srv{*sys, as_ps(shard), std::chrono::seconds(10), l};
        auto at = srv.where();
        if (tls) at.tls = ours.context();
        at.bf16 = reduce;
        auto plane =
          dp::open(*sys, at, as_ps(shard), nullptr, std::chrono::seconds(5), nullptr, /*shared_memory=*/false);
        for (bool training : {true, false}) {
          at::pull_request pull;
          pull.partitions.push_back(at::partition_key{0, 0});
          pull.training = training;
          auto got = ask<at::pull_reply>(plane, at::pull_atom::value, pull);
          BOOST_REQUIRE_MESSAGE(got, why(got));
          BOOST_CHECK_MESSAGE(same_bits(*got->values[0].value.value, reduce && training ? rounded(value) : value),
                              "pull, reduce " << reduce << ", training " << training);
          BOOST_CHECK(!got->values[0].value.reducible);  // (received: not to be sent on rounded)
          at::pull_rows_request rows;
          rows.variable = 4;
          rows.ids = {299, 0, 17};
          rows.training = training;
          auto r = ask<at::rows_reply>(plane, at::pull_rows_atom::value, rows);
          BOOST_REQUIRE_MESSAGE(r, why(r));
          BOOST_CHECK(r->ids == rows.ids);  // ids are never rounded
          at::model::matrix want(3, value.cols());
          want.row(0) = value.row(299);
          want.row(1) = value.row(0);
          want.row(2) = value.row(17);
          BOOST_CHECK_MESSAGE(same_bits(*r->rows.value, reduce && training ? rounded(want) : want),
                              "rows, reduce " << reduce << ", training " << training);
        }
        at::push_request push;
        push.example_count = 1;
        auto grad = pattern(1024, 300, -0.3f);
        push.dense.push_back(at::dense_slice{at::partition_key{0, 0}, 0, at::tensor{grad}});
        auto ack = ask<at::push_reply>(plane, at::push_atom::value, push);
        BOOST_REQUIRE_MESSAGE(ack, why(ack));
        auto kept = ask<std::vector<at::tensor>>(shard, hold_atom::value);
        BOOST_REQUIRE(kept && !kept->empty());
        BOOST_CHECK_MESSAGE(same_bits(*kept->back().value, reduce ? rounded(grad) : grad), "push, reduce " << reduce);
        BOOST_CHECK_EQUAL(srv.shared_memory_connections(), 0u);  // the floats crossed the socket
        caf::anon_send_exit(plane, caf::exit_reason::user_shutdown);
        wait_down(plane);
      }
    }
  }
}

// With shared memory (one host) nothing is rounded although both ends reduce: neither a
// large gradient (in the ring) nor a small training pull (on the stream): whether a
// float is rounded must not depend on a frame's size or on the ring's room.
BOOST_FIXTURE_TEST_CASE(bf16_rounds_nothing_on_a_link_with_shared_memory, plane_fixture) {
  dp::server::limits l;
  l.bf16 = true;
  dp::server srv{*sys, as_ps(shard), std::chrono::seconds(10), l};
  auto at = srv.where();
  at.bf16 = true;
  auto plane = dp::open(*sys, at, as_ps(shard), nullptr, std::chrono::seconds(5));
  at::push_request push;
  push.example_count = 1;
  auto grad = pattern(1024, 300, -0.3f);  // 1.2 MB: in the ring
  push.dense.push_back(at::dense_slice{at::partition_key{0, 0}, 0, at::tensor{grad}});
  auto ack = ask<at::push_reply>(plane, at::push_atom::value, push);
  BOOST_REQUIRE_MESSAGE(ack, why(ack));
  BOOST_CHECK_EQUAL(srv.shared_memory_connections(), 1u);
  auto kept = ask<std::vector<at::tensor>>(shard, hold_atom::value);
  BOOST_REQUIRE(kept && kept->size() == 1u);
  BOOST_CHECK(same_bits(*kept->back().value, grad));
  at::pull_request pull;
  pull.partitions.push_back(at::partition_key{0, 0});
  pull.training = true;
  auto got = ask<at::pull_reply>(plane, at::pull_atom::value, pull);
  BOOST_REQUIRE_MESSAGE(got, why(got));
  BOOST_CHECK(same_bits(*got->values[0].value.value, value));
  caf::anon_send_exit(plane, caf::exit_reason::user_shutdown);
  wait_down(plane);
}
