// One step's messages, from whom to whom, on CAF's test coordinator: the worker fetches
// the batch from the dataset shard, pulls from the ps shard, pushes its gradients there,
// and answers the task.

#include <actortrain/actors/data/dataset_shard.hpp>
#include <actortrain/actors/core/errors.hpp>
#include <actortrain/actors/ps/ps_shard.hpp>
#include <actortrain/actors/core/send_seam.hpp>
#include <actortrain/actors/worker/worker.hpp>
#include <actortrain/dataset/all.hpp>
#include <actortrain/model/layers/dense.hpp>
#include <actortrain/model/optim/sgd.hpp>

#include "partition_state.hpp"

// Last: CAF's test DSL defines macros (inject, expect) that clash with ordinary names.
#include "caf_test.hpp"

using namespace actortrain;
using model::matrix;

namespace {

struct flow_fixture : testing::fixture {
  model::model net = model::model::sequential(3, {model::layers::dense(1)});
  std::shared_ptr<const model::placement> pl =
    std::make_shared<model::placement>(model::place(net.variables(), nullptr, 1));
  ps_shard_actor ps = spawn_ps_shard(sys, *model::make_sgd({0.1}), ps_shard_options{});
  dataset_shard_actor shard;
  worker_actor worker;
  seam_ptr seam = std::make_shared<send_seam>(sys);

  flow_fixture() {
    matrix x = matrix::Ones(8, 3), y = matrix::Ones(8, 1);
    dataset_shard_options so;
    so.detached = false;
    so.prefetch = 0;
    shard = spawn_dataset_shard(
      sys, [x, y](const dataset::input_context&) { return dataset::from_tensor_slices({x}, y).batch(4); }, so);
    worker = spawn_worker(sys, options());
    initialize(ps);
  }

  // Gives `shard` the model's initial parameters (seed 1).
  void initialize(ps_shard_actor shard_actor) {
    init_request init;
    init.f.coordinator_epoch = 1;
    auto values = net.initial_parameters(1);
    for (auto& vp : pl->variables())
      init.partitions.push_back(
        testing::start_state(partition_key{vp.variable, 0}, vp.name, false, matrix(values[vp.variable])));
    auto rh = self->request(shard_actor, std::chrono::seconds(10), init_atom::value, init);
    sched.run();
    rh.receive([](caf::ok_atom) {}, [](caf::error& e) { BOOST_FAIL(describe(e)); });
  }

  // Every variable `shard_actor` holds, as an observer reads it.
  std::vector<matrix> values_of(ps_shard_actor shard_actor) {
    pull_request p;  // epoch 0: an observer's read
    for (auto& vp : pl->variables()) p.partitions.push_back(partition_key{vp.variable, 0});
    auto rh = self->request(shard_actor, std::chrono::seconds(10), pull_atom::value, p);
    sched.run();
    std::vector<matrix> out;
    rh.receive(
      [&](pull_reply& r) {
        for (auto& v : r.values) out.push_back(*v.value.value);
      },
      [](caf::error& e) { BOOST_FAIL(describe(e)); });
    return out;
  }

  worker_options options() {
    worker_options wo;
    wo.structure = net;
    wo.loss = model::mean_squared_error();
    wo.placement = pl;
    wo.ps = {ps};
    wo.seam = seam;
    wo.detached = false;
    return wo;
  }

  // Runs a two-step task on `w`; returns each step's staleness as the shard saw it.
  std::vector<uint64_t> staleness_of_two_steps(worker_actor w) {
    auto t = task_at(0);
    t.steps.push_back(step_id{1, 0, 1});
    auto rh = self->request(w, std::chrono::seconds(10), step_atom::value, t);
    sched.run();
    std::vector<uint64_t> out;
    rh.receive(
      [&](task_result& r) {
        for (auto& s : r.steps) out.push_back(s.max_staleness);
      },
      [&](caf::error& e) { BOOST_FAIL(describe(e)); });
    return out;
  }

  ~flow_fixture() {
    for (auto a : {caf::actor_cast<caf::actor>(ps), caf::actor_cast<caf::actor>(shard), caf::actor_cast<caf::actor>(worker)})
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  }

  step_task task_at(uint64_t position) {
    step_task t;
    t.f.coordinator_epoch = 1;
    t.f.worker = 0;
    t.f.worker_generation = 1;
    t.source = shard;
    t.steps.push_back(step_id{1, 0, position});
    return t;
  }
};

// Counts, where they are sent, the worker's pulls and the pushes that ask for values.
struct counting_policy : fault_policy {
  size_t pulls = 0, pushes = 0, pushes_that_pull = 0;
  delivery decide(const message_info& m) override {
    if (m.is_request && m.kind == pull_atom::value) ++pulls;
    if (m.is_request && m.kind == push_atom::value) {
      ++pushes;
      pushes_that_pull += m.pulls ? 1 : 0;
    }
    return delivery::deliver();
  }
};

// Stands in front of a ps shard and answers each push with the next step's values
// changed to a shape the worker did not ask for.
caf::behavior misshaping_shard(caf::event_based_actor* self, ps_shard_actor real) {
  return {
    [self, real](pull_atom a, const pull_request& r) { return self->delegate(real, a, r); },
    [self, real](push_atom a, push_request& r) {
      auto rp = self->make_response_promise<push_reply>();
      self->request(real, std::chrono::seconds(10), a, std::move(r))
        .then(
          [rp](push_reply& rep) mutable {
            for (auto& v : rep.pulled) v.value = tensor{matrix::Ones(9, 9)};
            rp.deliver(std::move(rep));
          },
          [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
      return rp;
    },
  };
}

// Stands in front of a dataset shard and notes the position of every batch asked for.
dataset_shard_actor::behavior_type noting_source(dataset_shard_actor::pointer self, dataset_shard_actor real,
                                                 std::shared_ptr<std::vector<uint64_t>> asked) {
  return {
    [self, real, asked](batch_atom a, const batch_request& r) -> caf::delegated<batch_reply> {
      asked->push_back(r.step.position);
      return self->delegate(real, a, r);
    },
    [](fill_atom) {},
  };
}

}  // namespace

BOOST_FIXTURE_TEST_SUITE(step_flow, flow_fixture)

BOOST_AUTO_TEST_CASE(one_step_goes_batch_pull_push_result) {
  self->send(worker, step_atom::value, task_at(1));
  expect((step_atom, step_task), from(self).to(worker));
  expect((batch_atom, batch_request), from(worker).to(shard).with(_, _));
  expect((batch_reply), from(shard).to(worker));
  expect((pull_atom, pull_request), from(worker).to(ps));
  expect((pull_reply), from(ps).to(worker));
  expect((push_atom, push_request), from(worker).to(ps));
  expect((push_reply), from(ps).to(worker));
  expect((task_result), from(worker).to(self));
  disallow((push_atom, push_request), from(worker).to(ps));
}

BOOST_AUTO_TEST_CASE(a_step_past_the_data_reports_end_of_data_and_pushes_nothing) {
  auto rh = self->request(worker, std::chrono::seconds(10), step_atom::value, task_at(2));  // 2 batches: 0, 1
  sched.run();
  bool end = false;
  rh.receive([&](task_result& r) { end = r.steps.size() == 1 && r.steps[0].end_of_data; },
             [&](caf::error& e) { BOOST_FAIL(describe(e)); });
  BOOST_TEST(end);
  auto s = self->request(ps, std::chrono::seconds(10), stats_atom::value);
  sched.run();
  s.receive([](ps_stats& st) { BOOST_TEST(st.applied == 0u); }, [](caf::error& e) { BOOST_FAIL(describe(e)); });
}

BOOST_AUTO_TEST_CASE(steps_per_execution_runs_consecutive_steps_in_one_task) {
  auto t = task_at(0);
  t.steps.push_back(step_id{1, 0, 1});
  auto rh = self->request(worker, std::chrono::seconds(10), step_atom::value, t);
  sched.run();
  size_t n = 0;
  rh.receive(
    [&](task_result& r) {
      n = r.steps.size();
      for (auto& s : r.steps) {
        BOOST_TEST(!s.end_of_data);
        BOOST_TEST(s.example_count == 4);
        BOOST_TEST(std::isfinite(s.loss));
      }
    },
    [&](caf::error& e) { BOOST_FAIL(describe(e)); });
  BOOST_TEST(n == 2u);
}

BOOST_AUTO_TEST_CASE(the_next_step_reads_the_update_of_the_one_before) {
  BOOST_TEST(staleness_of_two_steps(worker) == (std::vector<uint64_t>{0, 0}));
}

// pull_with_push (on by default): the second step of a task reads its parameters from the
// first step's push acknowledgement, so one pull serves a two-step task; it reads what a
// pull of its own reads (with one worker, bit for bit: the shard ends with the same
// values), with its predecessor's update (staleness 0).
BOOST_AUTO_TEST_CASE(the_next_step_of_a_task_reads_on_the_push_what_a_pull_would_read) {
  std::vector<std::vector<matrix>> ends;
  for (bool with_push : {true, false}) {
    auto counts = std::make_shared<counting_policy>();
    auto o = options();
    o.seam = std::make_shared<send_seam>(sys, counts);
    o.pull_with_push = with_push;
    auto fresh = spawn_ps_shard(sys, *model::make_sgd({0.1}), ps_shard_options{});
    initialize(fresh);
    o.ps = {fresh};
    auto w = spawn_worker(sys, o);
    BOOST_TEST(staleness_of_two_steps(w) == (std::vector<uint64_t>{0, 0}));
    BOOST_TEST(counts->pushes == 2u);
    BOOST_TEST(counts->pulls == (with_push ? 1u : 2u));
    BOOST_TEST(counts->pushes_that_pull == (with_push ? 1u : 0u));
    ends.push_back(values_of(fresh));
    for (auto a : {caf::actor_cast<caf::actor>(w), caf::actor_cast<caf::actor>(fresh)})
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  }
  BOOST_REQUIRE(ends[0].size() == ends[1].size());
  BOOST_REQUIRE(!ends[0].empty());
  for (size_t v = 0; v < ends[0].size(); ++v) BOOST_TEST((ends[0][v] == ends[1][v]));
  BOOST_TEST(!(ends[0][0] == net.initial_parameters(1)[0]));  // two steps moved them
}

// What a shard answers is checked before the worker computes on it: values of a shape
// it did not ask for fail the task with an error naming the shard (they were read as the
// partition before: out of bounds).
BOOST_AUTO_TEST_CASE(values_on_a_push_that_were_not_asked_for_fail_the_task_naming_the_shard) {
  auto front = caf::actor_cast<ps_shard_actor>(sys.spawn(misshaping_shard, ps));
  auto o = options();
  o.ps = {front};
  auto w = spawn_worker(sys, o);
  auto t = task_at(0);
  t.steps.push_back(step_id{1, 0, 1});
  auto rh = self->request(w, std::chrono::seconds(10), step_atom::value, t);
  sched.run();
  std::string text;
  rh.receive([](task_result&) { BOOST_FAIL("the task succeeded"); }, [&](caf::error& e) { text = describe(e); });
  BOOST_TEST(text.find("ps shard 0 answered") != std::string::npos, text);
  BOOST_TEST(text.find("[9 x 9]") != std::string::npos, text);
  for (auto a : {caf::actor_cast<caf::actor>(w), caf::actor_cast<caf::actor>(front)})
    caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(a_worker_that_pulls_ahead_reads_one_update_behind_and_the_shard_applies_both) {
  auto o = options();
  o.pull_ahead = true;
  auto ahead = spawn_worker(sys, o);
  // Step 1's parameters were asked for when step 0 started computing, before its push.
  BOOST_TEST(staleness_of_two_steps(ahead) == (std::vector<uint64_t>{0, 1}));
  auto s = self->request(ps, std::chrono::seconds(10), stats_atom::value);
  sched.run();
  s.receive([](ps_stats& st) { BOOST_TEST(st.applied == 2u); }, [](caf::error& e) { BOOST_FAIL(describe(e)); });
  caf::anon_send_exit(ahead, caf::exit_reason::user_shutdown);
}

// A task that arrives while the worker runs the last step of the one before has its
// first batch asked for then, and once (it was asked for again when that last step's
// batch came, so every task boundary fetched a batch twice).
BOOST_AUTO_TEST_CASE(a_task_that_arrives_during_the_last_step_has_its_batch_fetched_once) {
  auto asked = std::make_shared<std::vector<uint64_t>>();
  auto source = sys.spawn(noting_source, shard, asked);
  auto first = task_at(0), second = task_at(1);
  first.source = second.source = source;
  auto r1 = self->request(worker, std::chrono::seconds(10), step_atom::value, first);
  expect((step_atom, step_task), from(self).to(worker));
  auto r2 = self->request(worker, std::chrono::seconds(10), step_atom::value, second);
  expect((step_atom, step_task), from(self).to(worker));  // step 0's batch not there yet
  sched.run();
  size_t steps = 0;
  for (auto* rh : {&r1, &r2})
    rh->receive([&](task_result& r) { steps += r.steps.size(); }, [](caf::error& e) { BOOST_FAIL(describe(e)); });
  BOOST_TEST(steps == 2u);
  BOOST_TEST(*asked == (std::vector<uint64_t>{0, 1}));
  caf::anon_send_exit(source, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(a_task_for_another_worker_is_refused) {
  auto t = task_at(0);
  t.f.worker = 5;
  auto rh = self->request(worker, std::chrono::seconds(10), step_atom::value, t);
  sched.run();
  std::string text;
  rh.receive([](task_result&) {}, [&](caf::error& e) { text = describe(e); });
  BOOST_TEST(text.find("worker 5") != std::string::npos, text);
}

BOOST_AUTO_TEST_SUITE_END()

namespace {

// The dataset shard alone, asked by hand in the orders workers ask in, over a pipeline
// without random access (a filter), so a seek replays the epoch from its start. The
// filter counts the examples read (a replay runs it again): each once, however the
// requests come.
struct streamed_source {
  std::shared_ptr<int64_t> made = std::make_shared<int64_t>(0);
  dataset_shard_actor shard;
  streamed_source(caf::actor_system& sys, size_t prefetch) {
    matrix x(16, 1);
    for (int r = 0; r < 16; ++r) x(r, 0) = static_cast<float>(r);
    auto d = dataset::from_tensor_slices({x}, x)
               .filter([made = made](const dataset::element&) {
                 ++*made;
                 return true;
               })
               .batch(2);  // 8 batches: positions 0..7, the end at 8
    dataset_shard_options so;
    so.detached = false;
    so.prefetch = prefetch;
    shard = spawn_dataset_shard(sys, [d](const dataset::input_context&) { return d; }, so);
  }
};

// Asks `shard` for `position` of epoch 0; the batch's first example (-1: the end).
float ask(testing::fixture& fx, const dataset_shard_actor& shard, uint64_t position) {
  auto rh = fx.self->request(shard, std::chrono::seconds(10), batch_atom::value,
                             batch_request{fence{}, step_id{1, 0, position}, 0, 0});
  fx.sched.run();
  float first = -2;
  rh.receive([&](batch_reply& r) { first = r.end_of_data ? -1.0f : (*r.batch.features.at(0).value)(0, 0); },
             [](caf::error& e) { BOOST_FAIL(describe(e)); });
  return first;
}

}  // namespace

BOOST_FIXTURE_TEST_SUITE(step_flow_sources, testing::fixture)

// Position 2 asked for before 1 (two workers, or a worker pulling ahead): 1 is still
// prepared when its request comes, and the epoch is read once.
BOOST_AUTO_TEST_CASE(a_late_request_is_served_without_reading_the_epoch_again) {
  streamed_source src{sys, 2};
  for (uint64_t p : {0, 2, 1, 3, 5, 4, 6, 7}) BOOST_TEST(ask(*this, src.shard, p) == 2.0f * static_cast<float>(p));
  BOOST_TEST(ask(*this, src.shard, 8) == -1.0f);
  BOOST_TEST(*src.made == 16);
  caf::anon_send_exit(src.shard, caf::exit_reason::user_shutdown);
}

// The end found by a request that was not prepared: nothing past it is prepared (which
// would seek, replaying the epoch).
BOOST_AUTO_TEST_CASE(an_end_found_by_a_request_stops_the_read_ahead) {
  streamed_source src{sys, 1};
  for (uint64_t p = 0; p < 7; ++p) BOOST_TEST(ask(*this, src.shard, p) == 2.0f * static_cast<float>(p));
  BOOST_TEST(ask(*this, src.shard, 8) == -1.0f);  // 7 prepared, 8 not: the end, read directly
  BOOST_TEST(ask(*this, src.shard, 7) == 14.0f);  // late, still prepared
  BOOST_TEST(ask(*this, src.shard, 9) == -1.0f);  // past the known end: answered without a seek
  BOOST_TEST(*src.made == 16);
  caf::anon_send_exit(src.shard, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_SUITE_END()
