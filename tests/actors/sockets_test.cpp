// The low-level socket helpers (actortrain/actors/net/sockets.hpp) on 127.0.0.1 and on
// socket pairs: a listener on port 0 tells the kernel's port and a connection reaches
// it; large buffers, and many small ones, cross whole in both directions, also when a
// signal cuts a read or a write short; a peer that closes inside a message is an error
// that says how many bytes came, one that closes between messages a clean end; reads
// time out; a write to a vanished peer fails instead of raising SIGPIPE; a closed port
// is refused within the deadline, a taken one named in the error; accept ends at its
// bound and when its listener is shut down. Nothing binds or dials beyond 127.0.0.1.

#include <boost/test/unit_test.hpp>

#include <actortrain/actors/net/sockets.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

namespace net = actortrain::net;
using namespace std::chrono_literals;
using std::chrono::steady_clock;

namespace {

// A read or write that hangs fails after this instead (a helper that loses bytes would
// leave its peer waiting for them).
constexpr auto hang_bound = 10s;

void bound(int fd) {
  net::set_receive_timeout(fd, hang_bound);
  net::set_send_timeout(fd, hang_bound);
}

// A connection over 127.0.0.1: the dialed end and the accepted one.
struct tcp_pair {
  net::unique_fd listener, client, server;
  uint16_t port = 0;
  tcp_pair() {
    listener = net::listen_on("127.0.0.1", 0);
    port = net::local_port(listener.get());
    client = net::connect_to("127.0.0.1", port, 5s);
    server = net::accept_within(listener.get(), 5s);
    bound(client.get());
    bound(server.get());
  }
};

// A connected pair of local stream sockets (no TCP: for the signal tests).
struct unix_pair {
  net::unique_fd a, b;
  unix_pair() {
    int fds[2];
    BOOST_REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
    a.reset(fds[0]);
    b.reset(fds[1]);
    bound(a.get());
    bound(b.get());
  }
};

// Bytes that differ from their neighbours, so a misplaced or missing piece shows.
std::vector<char> pattern(size_t n, unsigned seed) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<char>((i * 131 + seed + i / 251) & 0xff);
  return v;
}

uint16_t peer_port(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  BOOST_REQUIRE(::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  return ntohs(a.sin_port);
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// SIGUSR1 with a handler that does nothing and no SA_RESTART: a blocked recv or sendmsg
// it hits returns early, with EINTR or with the bytes it moved so far.
struct interrupting_signal {
  struct sigaction old {};
  interrupting_signal() {
    struct sigaction sa {};
    sa.sa_handler = [](int) {};
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;
    BOOST_REQUIRE(::sigaction(SIGUSR1, &sa, &old) == 0);
  }
  ~interrupting_signal() { ::sigaction(SIGUSR1, &old, nullptr); }
};

// Signals `t` every 10 ms for `how_long` (it is blocked in a read or a write by then).
void keep_interrupting(std::thread& t, std::chrono::milliseconds how_long) {
  auto until = steady_clock::now() + how_long;
  while (steady_clock::now() < until) {
    ::pthread_kill(t.native_handle(), SIGUSR1);
    std::this_thread::sleep_for(10ms);
  }
}

// A port on 127.0.0.1 that nothing listens on (the kernel's pick, released again).
uint16_t closed_port() {
  auto l = net::listen_on("127.0.0.1", 0);
  return net::local_port(l.get());
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_listener_on_port_0_names_the_kernels_port_and_a_connection_reaches_it) {
  tcp_pair p;
  BOOST_CHECK_NE(p.port, 0);
  BOOST_CHECK_EQUAL(peer_port(p.client.get()), p.port);
  BOOST_CHECK_EQUAL(peer_port(p.server.get()), net::local_port(p.client.get()));
  net::write_exact(p.client.get(), "ping", 4);
  char in[4] = {};
  BOOST_REQUIRE(net::read_exact(p.server.get(), in, 4));
  BOOST_CHECK_EQUAL(std::string(in, 4), "ping");
  net::write_exact(p.server.get(), "pong", 4);
  BOOST_REQUIRE(net::read_exact(p.client.get(), in, 4));
  BOOST_CHECK_EQUAL(std::string(in, 4), "pong");
  // Blocking once connected (its reads wait), and not inherited by child processes.
  BOOST_CHECK_EQUAL(::fcntl(p.client.get(), F_GETFL) & O_NONBLOCK, 0);
  BOOST_CHECK(::fcntl(p.client.get(), F_GETFD) & FD_CLOEXEC);
  BOOST_CHECK(::fcntl(p.server.get(), F_GETFD) & FD_CLOEXEC);
  BOOST_CHECK(::fcntl(p.listener.get(), F_GETFD) & FD_CLOEXEC);
  net::set_no_delay(p.client.get());
  int on = 0;
  socklen_t len = sizeof on;
  BOOST_REQUIRE(::getsockopt(p.client.get(), IPPROTO_TCP, TCP_NODELAY, &on, &len) == 0);
  BOOST_CHECK_NE(on, 0);
}

BOOST_AUTO_TEST_CASE(a_large_buffer_crosses_whole_in_both_directions) {
  tcp_pair p;
  constexpr size_t n = 24 << 20;  // far beyond what the socket buffers hold
  auto up = pattern(n, 1), down = pattern(n, 2);
  std::vector<char> got_up(n), got_down(n);
  auto writer = std::async(std::launch::async, [&] {
    net::write_exact(p.client.get(), up.data(), n);
    BOOST_REQUIRE(net::read_exact(p.client.get(), got_down.data(), n));
  });
  BOOST_REQUIRE(net::read_exact(p.server.get(), got_up.data(), n));
  net::write_exact(p.server.get(), down.data(), n);
  writer.get();
  BOOST_CHECK(got_up == up);
  BOOST_CHECK(got_down == down);
}

BOOST_AUTO_TEST_CASE(many_buffers_in_one_write_arrive_in_order) {
  tcp_pair p;
  // More entries than one sendmsg takes (IOV_MAX is 1024), empty ones among them.
  std::vector<std::vector<char>> parts;
  std::vector<char> all;
  for (unsigned i = 0; i < 3000; ++i) {
    parts.push_back(pattern(i % 7 == 0 ? 0 : 1 + (i * 37) % 4000, i));
    all.insert(all.end(), parts.back().begin(), parts.back().end());
  }
  std::vector<iovec> iov;
  for (auto& part : parts) iov.push_back({part.data(), part.size()});
  auto writer = std::async(std::launch::async, [&] { net::write_exact(p.client.get(), iov); });
  std::vector<char> got(all.size());
  BOOST_REQUIRE(net::read_exact(p.server.get(), got.data(), got.size()));
  writer.get();
  BOOST_CHECK(got == all);
  // Nothing more came than the buffers held.
  p.client.reset();
  char extra;
  BOOST_CHECK(!net::read_exact(p.server.get(), &extra, 1));
}

BOOST_AUTO_TEST_CASE(a_read_cut_short_by_a_signal_goes_on_until_every_byte_came) {
  interrupting_signal sig;
  unix_pair s;
  constexpr size_t n = 64 << 10, first = 1000;  // fits in the socket's buffer: no write waits
  auto sent = pattern(n, 3);
  std::vector<char> got(n, 0);
  std::atomic<bool> returned{false}, may_exit{false};
  std::string failure;
  std::thread reader([&] {
    try {
      if (!net::read_exact(s.b.get(), got.data(), n)) failure = "a clean end";
    } catch (const std::exception& e) {
      failure = e.what();
    }
    returned = true;
    while (!may_exit) std::this_thread::sleep_for(1ms);  // still there to be signalled
  });
  keep_interrupting(reader, 100ms);  // before any byte: EINTR
  net::write_exact(s.a.get(), sent.data(), first);
  keep_interrupting(reader, 300ms);  // with 1000 of the bytes: a short read
  bool early = returned;
  net::write_exact(s.a.get(), sent.data() + first, n - first);
  may_exit = true;
  reader.join();
  BOOST_CHECK_MESSAGE(!early, "read_exact returned before the rest was written");
  BOOST_CHECK_MESSAGE(failure.empty(), failure);
  BOOST_CHECK(got == sent);
}

BOOST_AUTO_TEST_CASE(a_write_cut_short_by_a_signal_goes_on_where_it_stopped) {
  interrupting_signal sig;
  unix_pair s;
  constexpr size_t n = 8 << 20;  // the writer blocks: nobody reads for a while
  auto sent = pattern(n, 4);
  std::string failure;
  std::atomic<bool> may_exit{false};
  std::thread writer([&] {
    try {
      // Three buffers, so a cut can fall inside one or between two.
      std::vector<iovec> iov{{sent.data(), 1000}, {sent.data() + 1000, n / 2}, {sent.data() + 1000 + n / 2, n / 2 - 1000}};
      net::write_exact(s.a.get(), iov);
    } catch (const std::exception& e) {
      failure = e.what();
    }
    while (!may_exit) std::this_thread::sleep_for(1ms);
  });
  keep_interrupting(writer, 300ms);
  std::vector<char> got(n, 0);
  bool whole = net::read_exact(s.b.get(), got.data(), n);
  ::shutdown(s.b.get(), SHUT_RDWR);  // a writer still waiting fails now
  may_exit = true;
  writer.join();
  BOOST_CHECK(whole);
  BOOST_CHECK_MESSAGE(failure.empty(), failure);
  BOOST_CHECK(got == sent);
}

BOOST_AUTO_TEST_CASE(a_peer_closing_inside_a_message_is_an_error_between_messages_a_clean_end) {
  {
    tcp_pair p;
    net::write_exact(p.client.get(), "abc", 3);
    p.client.reset();
    char in[8];
    try {
      net::read_exact(p.server.get(), in, sizeof in);
      BOOST_ERROR("a read of 8 bytes from a peer that sent 3 and closed succeeded");
    } catch (const net::socket_error& e) {
      BOOST_CHECK_MESSAGE(contains(e.what(), "the peer closed the connection after 3 of 8 bytes"), e.what());
      BOOST_CHECK_EQUAL(e.code(), 0);
    }
  }
  {
    tcp_pair p;
    net::write_exact(p.client.get(), "abcd", 4);
    p.client.reset();
    char in[4];
    BOOST_CHECK(net::read_exact(p.server.get(), in, 4));
    BOOST_CHECK(!net::read_exact(p.server.get(), in, 4));  // then the end, cleanly
    BOOST_CHECK_EQUAL(net::read_some(p.server.get(), in, 4), 0u);
  }
}

BOOST_AUTO_TEST_CASE(a_read_that_gets_nothing_times_out) {
  tcp_pair p;
  net::set_receive_timeout(p.server.get(), 100ms);
  char in[8];
  auto start = steady_clock::now();
  try {
    net::read_exact(p.server.get(), in, sizeof in);
    BOOST_ERROR("a read with nothing sent succeeded");
  } catch (const net::socket_error& e) {
    BOOST_CHECK_MESSAGE(contains(e.what(), "timed out reading (0 of 8 bytes arrived)"), e.what());
    BOOST_CHECK(e.code() == EAGAIN || e.code() == EWOULDBLOCK);
  }
  BOOST_CHECK(steady_clock::now() - start < 5s);
  // Once some bytes came, the error says how many.
  net::write_exact(p.client.get(), "abc", 3);
  try {
    net::read_exact(p.server.get(), in, sizeof in);
    BOOST_ERROR("a read of 8 bytes with 3 sent succeeded");
  } catch (const net::socket_error& e) {
    BOOST_CHECK_MESSAGE(contains(e.what(), "3 of 8 bytes"), e.what());
  }
}

BOOST_AUTO_TEST_CASE(a_write_to_a_vanished_peer_fails_without_sigpipe) {
  tcp_pair p;
  p.server.reset();
  auto data = pattern(1 << 20, 5);
  try {
    for (int i = 0; i < 64; ++i) net::write_exact(p.client.get(), data.data(), data.size());
    BOOST_ERROR("64 MiB went to a closed peer");
  } catch (const net::socket_error& e) {
    BOOST_CHECK_MESSAGE(e.code() == EPIPE || e.code() == ECONNRESET, e.what());
    BOOST_CHECK_MESSAGE(contains(e.what(), "send: "), e.what());
  }
}

BOOST_AUTO_TEST_CASE(a_closed_port_is_refused_within_the_deadline) {
  auto port = closed_port();
  auto start = steady_clock::now();
  try {
    net::connect_to("127.0.0.1", port, 2s);
    BOOST_ERROR("connected to a port nothing listens on");
  } catch (const net::socket_error& e) {
    BOOST_CHECK_EQUAL(e.code(), ECONNREFUSED);
    BOOST_CHECK_MESSAGE(contains(e.what(), "cannot connect to 127.0.0.1:" + std::to_string(port) + ": "), e.what());
    BOOST_CHECK_EQUAL(e.reason(), std::strerror(ECONNREFUSED));
  }
  BOOST_CHECK(steady_clock::now() - start < 2s);
}

BOOST_AUTO_TEST_CASE(a_taken_port_cannot_be_listened_on_and_the_error_names_it) {
  auto l = net::listen_on("127.0.0.1", 0);
  auto port = net::local_port(l.get());
  BOOST_CHECK(!net::can_bind("127.0.0.1", port));
  try {
    net::listen_on("127.0.0.1", port, {/*backlog=*/1, /*reuse_address=*/true});
    BOOST_ERROR("listened twice on one port");
  } catch (const net::socket_error& e) {
    BOOST_CHECK_EQUAL(e.code(), EADDRINUSE);
    BOOST_CHECK_MESSAGE(contains(e.what(), "cannot listen on 127.0.0.1:" + std::to_string(port) + ": "), e.what());
  }
  l.reset();
  BOOST_CHECK(net::can_bind("127.0.0.1", port));
}

BOOST_AUTO_TEST_CASE(accept_ends_at_its_bound_and_when_its_listener_is_shut_down) {
  auto l = net::listen_on("127.0.0.1", 0);
  auto port = std::to_string(net::local_port(l.get()));
  auto start = steady_clock::now();
  try {
    net::accept_within(l.get(), 100ms);
    BOOST_ERROR("accepted a connection nobody made");
  } catch (const net::socket_error& e) {
    BOOST_CHECK_EQUAL(e.code(), ETIMEDOUT);
    BOOST_CHECK_MESSAGE(contains(e.what(), "cannot accept on 127.0.0.1:" + port + ": no connection within 100 ms"),
                        e.what());
  }
  BOOST_CHECK(steady_clock::now() - start >= 100ms);
  // How the data plane's server and the guard stop their acceptor threads.
  auto waiting = std::async(std::launch::async, [&]() -> std::string {
    try {
      net::accept_from(l.get());
      return "accepted";
    } catch (const net::socket_error& e) {
      return e.what();
    }
  });
  std::this_thread::sleep_for(50ms);
  ::shutdown(l.get(), SHUT_RDWR);
  BOOST_REQUIRE(waiting.wait_for(5s) == std::future_status::ready);
  BOOST_CHECK_MESSAGE(contains(waiting.get(), "cannot accept on "), "accept_from after shutdown");
}

BOOST_AUTO_TEST_CASE(unique_fd_closes_what_it_owns_once) {
  int fds[2];
  BOOST_REQUIRE(::pipe(fds) == 0);
  int kept;
  {
    net::unique_fd a{fds[0]}, b{fds[1]};
    net::unique_fd moved{std::move(a)};
    BOOST_CHECK_EQUAL(a.get(), -1);
    BOOST_CHECK(!a);
    BOOST_CHECK_EQUAL(moved.get(), fds[0]);
    kept = b.release();
    BOOST_CHECK(!b);
  }
  BOOST_CHECK(::fcntl(fds[0], F_GETFD) == -1 && errno == EBADF);  // closed with `moved`
  BOOST_CHECK(::fcntl(kept, F_GETFD) != -1);                      // released: still open
  ::close(kept);
}

BOOST_AUTO_TEST_CASE(what_a_host_names) {
  for (auto h : {"localhost", "LocalHost", "127.0.0.1", "127.4.5.6", "::1"})
    BOOST_CHECK_MESSAGE(net::is_loopback_host(h), h);
  for (auto h : {"10.0.0.1", "128.0.0.1", "example.com", "::2", "[::1]", ""})
    BOOST_CHECK_MESSAGE(!net::is_loopback_host(h), h);
  BOOST_CHECK(net::is_ipv6_literal("::1"));
  BOOST_CHECK(net::is_ipv6_literal("fe80::1"));
  BOOST_CHECK(!net::is_ipv6_literal("127.0.0.1"));
  BOOST_CHECK(!net::is_ipv6_literal("[::1]"));
  BOOST_CHECK(!net::is_ipv6_literal("localhost"));
}
