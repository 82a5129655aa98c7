// Asking a ps task for its shard over real loopback connections, two actor systems in one
// process: a task that dies before it answers is asked again once it is back at its
// address (CAF 0.17 never fails a request to a dead peer: before the fix, a worker that
// asked a ps task killed at start waited out its whole request timeout while the chief
// gave up on its registration, cluster_kill_ps_early_test in CI); the shard's own refusal
// ends the fetch at once; an address where nothing listens is named with its budget. A
// handshake cut once (the peer died while it answered) is dialed again, and a peer that
// cuts every handshake (TLS on its side only) is refused after a few, not at its budget.

#include <boost/test/unit_test.hpp>

#include "../../actors/src/net/dial.hpp"
#include <actortrain/actors/core/configure.hpp>
#include <actortrain/actors/core/errors.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>

#include <actortrain/actors/net/sockets.hpp>

#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <optional>

namespace at = actortrain;

namespace {

using namespace std::chrono_literals;

// An actor system with a middleman whose actors end with it, also when a check fails
// (the system's destructor waits for every actor).
struct net_system {
  caf::actor_system_config cfg;
  std::optional<caf::actor_system> sys;
  std::vector<caf::actor> owned;
  net_system() {
    at::configure(cfg, at::configure_options{true});
    sys.emplace(cfg);
  }
  template <class... Ts>
  caf::actor spawn(Ts&&... xs) {
    owned.push_back(sys->spawn(std::forward<Ts>(xs)...));
    return owned.back();
  }
  ~net_system() {
    for (auto& a : owned) caf::anon_send_exit(a, caf::exit_reason::kill);
    owned.clear();
  }
};

// A ps task's node: answers (ps_handle, index) with `answer`, or holds every request
// when it has none (a task still building its shards), telling `asked` of the first.
caf::behavior ps_node(caf::event_based_actor* self, std::optional<at::shard_contact> answer,
                      std::shared_ptr<std::promise<void>> asked, std::shared_ptr<std::atomic<int>> requests) {
  auto held = std::make_shared<std::vector<caf::response_promise>>();
  auto told = std::make_shared<bool>(asked == nullptr);
  return {
    [=](at::ps_handle_atom, uint32_t index) -> caf::result<at::shard_contact> {
      if (requests) ++*requests;
      if (!*told) {
        *told = true;
        asked->set_value();
      }
      if (index != 0) return at::make_error(at::error_code::invalid_request, "this task holds ps shard 0 only");
      if (answer) return *answer;
      held->push_back(self->make_response_promise());
      return caf::delegated<at::shard_contact>{};
    },
  };
}

uint16_t publish(caf::actor_system& sys, const caf::actor& a, uint16_t port) {
  auto p = sys.middleman().publish(a, port, "127.0.0.1", true);
  if (!p) BOOST_FAIL("publish: " << at::describe(p.error()));
  return *p;
}

at::task_address loopback(uint16_t port) {
  at::task_address a;
  a.host = "127.0.0.1";
  a.port = port;
  return a;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_ps_task_that_dies_before_it_answers_is_asked_again_at_its_address) {
  net_system asker;
  uint16_t port = 0;
  auto asked = std::make_shared<std::promise<void>>();
  auto was_asked = asked->get_future();
  auto first = std::make_unique<net_system>();
  auto holder = first->spawn(ps_node, std::nullopt, asked, nullptr);
  port = publish(*first->sys, holder, 0);
  // A request timeout far beyond the test's wait: only the monitor can end the first ask.
  auto fetched = std::async(std::launch::async, [&] {
    return at::fetch_shard(*asker.sys, loopback(port), 0, std::chrono::milliseconds(20000),
                           std::chrono::duration_cast<caf::timespan>(30s));
  });
  BOOST_REQUIRE(was_asked.wait_for(10s) == std::future_status::ready);
  holder = nullptr;
  first.reset();  // the task dies holding the request
  net_system second;
  auto shard = second.spawn([](caf::event_based_actor*) -> caf::behavior { return {[](int) {}}; });
  at::shard_contact c{caf::actor_cast<at::ps_shard_actor>(shard), 4242, "token", {}};
  auto back = second.spawn(ps_node, c, nullptr, nullptr);
  BOOST_REQUIRE_EQUAL(publish(*second.sys, back, port), port);
  BOOST_REQUIRE(fetched.wait_for(15s) == std::future_status::ready);
  auto r = fetched.get();
  if (!r) BOOST_FAIL("fetch failed: " << at::describe(r.error()));
  BOOST_TEST(r->contact.data_port == 4242);
  BOOST_TEST(r->contact.data_token == "token");
  BOOST_TEST((r->contact.shard.node() == second.sys->node()));
}

BOOST_AUTO_TEST_CASE(a_refusal_by_the_ps_task_ends_the_fetch_at_once) {
  net_system asker, ps;
  auto requests = std::make_shared<std::atomic<int>>(0);
  auto node = ps.spawn(ps_node, at::shard_contact{}, nullptr, requests);
  auto port = publish(*ps.sys, node, 0);
  auto r = at::fetch_shard(*asker.sys, loopback(port), 3, std::chrono::milliseconds(20000),
                           std::chrono::duration_cast<caf::timespan>(60s));
  BOOST_REQUIRE(!r);
  BOOST_TEST(at::describe(r.error()).find("this task holds ps shard 0 only") != std::string::npos, at::describe(r.error()));
  // Not retried until the budget: an application error fails fast.
  BOOST_TEST(requests->load() == 1);
}

BOOST_AUTO_TEST_CASE(an_address_where_nothing_listens_is_named_with_its_budget) {
  net_system asker, probe;
  // A port that was just free: publish, note it, close.
  uint16_t port = 0;
  {
    auto a = probe.spawn([](caf::event_based_actor*) -> caf::behavior { return {[](int) {}}; });
    port = publish(*probe.sys, a, 0);
    BOOST_REQUIRE(probe.sys->middleman().unpublish(a, port));
    caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  }
  auto r = at::fetch_shard(*asker.sys, loopback(port), 0, std::chrono::milliseconds(600),
                           std::chrono::duration_cast<caf::timespan>(5s));
  BOOST_REQUIRE(!r);
  auto text = at::describe(r.error());
  BOOST_TEST(text.find("cannot reach 127.0.0.1:" + std::to_string(port) + " within 600 ms") != std::string::npos, text);
}

// A raw listener that accepts `cuts` connections and closes each at once, as a peer that
// dies during the handshake does (or a TLS node, to a plain BASP hello).
namespace {
struct cutter {
  // SO_REUSEADDR, inherited by the connections it accepts and cuts: a process that
  // publishes at this port next (a restarted task) may bind it while a cut connection
  // still waits in FIN_WAIT_2 for the dialer's side to close (without it, 1 run in 8).
  at::net::unique_fd listener = at::net::listen_on("127.0.0.1", 0, at::net::listen_options{64, true});
  uint16_t port = at::net::local_port(listener.get());
  int accepted = 0;
  void cut(int cuts) {
    for (; cuts > 0; --cuts) {
      at::net::unique_fd c{::accept(listener.get(), nullptr, nullptr)};
      BOOST_REQUIRE(c);
      ++accepted;
    }
  }
};
}  // namespace

BOOST_AUTO_TEST_CASE(a_handshake_cut_once_is_dialed_again) {
  net_system asker, ps;
  cutter peer;
  auto fetched = std::async(std::launch::async, [&] {
    return at::fetch_shard(*asker.sys, loopback(peer.port), 0, std::chrono::milliseconds(20000),
                           std::chrono::duration_cast<caf::timespan>(10s));
  });
  peer.cut(1);
  auto port = peer.port;
  peer.listener.reset();  // the dying process's port closes; its new one publishes there
  at::shard_contact c{{}, 4242, "token", {}};
  auto node = ps.spawn(ps_node, c, nullptr, nullptr);
  BOOST_REQUIRE_EQUAL(publish(*ps.sys, node, port), port);
  BOOST_REQUIRE(fetched.wait_for(15s) == std::future_status::ready);
  auto r = fetched.get();
  if (!r) BOOST_FAIL("fetch failed after one cut handshake: " << at::describe(r.error()));
  BOOST_TEST(r->contact.data_port == 4242);
}

BOOST_AUTO_TEST_CASE(a_peer_that_cuts_every_handshake_is_refused_long_before_the_budget) {
  net_system asker;
  cutter peer;
  auto started = std::chrono::steady_clock::now();
  auto fetched = std::async(std::launch::async, [&] {
    return at::fetch_shard(*asker.sys, loopback(peer.port), 0, std::chrono::milliseconds(30000),
                           std::chrono::duration_cast<caf::timespan>(10s));
  });
  // Accepts until the dialer gives up; each accepted connection is cut at once.
  while (fetched.wait_for(0s) != std::future_status::ready) {
    pollfd p{peer.listener.get(), POLLIN, 0};
    if (::poll(&p, 1, 50) == 1) peer.cut(1);
    BOOST_REQUIRE(std::chrono::steady_clock::now() - started < 25s);
  }
  auto r = fetched.get();
  BOOST_REQUIRE(!r);
  auto text = at::describe(r.error());
  BOOST_TEST(text.find("the peer cut the BASP handshake") != std::string::npos, text);
  BOOST_TEST(peer.accepted == 3);
}

BOOST_AUTO_TEST_CASE(caf_error_names_come_with_words_a_person_understands) {
  // The name stays first (logs and scripts search for it); the words follow.
  BOOST_TEST(at::describe(caf::make_error(caf::exit_reason::remote_link_unreachable)) ==
             "remote_link_unreachable (the connection to its process was lost)");
  BOOST_TEST(at::describe(caf::make_error(caf::sec::request_receiver_down)) ==
             "request_receiver_down (the actor asked had ended)");
  BOOST_TEST(at::describe(caf::make_error(caf::sec::request_timeout)) == "request_timeout (no answer in time)");
  // Codes without words keep CAF's name alone.
  BOOST_TEST(at::describe(caf::make_error(caf::sec::invalid_argument)) == "invalid_argument");
}
