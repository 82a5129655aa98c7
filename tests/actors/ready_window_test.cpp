// What a dataset shard keeps of the batches it prepared (data/ready_window.hpp), alone:
// positions prepared in order after the newest request, at most `ahead` waiting; a batch
// asked for late is still there; one `keep` positions behind the newest request, or of
// another epoch, is gone; nothing is prepared past the epoch's end.
#include <boost/test/unit_test.hpp>

#include "../../actors/src/data/ready_window.hpp"

#include <string>

using actortrain::ready_window;

namespace {

// Prepares what the window asks for (the batch is its position as text).
void fill(ready_window<std::string>& w, uint64_t epoch, uint64_t end = UINT64_MAX) {
  while (auto p = w.next()) w.put(epoch, *p, std::to_string(*p), *p >= end);
}

// What a take gave, "none" for nothing.
std::string got(const std::optional<std::string>& b) { return b ? *b : "none"; }
constexpr uint64_t none = UINT64_MAX;

}  // namespace

BOOST_AUTO_TEST_SUITE(ready_window_suite)

BOOST_AUTO_TEST_CASE(prepares_in_order_after_the_newest_request) {
  ready_window<std::string> w{2, 8};
  BOOST_TEST(!w.next());  // nothing before a request
  BOOST_TEST(!w.take(0, 0));
  BOOST_TEST(w.next().value_or(none) == 1u);
  fill(w, 0);
  BOOST_TEST(w.size() == 2u);  // 1 and 2
  BOOST_TEST(got(w.take(0, 1)) == "1");
  BOOST_TEST(w.next().value_or(none) == 3u);
  fill(w, 0);
  BOOST_TEST(w.size() == 2u);  // 2 and 3: two wait after the newest request
  BOOST_TEST(got(w.take(0, 2)) == "2");
  BOOST_TEST(got(w.take(0, 3)) == "3");
  BOOST_TEST(w.next().value_or(none) == 4u);
  BOOST_TEST(!w.take(0, 9));  // never prepared
}

BOOST_AUTO_TEST_CASE(a_late_request_finds_its_batch) {
  ready_window<std::string> w{3, 8};
  w.take(0, 0);
  fill(w, 0);  // 1, 2, 3
  // Position 3 is asked for before 1 and 2 (two workers, pulling ahead).
  BOOST_TEST(got(w.take(0, 3)) == "3");
  BOOST_TEST(got(w.take(0, 1)) == "1");
  BOOST_TEST(got(w.take(0, 2)) == "2");
  // The window went on after 3, not after 1.
  BOOST_TEST(w.next().value_or(none) == 4u);
}

BOOST_AUTO_TEST_CASE(drops_what_is_keep_behind_and_other_epochs) {
  ready_window<std::string> w{4, 2};
  w.take(0, 0);
  fill(w, 0);  // 1..4
  BOOST_TEST(got(w.take(0, 4)) == "4");  // 1 is now more than 2 behind; 2 and 3 are not
  BOOST_TEST(w.size() == 2u);
  BOOST_TEST(got(w.take(0, 2)) == "2");
  fill(w, 0);
  BOOST_TEST(w.size() == 5u);  // 3, 5..8
  BOOST_TEST(!w.take(1, 5));   // another epoch: everything of epoch 0 is gone
  BOOST_TEST(w.size() == 0u);
  BOOST_TEST(w.next().value_or(none) == 6u);
  w.put(0, 6, "stale", false);  // prepared for the old epoch: not kept
  BOOST_TEST(w.size() == 0u);
}

BOOST_AUTO_TEST_CASE(stops_at_the_end_of_the_epoch) {
  ready_window<std::string> w{4, 8};
  w.take(0, 5);
  fill(w, 0, 7);  // 6, 7 (7 is the end)
  BOOST_TEST(!w.past_end(0, 7));
  BOOST_TEST(w.past_end(0, 8));
  BOOST_TEST(!w.past_end(1, 8));
  BOOST_TEST(w.size() == 2u);
  BOOST_TEST(!w.next());
  BOOST_TEST(got(w.take(0, 7)) == "7");
  BOOST_TEST(!w.next());
  w.clear();  // starts afresh at the next request
  BOOST_TEST(!w.next());
  w.take(0, 2);
  BOOST_TEST(w.next().value_or(none) == 3u);
}

// A request served directly (not prepared) that found the end: nothing after it is
// prepared, so the pipeline is not sent to seek past its end.
BOOST_AUTO_TEST_CASE(stops_at_an_end_found_by_a_request) {
  ready_window<std::string> w{4, 8};
  BOOST_TEST(!w.take(0, 9));
  w.ends_at(0, 9);
  BOOST_TEST(!w.next());
  w.ends_at(1, 3);  // another epoch's: not this one's end
  BOOST_TEST(!w.next());
  BOOST_TEST(!w.take(1, 0));  // epoch 1 starts without an end
  BOOST_TEST(w.next().value_or(none) == 1u);
}

// A request further back than `keep` (a roll-back, or a worker far behind) is not
// prepared and leaves the window where it was.
BOOST_AUTO_TEST_CASE(a_request_far_behind_leaves_the_window) {
  ready_window<std::string> w{2, 3};
  for (uint64_t p = 0; p < 10; ++p) {
    w.take(0, p);
    fill(w, 0);
  }
  BOOST_TEST(w.size() == 2u);  // 10 and 11
  BOOST_TEST(got(w.take(0, 2)) == "none");
  BOOST_TEST(got(w.take(0, 10)) == "10");
  BOOST_TEST(w.next().value_or(none) == 12u);
}

BOOST_AUTO_TEST_CASE(prepares_nothing_without_ahead) {
  ready_window<std::string> w{0, 8};
  w.take(0, 0);
  BOOST_TEST(!w.next());
}

BOOST_AUTO_TEST_SUITE_END()
