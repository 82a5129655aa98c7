// The simulator's cost model alone (CAF-free): every expected time below is worked out
// by hand from the parameters, not read from the model.
#include <actortrain/actors/sim/cost_model.hpp>

#include <boost/test/unit_test.hpp>

#include <stdexcept>

using namespace actortrain;
using role = cost_model::role;

namespace {

const cost_model::task worker0{role::worker, 0}, worker1{role::worker, 1}, ps0{role::ps, 0}, ps1{role::ps, 1},
  data0{role::dataset, 0}, chief{role::coordinator, 0};

// Round numbers: 1 ms per message end, 1 us per byte, 10 ms latency.
cost_params simple(int cores) {
  cost_params p;
  p.message_seconds = 1e-3;
  p.byte_seconds = 1e-6;
  p.latency_seconds = 10e-3;
  p.cores = cores;
  return p;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cost_model_times)

BOOST_AUTO_TEST_CASE(a_pull_is_sent_carried_handled_and_its_reply_comes_back) {
  cost_model m{simple(4)};
  message_cost pull;
  pull.request_bytes = 1000;  // 1 ms of bytes at each end
  pull.reply_bytes = 5000;    // 5 ms
  // Sent: 1 + 1 ms; carried: 10 ms; handled: 1 + 1 ms.
  BOOST_TEST(m.deliver(worker0, ps0, pull, 0.0) == 0.014, boost::test_tools::tolerance(1e-12));
  // The step waits for the reply: sent by the shard (1 + 5 ms), carried (10), received
  // (1 + 5): at 0.036. Then 20 ms of step, 1 + 2 ms to send its push of 2000 bytes,
  // 10 ms on the way, 1 + 2 ms to receive it and 4 ms to apply it.
  message_cost push;
  push.request_bytes = 2000;
  push.before_seconds = 0.020;
  push.work_seconds = 0.004;
  push.after_replies = true;
  BOOST_TEST(m.deliver(worker0, ps0, push, 0.014) == 0.036 + 0.020 + 0.003 + 0.010 + 0.007,
             boost::test_tools::tolerance(1e-12));
  // The shard's CPU: 2 ms for the pull, 6 ms replying, 7 ms for the push.
  BOOST_TEST(m.ps_busy().at(0) == 0.015, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(steps_share_the_cores_of_one_host) {
  message_cost step;
  step.before_seconds = 0.100;
  cost_params p;  // nothing but the steps costs anything
  p.cores = 1;
  cost_model one{p};
  // Two workers' steps at the same moment on one core share it. The first was timed
  // alone (0.100) and is not slowed after the fact; the second runs at half speed
  // beside it (50 ms of work by 0.100), then alone: 0.150.
  BOOST_TEST(one.deliver(worker0, ps0, step, 0.0) == 0.100, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(one.deliver(worker1, ps0, step, 0.0) == 0.150, boost::test_tools::tolerance(1e-12));
  // What the second took from the first (50 ms) worker 0 does before its next work: its
  // next 100 ms step from 0.100 is 150 ms of work, at half speed beside worker 1's until
  // 0.150 (25 ms), then alone: 0.275. The core has done 0.300 of work by then, less the
  // 25 ms worker 1 now owes: nothing is lost.
  BOOST_TEST(one.deliver(worker0, ps0, step, 0.100) == 0.275, boost::test_tools::tolerance(1e-12));
  p.cores = 2;
  cost_model two{p};
  BOOST_TEST(two.deliver(worker0, ps0, step, 0.0) == 0.100, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(two.deliver(worker1, ps0, step, 0.0) == 0.100, boost::test_tools::tolerance(1e-12));
  // A host each: one core is enough for both.
  p.cores = 1;
  p.one_host = false;
  cost_model apart{p};
  BOOST_TEST(apart.deliver(worker0, ps0, step, 0.0) == 0.100, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(apart.deliver(worker1, ps1, step, 0.0) == 0.100, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(a_long_step_shares_its_core_with_work_given_to_it_before) {
  cost_params p;
  p.cores = 1;
  p.latency_seconds = 0.050;
  cost_model m{p};
  message_cost apply;
  apply.work_seconds = 0.010;
  // A push reaches ps 0 at 0.050 and takes the core until 0.060.
  BOOST_TEST(m.deliver(worker0, ps0, apply, 0.0) == 0.060, boost::test_tools::tolerance(1e-12));
  // A 100 ms step from 0 on the same core: alone until 0.050 (50 ms done), at half speed
  // beside the apply until 0.060 (5 ms), alone again: it ends at 0.105, not 0.160 as it
  // would waiting for a gap of 100 ms; then 50 ms on the way.
  message_cost step;
  step.before_seconds = 0.100;
  BOOST_TEST(m.deliver(worker1, ps1, step, 0.0) == 0.155, boost::test_tools::tolerance(1e-12));
  // The 5 ms the step took from the apply, the shard does before its next work: a 10 ms
  // apply arriving at 0.150 (alone on the core) ends at 0.165.
  BOOST_TEST(m.deliver(worker0, ps0, apply, 0.100) == 0.165, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(an_actor_does_one_thing_at_a_time_in_its_handlers_order) {
  cost_params p;
  p.cores = 8;
  cost_model m{p};
  message_cost step;
  step.before_seconds = 0.050;
  // One handler: a step, then a second piece of work, in order although cores are free.
  BOOST_TEST(m.deliver(worker0, ps0, step, 0.0) == 0.050, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(m.deliver(worker0, ps1, step, 0.0) == 0.100, boost::test_tools::tolerance(1e-12));
  // Two pushes reaching one shard at once: its applies one after the other.
  cost_model shard{p};
  message_cost apply;
  apply.work_seconds = 0.030;
  BOOST_TEST(shard.deliver(worker0, ps0, apply, 0.0) == 0.030, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(shard.deliver(worker1, ps0, apply, 0.0) == 0.060, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(a_shard_handles_messages_in_the_order_they_arrive_not_the_order_they_were_sent) {
  cost_params p;
  p.cores = 8;
  p.latency_seconds = 0.001;
  cost_model m{p};
  message_cost late;  // sent first, leaves after a 50 ms step
  late.before_seconds = 0.050;
  late.work_seconds = 0.010;
  message_cost early;  // sent after it, leaves at once
  early.work_seconds = 0.010;
  BOOST_TEST(m.deliver(worker0, ps0, late, 0.0) == 0.061, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(m.deliver(worker1, ps0, early, 0.0) == 0.011, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(a_link_carries_its_bytes_one_message_after_the_other) {
  cost_params p;
  p.bandwidth = 1e6;  // 1 MB/s: 1000 bytes take 1 ms
  p.latency_seconds = 0.002;
  p.cores = 8;
  cost_model m{p};
  message_cost push;
  push.request_bytes = 10000;  // 10 ms on the wire
  BOOST_TEST(m.deliver(worker0, ps0, push, 0.0) == 0.012, boost::test_tools::tolerance(1e-12));
  // The same sender's next message waits for its outgoing link.
  BOOST_TEST(m.deliver(worker0, ps1, push, 0.0) == 0.022, boost::test_tools::tolerance(1e-12));
  // Another sender's into the first receiver waits for that one's incoming link.
  BOOST_TEST(m.deliver(worker1, ps0, push, 0.0) == 0.022, boost::test_tools::tolerance(1e-12));
  // A dataset replica lives in its worker's process, so it sends on that process's
  // link: busy until 0.020 with worker 0's two.
  BOOST_TEST(m.deliver(data0, chief, push, 0.0) == 0.032, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(streamed_bytes_overlap_their_cpu_at_both_ends_and_their_time_on_the_link) {
  cost_params p;
  p.bandwidth = 1e6;  // 1000 bytes take 1 ms
  p.latency_seconds = 0.002;
  p.byte_seconds = 0.5e-6;  // half the link's time at each end
  p.cores = 8;
  message_cost push;
  push.request_bytes = 10000;
  // Through shared memory (the calibration's way): written 0-5 ms, on the link 5-15,
  // arrived at 17, read 17-22.
  cost_model whole{p};
  BOOST_TEST(whole.deliver(worker0, ps0, push, 0.0) == 0.022, boost::test_tools::tolerance(1e-12));
  // Streamed: written 0 to 5 ms while they leave (0 to 10 ms); the first arrives at 2,
  // the last at 12; read from 2 to 7: handled at 12.
  p.streamed = true;
  cost_model m{p};
  BOOST_TEST(m.deliver(worker0, ps0, push, 0.0) == 0.012, boost::test_tools::tolerance(1e-12));
  // CPU slower than the link: writing takes 20 ms, so the last byte leaves at 20 and
  // arrives at 22; the reader keeps pace from 2: handled at 22.
  p.byte_seconds = 2e-6;
  cost_model slow{p};
  BOOST_TEST(slow.deliver(worker0, ps0, push, 0.0) == 0.022, boost::test_tools::tolerance(1e-12));
  // A reply streams likewise: the request's 1000 bytes are written 0-2 ms (on the link
  // 0-1), arrive 2 to 4, read 2-4; the reply's 4000 written 4-12 (on the link 4-8),
  // arrive 6 to 14, read 6-14.
  cost_model r{p};
  message_cost pull;
  pull.request_bytes = 1000;
  pull.reply_bytes = 4000;
  BOOST_TEST(r.deliver(worker1, ps1, pull, 0.0) == 0.004, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(r.reply_at() == 0.014, boost::test_tools::tolerance(1e-12));
  // No link limit is the limit of a fast link, never slower than a limited one: written
  // 0-20, arriving 2-22, read along: 22 again (the CPU is the bottleneck here).
  p.bandwidth = 0;
  cost_model unlimited{p};
  BOOST_TEST(unlimited.deliver(worker0, ps0, push, 0.0) == 0.022, boost::test_tools::tolerance(1e-12));
  p.byte_seconds = 0.5e-6;
  cost_model quick{p};
  BOOST_TEST(quick.deliver(worker0, ps0, push, 0.0) == 0.007, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(within_a_process_only_the_handling_costs) {
  cost_model m{simple(4)};
  message_cost batch;
  batch.reply_bytes = 400000;  // 0.4 s at 1 us per byte, were it between processes
  // A worker and its own dataset replica: no bytes charged, no latency; 1 ms to handle.
  BOOST_TEST(m.deliver(worker0, data0, batch, 0.0) == 0.001, boost::test_tools::tolerance(1e-12));
  // The coordinator is a process of its own: 1 ms out, 10 ms away, 1 ms in (64 bytes: 64 us each end).
  message_cost task;
  task.request_bytes = 64;
  BOOST_TEST(m.deliver(chief, worker0, task, 0.0) == 0.001064 + 0.010 + 0.001064, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(background_cpu_is_charged_per_message_and_per_byte_and_holds_nothing_up) {
  cost_params p;
  p.cores = 1;
  p.background_seconds = 0.002;
  p.background_byte_seconds = 1e-6;
  cost_model m{p};
  message_cost push;
  push.request_bytes = 10000;  // 10 ms of background CPU per byte at each end
  // Delivered at once: nothing waits for the background CPU, on the one core or not.
  BOOST_TEST(m.deliver(worker0, ps0, push, 0.0) == 0.0, boost::test_tools::tolerance(1e-12));
  // But the shard's process burnt it: 2 + 10 ms.
  BOOST_TEST(m.ps_busy().at(0) == 0.012, boost::test_tools::tolerance(1e-12));
  // And the one core did. Both ends' 12 ms share it: the first alone, the second at half
  // speed beside it, so they end at 0.012 and 0.018, and the 6 ms the second took from
  // the first run after, to 0.024. A 100 ms step given to the core next shares it too: a
  // third of it until 0.012 (4 ms), half until 0.024 (6 ms), then all: it ends at
  // 0.114, and the 10 ms it took from the background run after it.
  message_cost step;
  step.before_seconds = 0.100;
  BOOST_TEST(m.deliver(worker1, ps0, step, 0.0) == 0.114, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(parameters_read_from_json_and_refused_by_name) {
  auto p = cost_params::parse(
    R"({"step_seconds": 0.001, "background_byte_seconds": 2e-10, "cores": 4, "one_host": false, "streamed": true,
        "comment": "x"})",
    "m.json");
  BOOST_TEST(p.step_seconds == 0.001);
  BOOST_TEST(p.background_byte_seconds == 2e-10);
  BOOST_TEST(p.cores == 4);
  BOOST_TEST(!p.one_host);
  BOOST_TEST(p.streamed);
  auto back = cost_params::parse(p.to_json(), "again");
  BOOST_TEST(back.step_seconds == p.step_seconds);
  BOOST_TEST(back.background_byte_seconds == p.background_byte_seconds);
  BOOST_TEST(back.cores == 4);
  BOOST_TEST(back.streamed);
  auto refused = [](const std::string& text, const std::string& words) {
    try {
      (void)cost_params::parse(text, "m.json");
    } catch (const std::invalid_argument& e) {
      std::string what = e.what();
      BOOST_TEST(what.find(words) != std::string::npos, what);
      BOOST_TEST(what.find("m.json") != std::string::npos, what);
      return;
    }
    BOOST_ERROR("accepted: " + text);
  };
  refused(R"({"step_second": 1})", "unknown key 'step_second'");
  refused(R"({"byte_seconds": -1})", "byte_seconds");
  refused(R"({"latency_seconds": "1"})", "latency_seconds");
  refused(R"({"cores": 0})", "cores");
  refused(R"({"cores": 2.5})", "cores");
  refused(R"({"one_host": 1})", "one_host");
  refused(R"({"streamed": "yes"})", "streamed");
  refused(R"([1])", "not a JSON object");
  refused(R"({"step_seconds": )", "not JSON");
}

BOOST_AUTO_TEST_SUITE_END()
