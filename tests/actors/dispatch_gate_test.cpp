// The consistency modes' dispatch gates alone, without actors: how many new steps each
// lets out for a given view of the run, and which mode strings make which gate.

#include <boost/test/unit_test.hpp>

#include <actortrain/actors/coordinator/dispatch_gate.hpp>

#include <stdexcept>

namespace at = actortrain;

namespace {

at::gate_view view(uint64_t dispatched, uint64_t oldest_unapplied, uint64_t round_members = 0) {
  at::gate_view v;
  v.dispatched = dispatched;
  v.oldest_unapplied = oldest_unapplied;
  v.round_members = round_members;
  return v;
}

std::unique_ptr<at::dispatch_gate> gate_of(const std::string& mode, int replicas) {
  return at::make_gate(at::consistency_mode::parse(mode), replicas);
}

std::string error_of(const std::string& mode) {
  try {
    at::consistency_mode::parse(mode);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_CASE(async_always_lets_a_step_out_and_keeps_no_order) {
  auto g = at::dispatch_when_free();
  BOOST_TEST(g->may_dispatch(view(1000, 0)));
  BOOST_TEST(g->room(view(1000, 0)) == UINT64_MAX);
  BOOST_TEST(g->round_size() == 0u);
  BOOST_TEST(!g->ordered());
  BOOST_TEST(g->describe() == "async");
}

// Index d may go out while d - oldest_unapplied <= s: with the oldest unapplied at 10
// and bound 2, indices 10, 11 and 12 may be out, no more.
BOOST_AUTO_TEST_CASE(bounded_staleness_lets_out_up_to_s_past_the_oldest_unapplied) {
  auto g = at::bounded_staleness(2);
  BOOST_TEST(g->room(view(10, 10)) == 3u);  // nothing unapplied: 10, 11, 12
  BOOST_TEST(g->room(view(11, 10)) == 2u);
  BOOST_TEST(g->room(view(12, 10)) == 1u);
  BOOST_TEST(g->room(view(13, 10)) == 0u);
  BOOST_TEST(!g->may_dispatch(view(13, 10)));
  BOOST_TEST(g->room(view(500, 10)) == 0u);  // far past: no underflow
  BOOST_TEST(g->ordered());
  BOOST_TEST(g->round_size() == 0u);
  // s = 0: one step at a time, sequential SGD.
  auto seq = at::bounded_staleness(0);
  BOOST_TEST(seq->room(view(7, 7)) == 1u);
  BOOST_TEST(seq->room(view(8, 7)) == 0u);
  BOOST_TEST(seq->describe() == "bounded_staleness(0)");
}

BOOST_AUTO_TEST_CASE(sync_rounds_fill_a_round_of_replicas_steps) {
  auto g = at::sync_rounds(3);
  BOOST_TEST(g->round_size() == 3u);
  BOOST_TEST(g->room(view(0, 0, 0)) == 3u);
  BOOST_TEST(g->room(view(2, 0, 2)) == 1u);
  BOOST_TEST(!g->may_dispatch(view(3, 0, 3)));
  BOOST_TEST(g->room(view(3, 0, 3)) == 0u);
  BOOST_TEST(g->ordered());
  BOOST_CHECK_THROW(at::sync_rounds(0), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(modes_read_back_as_written) {
  using at::consistency_mode;
  for (std::string text : {"async", "sync", "bounded_staleness(0)", "bounded_staleness(7)", "bounded_staleness(999999999)"})
    BOOST_TEST(consistency_mode::parse(text).to_string() == text);
  BOOST_TEST((consistency_mode::parse("bounded_staleness(3)") == consistency_mode::bounded_staleness(3)));
  BOOST_TEST((consistency_mode::parse("bounded_staleness(3)") != consistency_mode::bounded_staleness(4)));
  BOOST_TEST(consistency_mode::parse("bounded_staleness(3)").bound() == 3u);
  BOOST_TEST(consistency_mode{}.is_async());
  BOOST_TEST(!consistency_mode::sync().is_async());
}

BOOST_AUTO_TEST_CASE(mode_strings_make_their_gates_and_bad_ones_are_named) {
  BOOST_TEST(gate_of("async", 4)->describe() == "async");
  BOOST_TEST(gate_of("sync", 4)->round_size() == 4u);
  BOOST_TEST(gate_of("bounded_staleness(5)", 4)->describe() == "bounded_staleness(5)");
  BOOST_TEST(gate_of("bounded_staleness(0)", 4)->room(view(1, 1)) == 1u);
  for (std::string bad : {"bounded_staleness(-1)", "bounded_staleness(x)", "bounded_staleness(1234567890)",
                          "bounded_staleness(1.5)"}) {
    auto e = error_of(bad);
    BOOST_TEST(e.find("'" + bad + "'") != std::string::npos, e);
    BOOST_TEST(e.find("whole number of steps") != std::string::npos, e);
  }
  for (std::string bad : {"", "Sync", "bounded_staleness()", "bounded_staleness(2", "ssp(2)"}) {
    auto e = error_of(bad);
    BOOST_TEST(e.find("unknown consistency '" + bad + "'") != std::string::npos, bad + " -> " + e);
    BOOST_TEST(e.find("async, bounded_staleness(s) or sync") != std::string::npos, e);
  }
}
