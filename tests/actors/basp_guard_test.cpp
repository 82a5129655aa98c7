// The BASP stream check and the guard in front of a plain-BASP node, without CAF: the
// guard's hand-over gives its end of each connection to a stand-in for CAF's broker
// that records and echoes what reaches it. Everything listens on 127.0.0.1.

#include <boost/test/unit_test.hpp>

#include "../../actors/src/net/basp_check.hpp"
#include "../../actors/src/net/basp_guard.hpp"

#include <actortrain/actors/net/sockets.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace at = actortrain;
using at::detail::basp_check;
using at::detail::basp_guard;
using namespace std::chrono_literals;

namespace {

std::string header(uint8_t op, uint32_t payload) {
  std::string h(basp_check::header_size, '\0');
  h[0] = static_cast<char>(op);
  h[4] = static_cast<char>(payload >> 24);
  h[5] = static_cast<char>(payload >> 16);
  h[6] = static_cast<char>(payload >> 8);
  h[7] = static_cast<char>(payload);
  return h;
}

std::string message(uint8_t op, size_t payload) { return header(op, static_cast<uint32_t>(payload)) + std::string(payload, 'p'); }

basp_check::limits small() { return {/*max_payload=*/1000, /*max_handshake_payload=*/100}; }

}  // namespace

BOOST_AUTO_TEST_SUITE(basp_check_suite)

BOOST_AUTO_TEST_CASE(a_handshake_then_messages_within_bounds_pass_in_any_cut) {
  auto stream = message(1, 100) + message(1, 100) + message(2, 1000) + message(6, 0) + message(5, 7);
  for (size_t cut = 1; cut <= stream.size(); cut += 7) {
    basp_check c{small()};
    bool ok = true;
    for (size_t i = 0; i < stream.size(); i += cut) ok = ok && c.feed(stream.data() + i, std::min(cut, stream.size() - i));
    BOOST_TEST(ok, "cut " << cut << ": " << c.why());
    BOOST_TEST(c.headers() == 5u);
    BOOST_TEST(c.past_handshake());
  }
}

BOOST_AUTO_TEST_CASE(the_handshake_is_past_only_once_its_payload_went_through) {
  basp_check c{small()};
  auto hs = message(1, 50);
  BOOST_TEST(c.feed(hs.data(), basp_check::header_size + 49));
  BOOST_TEST(!c.past_handshake());
  BOOST_TEST(c.feed(hs.data() + basp_check::header_size + 49, 1));
  BOOST_TEST(c.past_handshake());
}

BOOST_AUTO_TEST_CASE(a_first_header_that_is_no_client_handshake_is_refused) {
  for (uint8_t op : {0, 2, 3, 6, 7, 0x47}) {
    basp_check c{small()};
    auto h = header(op, 0);
    BOOST_TEST(!c.feed(h.data(), h.size()));
    BOOST_TEST(c.why().find("client's handshake") != std::string::npos, c.why());
    BOOST_TEST(!c.feed("x", 1));  // final
  }
}

BOOST_AUTO_TEST_CASE(payloads_over_the_bounds_are_refused_before_they_arrive) {
  basp_check big_handshake{small()};
  auto h = header(1, 101);
  BOOST_TEST(!big_handshake.feed(h.data(), h.size()));
  BOOST_TEST(big_handshake.why() == "a BASP header announced 101 bytes (at most 100 here)");

  basp_check again{small()};
  auto twice = message(1, 0) + header(1, 101);  // the second handshake is bounded too
  BOOST_TEST(!again.feed(twice.data(), twice.size()));

  basp_check c{small()};
  auto s = message(1, 0) + header(2, 0xFFFFFFFF);
  BOOST_TEST(!c.feed(s.data(), s.size()));
  BOOST_TEST(c.why() == "a BASP header announced 4294967295 bytes (at most 1000 here)");
}

BOOST_AUTO_TEST_CASE(an_operation_no_client_sends_is_refused_after_the_handshake) {
  for (uint8_t op : {0, 7, 0xff}) {
    basp_check c{small()};
    auto s = message(1, 0) + header(op, 0);
    BOOST_TEST(!c.feed(s.data(), s.size()), "operation " << int{op});
    BOOST_TEST(c.why().find("which no client sends") != std::string::npos, c.why());
  }
}

BOOST_AUTO_TEST_CASE(http_and_random_bytes_are_refused_at_their_first_header) {
  basp_check c{small()};
  std::string get = "GET / HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n";
  BOOST_TEST(!c.feed(get.data(), get.size()));
  std::string ff(200 * 1024, '\xff');
  basp_check d{small()};
  BOOST_TEST(!d.feed(ff.data(), ff.size()));
}

BOOST_AUTO_TEST_SUITE_END()

namespace {

// A stand-in for CAF's broker: takes each handed-over end, writes a greeting, then echoes
// everything back and counts what reached it.
struct fake_broker {
  std::mutex mtx;
  std::vector<std::thread> threads;
  std::atomic<size_t> handed{0};
  std::atomic<size_t> bytes{0};
  std::atomic<bool> stop{false};

  at::detail::basp_guard::hand_over_fn hand_over() {
    return [this](at::net::unique_fd fd) {
      ++handed;
      std::lock_guard<std::mutex> g{mtx};
      threads.emplace_back([this, f = std::move(fd)]() mutable {
        at::net::set_receive_timeout(f.get(), 100ms);
        try {
          at::net::write_exact(f.get(), "HELLO", 5);
          char buf[4096];
          while (!stop) {
            size_t got = 0;
            try {
              got = at::net::read_some(f.get(), buf, sizeof buf);
            } catch (const at::net::socket_error& e) {
              if (e.code() == EAGAIN || e.code() == EWOULDBLOCK) continue;
              return;
            }
            if (got == 0) return;
            bytes += got;
            at::net::write_exact(f.get(), buf, got);
          }
        } catch (const at::net::socket_error&) {
        }
      });
    };
  }
  ~fake_broker() {
    stop = true;
    for (auto& t : threads) t.join();
  }
};

struct guarded {
  fake_broker broker;
  std::vector<std::string> lines;
  std::mutex mtx;
  std::unique_ptr<basp_guard> guard;
  explicit guarded(basp_guard::limits l) {
    guard = std::make_unique<basp_guard>("127.0.0.1", 0, l, broker.hand_over(), [this](const std::string& s) {
      std::lock_guard<std::mutex> g{mtx};
      lines.push_back(s);
    });
  }
  ~guarded() { guard.reset(); }
  at::net::unique_fd dial() {
    auto fd = at::net::connect_to("127.0.0.1", guard->port(), 5s);
    at::net::set_receive_timeout(fd.get(), 5s);
    return fd;
  }
  bool logged(const std::string& part) {
    std::lock_guard<std::mutex> g{mtx};
    for (auto& l : lines)
      if (l.find(part) != std::string::npos) return true;
    return false;
  }
};

// Reads until the peer closes (true) or 5 s pass without a close (false).
bool closed_by_peer(int fd) {
  char buf[4096];
  try {
    while (at::net::read_some(fd, buf, sizeof buf) > 0) {
    }
    return true;
  } catch (const at::net::socket_error& e) {
    return e.code() == ECONNRESET;
  }
}

basp_guard::limits test_limits() {
  basp_guard::limits l;
  l.max_payload = 1 << 20;
  l.max_pending = 4;
  l.max_connections = 8;
  l.handshake_deadline = 2s;
  return l;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(basp_guard_suite)

BOOST_AUTO_TEST_CASE(a_well_formed_stream_reaches_the_broker_and_its_answers_come_back) {
  guarded g{test_limits()};
  auto fd = g.dial();
  char hello[5];
  BOOST_REQUIRE(at::net::read_exact(fd.get(), hello, 5));
  BOOST_TEST(std::string(hello, 5) == "HELLO");
  auto s = message(1, 60) + message(2, 300000) + message(6, 0);
  at::net::write_exact(fd.get(), s.data(), s.size());
  std::string back(s.size(), '\0');
  BOOST_REQUIRE(at::net::read_exact(fd.get(), back.data(), back.size()));
  BOOST_TEST(back == s);
  BOOST_TEST(g.broker.bytes == s.size());
  BOOST_TEST(g.guard->count().open == 1u);
}

BOOST_AUTO_TEST_CASE(an_oversized_header_closes_the_connection_before_its_payload_reaches_the_broker) {
  guarded g{test_limits()};
  auto fd = g.dial();
  auto s = message(1, 10) + header(2, 0xFFFFFFF0);
  at::net::write_exact(fd.get(), s.data(), s.size());
  BOOST_TEST(closed_by_peer(fd.get()));
  BOOST_TEST(g.guard->count().refused_header == 1u);
  BOOST_TEST(g.broker.bytes <= message(1, 10).size());  // the bad header never reached it
  BOOST_TEST(g.logged("closed the connection from 127.0.0.1:"));
  BOOST_TEST(g.logged("announced 4294967280 bytes"));
}

BOOST_AUTO_TEST_CASE(connections_over_the_pending_cap_are_closed_at_once_and_members_get_in_after) {
  guarded g{test_limits()};
  std::vector<at::net::unique_fd> idle;
  for (int i = 0; i < 4; ++i) idle.push_back(g.dial());
  // The guard has taken the four (each was handed over and greeted).
  char hello[5];
  for (auto& fd : idle) BOOST_REQUIRE(at::net::read_exact(fd.get(), hello, 5));
  auto fifth = g.dial();
  BOOST_TEST(closed_by_peer(fifth.get()));
  BOOST_TEST(g.guard->count().refused_busy >= 1u);
  BOOST_TEST(g.broker.handed == 4u);  // nothing was made for the fifth
  // The deadline frees the slots: a member then completes its handshake.
  for (auto& fd : idle) BOOST_TEST(closed_by_peer(fd.get()));
  BOOST_TEST(g.guard->count().timed_out == 4u);
  auto member = g.dial();
  BOOST_REQUIRE(at::net::read_exact(member.get(), hello, 5));
  auto hs = message(1, 20);
  at::net::write_exact(member.get(), hs.data(), hs.size());
  std::string back(hs.size(), '\0');
  BOOST_REQUIRE(at::net::read_exact(member.get(), back.data(), back.size()));
  BOOST_TEST(back == hs);
}

BOOST_AUTO_TEST_CASE(a_thousand_connections_at_once_leave_the_guard_serving) {
  guarded g{test_limits()};
  std::vector<at::net::unique_fd> flood;
  for (int i = 0; i < 1000; ++i) {
    try {
      flood.push_back(at::net::connect_to("127.0.0.1", g.guard->port(), 1s));
    } catch (const at::net::socket_error&) {
      // the accept queue may be full for a moment: the flood goes on
    }
  }
  // None of them reached a handshake: at no time are more than the cap's four relayed
  // (the deadline frees a slot every 2 s; the rest were closed at once).
  BOOST_TEST(g.guard->count().open <= 4u);
  BOOST_TEST(g.guard->count().refused_busy + g.guard->count().open + g.guard->count().timed_out ==
             g.guard->count().accepted);
  flood.clear();
  // Once the flood's connections are gone (closed, or timed out), a member gets in.
  auto until = std::chrono::steady_clock::now() + 10s;
  while (g.guard->count().open > 0 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(20ms);
  BOOST_TEST(g.guard->count().open == 0u);
  auto member = g.dial();
  char hello[5];
  BOOST_REQUIRE(at::net::read_exact(member.get(), hello, 5));
  BOOST_TEST(std::string(hello, 5) == "HELLO");
}

BOOST_AUTO_TEST_SUITE_END()
