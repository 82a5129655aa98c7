// The ps shard's decisions without an actor (actors/src/ps/shard_store.hpp): exactly-once
// application per step id under the watermark and across runs, validation of a push as
// a whole with errors naming variable and shapes, fences, versions and staleness,
// copy-on-write pulls, the ledger, synchronous rounds, the idempotency of the
// coordinator's retried control requests (init, keep, restore, shared snapshots), and
// the partition state an init takes: a snapshot's whole, with the kept state it carries.

#include <boost/test/unit_test.hpp>

#include <actortrain/model/checkpoint/checkpoint.hpp>
#include <actortrain/model/checkpoint/memory_file_system.hpp>
#include <actortrain/model/optim/sgd.hpp>
#include <actortrain/model/partitioner.hpp>

#include "../../actors/src/ps/shard_store.hpp"
#include "partition_state.hpp"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>

using namespace actortrain;
using model::matrix;

namespace {

init_request two_partitions(uint64_t coordinator_epoch = 1, uint64_t recovery_epoch = 0) {
  init_request req;
  req.f.coordinator_epoch = coordinator_epoch;
  req.f.recovery_epoch = recovery_epoch;
  req.partitions.push_back(testing::start_state(partition_key{0, 0}, "dense/kernel", false, matrix::Zero(2, 3)));
  req.partitions.push_back(testing::start_state(partition_key{1, 0}, "emb/embeddings", true, matrix::Zero(5, 2)));
  return req;
}

struct store_fixture {
  shard_store store;
  failure last;

  explicit store_fixture(std::shared_ptr<apply_policy> policy = nullptr)
      : store(*model::make_sgd({1.0}), shard_store::options{0, std::move(policy), 16, false, {}, {}}) {
    auto req = two_partitions();
    BOOST_REQUIRE(init(req));
  }

  // Each request: the reply, or nothing with the failure in `last`.
  template <class T, class F>
  std::optional<T> call(F&& f) {
    T out{};
    last = f(out);
    if (last) return std::nullopt;
    return out;
  }
  std::optional<push_reply> push(push_request r) {
    return call<push_reply>([&](push_reply& o) { return store.push(r, o); });
  }
  std::optional<pull_reply> pull(const pull_request& r) {
    return call<pull_reply>([&](pull_reply& o) { return store.pull(r, o); });
  }
  std::optional<rows_reply> pull_rows(pull_rows_request r) {
    return call<rows_reply>([&](rows_reply& o) { return store.pull_rows(r, o); });
  }
  std::optional<round_reply> round(const round_request& r) {
    return call<round_reply>([&](round_reply& o) { return store.round(r, o); });
  }
  std::optional<fence> raise(const fence_request& r) {
    return call<fence>([&](fence& o) { return store.raise_fence(r, o); });
  }
  bool init(init_request r) { return !(last = store.init(r)); }
  bool hyper(const hyperparams_request& r) { return !(last = store.set_hyperparams(r)); }
  bool keep(const fence_request& r) { return !(last = store.keep(r)); }
  bool restore(const fence_request& r) { return !(last = store.restore(r)); }
  std::optional<ps_ledgers> ledgers() { return store.ledgers(); }
  ps_stats stats() { return store.stats(); }
  // As describe() renders an error of ours: "<code>: <message>".
  std::string text() const { return to_string(last.code) + ": " + last.what; }

  static fence epochs(uint64_t c, uint64_t worker = fence::no_worker, uint64_t gen = 0) {
    fence f;
    f.coordinator_epoch = c;
    f.worker = static_cast<uint32_t>(worker);
    f.worker_generation = gen;
    return f;
  }

  push_request push_of(uint64_t position, matrix g, uint64_t read_version = 0, fence f = epochs(1)) {
    push_request r;
    r.f = f;
    r.step = step_id{1, 0, position};
    r.example_count = 4;
    r.dense.push_back(dense_slice{partition_key{0, 0}, read_version, tensor{std::move(g)}});
    r.digests = {1000 + position};
    return r;
  }

  matrix read(partition_key k) {
    pull_request p;
    p.f = epochs(0);  // an observer's read: passes any fence
    p.partitions.push_back(k);
    auto r = pull(p);
    BOOST_REQUIRE(r);
    return *r->values.at(0).value.value;
  }
  matrix kernel() { return read(partition_key{0, 0}); }
  matrix embeddings() { return read(partition_key{1, 0}); }
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(shard_store_requests, store_fixture)

BOOST_AUTO_TEST_CASE(a_push_is_applied_once_and_a_repeated_step_id_is_acknowledged_as_duplicate) {
  auto first = push(push_of(7, matrix::Ones(2, 3)));
  BOOST_REQUIRE(first);
  BOOST_TEST(to_string(first->status) == "applied");
  BOOST_TEST(kernel().isApproxToConstant(-1.0f));  // SGD lr 1: w -= g
  auto again = push(push_of(7, matrix::Ones(2, 3)));
  BOOST_REQUIRE(again);
  BOOST_TEST(to_string(again->status) == "duplicate");
  BOOST_TEST(kernel().isApproxToConstant(-1.0f));  // not applied twice
  auto s = stats();
  BOOST_TEST(s.applied == 1u);
  BOOST_TEST(s.duplicates == 1u);
}

// pull_with_push: the partitions a push names in then_pull are answered with its
// acknowledgement, read after the push as a training pull then reads them: with the
// push's update, at the version after it; a duplicate is answered too (the re-sent push
// of a step whose first acknowledgement was lost), and a push that fails answers nothing.
BOOST_AUTO_TEST_CASE(a_push_answers_the_partitions_it_names_as_read_after_its_update) {
  auto req = push_of(3, matrix::Ones(2, 3));
  req.then_pull = {partition_key{0, 0}};
  auto r = push(req);
  BOOST_REQUIRE(r);
  BOOST_REQUIRE(r->pulled.size() == 1u);
  const auto& v = r->pulled[0];
  BOOST_TEST((v.key == partition_key{0, 0}));
  BOOST_TEST(v.version == 1u);
  BOOST_TEST(v.value.value->isApproxToConstant(-1.0f));  // SGD lr 1: w -= g, already applied
  BOOST_TEST(v.value.reducible);                          // a training read
  auto plain = pull(pull_request{epochs(1), {partition_key{0, 0}}, true});
  BOOST_REQUIRE(plain);
  BOOST_TEST((*plain->values.at(0).value.value == *v.value.value));  // what a pull sent after it reads
  auto again = push(req);
  BOOST_REQUIRE(again);
  BOOST_TEST(to_string(again->status) == "duplicate");
  BOOST_REQUIRE(again->pulled.size() == 1u);
  BOOST_TEST(again->pulled[0].version == 1u);
  BOOST_TEST(push(push_of(4, matrix::Ones(2, 3)))->pulled.empty());  // none named, none answered
  auto bad = push_of(5, matrix::Ones(3, 3));
  bad.then_pull = {partition_key{0, 0}};
  BOOST_TEST(!push(bad));
  auto missing = push_of(6, matrix::Ones(2, 3));
  missing.then_pull = {partition_key{7, 0}};
  BOOST_TEST(!push(missing));
  BOOST_TEST(text().find("no partition 7:0") != std::string::npos, text());
  BOOST_TEST(stats().applied == 2u);  // steps 3 and 4: the failed pushes changed nothing
  BOOST_TEST(kernel().isApproxToConstant(-2.0f));
}

BOOST_AUTO_TEST_CASE(a_wrong_shape_is_rejected_naming_variable_and_shapes_and_nothing_changes) {
  auto r = push(push_of(1, matrix::Ones(3, 3)));
  BOOST_TEST(!r);
  auto msg = text();
  BOOST_TEST(msg.find("invalid_gradient") != std::string::npos, msg);
  BOOST_TEST(msg.find("dense/kernel") != std::string::npos, msg);
  BOOST_TEST(msg.find("[3 x 3]") != std::string::npos, msg);
  BOOST_TEST(msg.find("[2 x 3]") != std::string::npos, msg);
  BOOST_TEST(kernel().isZero());
  BOOST_TEST(stats().rejected == 1u);
}

BOOST_AUTO_TEST_CASE(a_gradient_that_is_not_finite_is_rejected_whole) {
  matrix g = matrix::Ones(2, 3);
  g(1, 2) = std::numeric_limits<float>::quiet_NaN();
  auto req = push_of(1, g);
  sparse_slice rows;  // a good sparse part in the same push must not be applied either
  rows.variable = 1;
  rows.ids = {2};
  rows.rows = tensor{matrix::Ones(1, 2)};
  req.sparse.push_back(rows);
  BOOST_TEST(!static_cast<bool>(push(req)));
  BOOST_TEST(text().find("not finite") != std::string::npos, text());
  BOOST_TEST(kernel().isZero());
  BOOST_TEST(stats().applied == 0u);
}

// What may travel rounded (tensor::reducible, "wire_floats": "bf16"): the values and rows
// a training step pulls, never what an observer or an evaluation reads.
BOOST_AUTO_TEST_CASE(only_training_pulls_may_travel_rounded) {
  for (bool training : {true, false}) {
    pull_request p;
    p.f = epochs(1);
    p.training = training;
    p.partitions.push_back(partition_key{0, 0});
    auto r = pull(p);
    BOOST_REQUIRE(r);
    BOOST_TEST(r->values.at(0).value.reducible == training);
    pull_rows_request pr;
    pr.f = epochs(1);
    pr.variable = 1;
    pr.ids = {0, 4};
    pr.training = training;
    auto rows = pull_rows(pr);
    BOOST_REQUIRE(rows);
    BOOST_TEST(rows->rows.reducible == training);
  }
  BOOST_TEST(!pull(pull_request{epochs(0), {partition_key{0, 0}}, false})->values.at(0).value.reducible);
}

BOOST_AUTO_TEST_CASE(sparse_rows_update_only_the_touched_rows) {
  push_request req;
  req.f = epochs(1);
  req.step = step_id{1, 0, 3};
  req.example_count = 2;
  req.digests = {7};
  sparse_slice s;
  s.variable = 1;
  s.ids = {1, 4};
  s.rows = tensor{matrix::Ones(2, 2)};
  req.sparse.push_back(s);
  BOOST_REQUIRE(push(req));
  pull_rows_request pr;
  pr.f = epochs(1);
  pr.variable = 1;
  pr.ids = {0, 1, 4};
  auto rows = pull_rows(pr);
  BOOST_REQUIRE(rows);
  const matrix& m = *rows->rows.value;
  BOOST_TEST(m.row(0).isZero());
  BOOST_TEST(m.row(1).isApproxToConstant(-1.0f));
  BOOST_TEST(m.row(2).isApproxToConstant(-1.0f));
}

BOOST_AUTO_TEST_CASE(a_message_with_an_older_fence_is_rejected) {
  BOOST_REQUIRE(push(push_of(1, matrix::Ones(2, 3), 0, epochs(3))));
  BOOST_TEST(!static_cast<bool>(push(push_of(2, matrix::Ones(2, 3), 0, epochs(2)))));
  BOOST_TEST(text().find("fenced_out") != std::string::npos, text());
  BOOST_TEST(stats().fenced == 1u);
  BOOST_TEST(kernel().isApproxToConstant(-1.0f));
}

BOOST_AUTO_TEST_CASE(a_fenced_worker_generation_cannot_push) {
  fence_request fr;
  fr.f = epochs(1, 0, 2);
  auto ack = raise(fr);
  BOOST_REQUIRE(ack);
  BOOST_TEST(ack->worker_generation == 2u);
  BOOST_TEST(!static_cast<bool>(push(push_of(1, matrix::Ones(2, 3), 0, epochs(1, 0, 1)))));
  BOOST_TEST(static_cast<bool>(push(push_of(1, matrix::Ones(2, 3), 0, epochs(1, 0, 2)))));
  BOOST_TEST(static_cast<bool>(push(push_of(2, matrix::Ones(2, 3), 0, epochs(1, 1, 1)))));
}

BOOST_AUTO_TEST_CASE(versions_count_updates_and_staleness_is_recorded) {
  BOOST_REQUIRE(push(push_of(1, matrix::Ones(2, 3), 0)));
  auto late = push(push_of(2, matrix::Ones(2, 3), 0));  // read v0, applied at v1
  BOOST_REQUIRE(late);
  BOOST_TEST(late->max_staleness == 1u);
  auto s = stats();
  BOOST_TEST(s.staleness_histogram.at(0) == 1u);
  BOOST_TEST(s.staleness_histogram.at(1) == 1u);
  bool found = false;
  for (auto& v : s.versions)
    if (v.key == partition_key{0, 0}) {
      found = true;
      BOOST_TEST(v.version == 2u);
    }
  BOOST_TEST(found);
}

BOOST_AUTO_TEST_CASE(a_reader_keeps_the_version_it_pulled_while_the_shard_moves_on) {
  pull_request p;
  p.f = epochs(1);
  p.partitions.push_back(partition_key{0, 0});
  auto held = pull(p);  // holds version 0
  BOOST_REQUIRE(held);
  BOOST_REQUIRE(push(push_of(1, matrix::Ones(2, 3))));
  BOOST_TEST(held->values[0].value.value->isZero());  // copy-on-write: unchanged
  BOOST_TEST(kernel().isApproxToConstant(-1.0f));
}

BOOST_AUTO_TEST_CASE(copy_on_write_reuses_the_buffer_of_a_version_nobody_reads_any_more) {
  pull_request p;
  p.f = epochs(1);
  p.partitions.push_back(partition_key{0, 0});
  auto first = pull(p);  // version 0
  BOOST_REQUIRE(first);
  const matrix* old_buffer = first->values[0].value.value.get();
  BOOST_REQUIRE(push(push_of(1, matrix::Ones(2, 3))));  // copied: version 0 is read
  auto second = pull(p);  // version 1
  BOOST_REQUIRE(second);
  BOOST_TEST(second->values[0].value.value.get() != old_buffer);
  first.reset();  // nobody reads version 0 now
  BOOST_REQUIRE(push(push_of(2, matrix::Ones(2, 3))));  // version 1 is read
  auto third = pull(p);
  BOOST_REQUIRE(third);
  BOOST_TEST(third->values[0].value.value.get() == old_buffer);  // version 2 went into version 0's buffer
  BOOST_TEST(third->values[0].version == 2u);
  BOOST_TEST(second->values[0].value.value->isApproxToConstant(-1.0f));  // the reader's version, unchanged
  BOOST_TEST(kernel().isApproxToConstant(-2.0f));
}

BOOST_AUTO_TEST_CASE(the_watermark_bounds_what_a_shard_remembers_and_what_is_below_it_is_a_duplicate) {
  auto push_at = [&](uint64_t run, uint64_t position, uint64_t watermark) {
    auto r = push_of(position, matrix::Ones(2, 3));
    r.step.run = run;
    r.watermark = {watermark};
    auto rep = push(r);
    BOOST_REQUIRE(rep);
    return to_string(rep->status);
  };
  for (uint64_t k = 0; k < 5; ++k) BOOST_TEST(push_at(1, k, 0) == "applied");
  BOOST_TEST(stats().remembered == 5u);
  BOOST_TEST(push_at(1, 5, 3) == "applied");
  BOOST_TEST(stats().remembered == 3u);  // 3, 4, 5: below 3 everything is known applied
  BOOST_TEST(push_at(1, 1, 3) == "duplicate");  // forgotten, but below the watermark
  BOOST_TEST(push_at(1, 4, 3) == "duplicate");  // remembered
  BOOST_TEST(push_at(1, 6, 2) == "applied");    // an older watermark lowers nothing
  BOOST_TEST(stats().remembered == 4u);
  BOOST_TEST(push_at(2, 0, 0) == "applied");  // a new run starts afresh
  BOOST_TEST(stats().remembered == 1u);
  BOOST_TEST(push_at(1, 7, 0) == "duplicate");  // a run that is over applies nothing
  BOOST_TEST(stats().applied == 8u);
  BOOST_TEST(kernel().isApproxToConstant(-8.0f));
}

BOOST_AUTO_TEST_CASE(hyperparameters_change_the_next_update_and_bad_ones_change_nothing) {
  hyperparams_request h;
  h.f = epochs(1);
  h.values = {{"learning_rate", 0.5}};
  BOOST_REQUIRE(hyper(h));
  BOOST_REQUIRE(push(push_of(1, matrix::Ones(2, 3))));
  BOOST_TEST(kernel().isApproxToConstant(-0.5f));
  h.values = {{"learning_rate", 0.1}, {"no_such_thing", 1.0}};
  BOOST_TEST(!hyper(h));
  BOOST_REQUIRE(push(push_of(2, matrix::Ones(2, 3))));
  BOOST_TEST(kernel().isApproxToConstant(-1.0f));  // still 0.5
}

BOOST_AUTO_TEST_CASE(each_partition_records_the_steps_it_applies_with_their_batch_digests) {
  BOOST_REQUIRE(push(push_of(7, matrix::Ones(2, 3))));
  BOOST_REQUIRE(push(push_of(8, matrix::Ones(2, 3))));
  BOOST_REQUIRE(push(push_of(7, matrix::Ones(2, 3))));  // a duplicate: not applied
  auto l = ledgers();
  BOOST_REQUIRE(l);
  BOOST_REQUIRE(l->partitions.size() == 2u);
  auto& kernel_ledger = l->partitions[0];
  BOOST_TEST(kernel_ledger.variable == "dense/kernel");
  BOOST_TEST(kernel_ledger.row_end == 2);
  BOOST_REQUIRE(kernel_ledger.ledger.segments.size() == 1u);
  auto& seg = kernel_ledger.ledger.segments[0];
  BOOST_TEST((seg.run == 1u && seg.pipeline == 0u && seg.begin == 7u && seg.end == 9u));
  BOOST_TEST(seg.checksum == ledger_mix(7, 1007) + ledger_mix(8, 1008));
  BOOST_TEST(kernel_ledger.ledger.violations.empty());
  // The embedding partition got no slice of these steps, so it holds none of them.
  BOOST_TEST(l->partitions[1].ledger.segments.empty());
}

BOOST_AUTO_TEST_CASE(a_step_the_restored_state_holds_is_recorded_as_applied_twice) {
  // A restore whose ledger holds step 7 but whose de-duplication state forgot it (no
  // watermark): the shard applies 7 again, and its ledger says so, for good.
  step_ledger saved;
  saved.record(1, 0, 7, 1007);
  init_request req;
  req.f.coordinator_epoch = 1;
  req.f.recovery_epoch = 1;
  auto kernel = testing::start_state(partition_key{0, 0}, "dense/kernel", false, matrix::Zero(2, 3));
  kernel.ledger = saved.data();
  req.partitions.push_back(std::move(kernel));
  BOOST_REQUIRE(init(req));
  auto f = epochs(1);
  f.recovery_epoch = 1;
  BOOST_TEST(to_string(push(push_of(7, matrix::Ones(2, 3), 0, f))->status) == "applied");
  auto violations = [&] { return ledgers()->partitions.at(0).ledger.violations; };
  BOOST_REQUIRE(violations().size() == 1u);
  BOOST_TEST(violations()[0].position == 7u);
  // Another restore does not wash it out.
  req.f.recovery_epoch = 2;
  BOOST_REQUIRE(init(req));
  BOOST_TEST(violations().size() == 1u);
}

BOOST_AUTO_TEST_CASE(a_push_must_carry_one_digest_per_step) {
  auto p = push_of(3, matrix::Ones(2, 3));
  p.more_steps.push_back(step_id{1, 0, 4});
  BOOST_TEST(!push(p));
  BOOST_TEST(text().find("1 batch digest(s) for 2 step(s)") != std::string::npos, text());
  p.digests.push_back(1004);
  BOOST_REQUIRE(push(p));
  auto seg = ledgers()->partitions.at(0).ledger.segments.at(0);
  BOOST_TEST((seg.begin == 3u && seg.end == 5u));
  BOOST_TEST(seg.checksum == ledger_mix(3, 1003) + ledger_mix(4, 1004));
}

BOOST_AUTO_TEST_CASE(a_store_without_partitions_says_so_and_changes_nothing) {
  shard_store fresh(*model::make_sgd({1.0}), shard_store::options{3, nullptr, 16, false, {}, {}});
  pull_reply r;
  auto f = fresh.pull(pull_request{}, r);
  BOOST_TEST(to_string(f.code) == "not_initialized");
  BOOST_TEST(f.what.find("ps shard 3") != std::string::npos, f.what);
  push_reply pr;
  auto p = push_of(1, matrix::Ones(2, 3));
  BOOST_TEST(to_string(fresh.push(p, pr).code) == "not_initialized");
  BOOST_TEST(fresh.stats().duplicates == 0u);
}

BOOST_AUTO_TEST_CASE(an_init_retried_under_the_same_epochs_does_not_roll_back_what_was_applied) {
  BOOST_REQUIRE(push(push_of(1, matrix::Ones(2, 3))));
  auto retry = two_partitions();  // the same epochs as the fixture's init: a late original or a retry
  BOOST_REQUIRE(init(retry));
  BOOST_TEST(kernel().isApproxToConstant(-1.0f));
  BOOST_TEST(stats().applied == 1u);
  // Under new epochs it is a restore: values, counters and de-duplication start over.
  auto restore_req = two_partitions(1, 1);
  restore_req.base = 40;
  BOOST_REQUIRE(init(restore_req));
  BOOST_TEST(kernel().isZero());
  auto s = stats();
  BOOST_TEST((s.applied == 0u && s.base == 40u));
  BOOST_TEST(s.seen.recovery_epoch == 1u);
}

BOOST_AUTO_TEST_CASE(a_restore_counts_the_steps_it_takes_back_and_a_new_run_takes_back_none) {
  for (uint64_t pos : {1, 2, 3}) BOOST_REQUIRE(push(push_of(pos, matrix::Ones(2, 3))));
  // Rolled back to a checkpoint holding 1 step: the 2 applied after it are undone (a
  // zombie's applies end here).
  auto back = two_partitions(1, 1);
  back.run = 1;  // the run of the pushes (push_of)
  back.base = 1;
  BOOST_REQUIRE(init(back));
  BOOST_TEST(stats().undone == 2u);
  BOOST_REQUIRE(push(push_of(2, matrix::Ones(2, 3), 0, [] { auto f = epochs(1); f.recovery_epoch = 1; return f; }())));
  // Back to the same checkpoint again: the step redone since is undone too.
  auto again = two_partitions(1, 2);
  again.run = back.run;
  again.base = 1;
  BOOST_REQUIRE(init(again));
  BOOST_TEST(stats().undone == 3u);
  // A new run's start replaces the old run's state without undoing it.
  auto next = two_partitions(1, 3);
  next.run = back.run + 1;
  BOOST_REQUIRE(init(next));
  BOOST_TEST(stats().undone == 3u);
}

BOOST_AUTO_TEST_CASE(a_restore_keeps_the_worker_fences_and_the_highest_epochs_seen) {
  fence_request fr;
  fr.f = epochs(1, 2, 5);
  BOOST_REQUIRE(raise(fr));
  auto restore_req = two_partitions(1, 1);
  restore_req.min_generations = {{2, 3}, {4, 1}};  // older for worker 2 than what the store knows
  BOOST_REQUIRE(init(restore_req));
  auto s = stats();
  BOOST_REQUIRE(s.min_generations.size() == 2u);
  BOOST_TEST((s.min_generations[0] == std::pair<uint32_t, uint64_t>{2, 5}));
  BOOST_TEST((s.min_generations[1] == std::pair<uint32_t, uint64_t>{4, 1}));
  auto f = epochs(1, 2, 4);
  f.recovery_epoch = 1;
  BOOST_TEST(!push(push_of(1, matrix::Ones(2, 3), 0, f)));
  BOOST_TEST(text().find("worker 2 generation 4 is fenced (now 5)") != std::string::npos, text());
  // An init of older epochs than the restore's is refused.
  BOOST_TEST(!init(two_partitions(1, 0)));
  BOOST_TEST(to_string(last.code) == "fenced_out");
}

BOOST_AUTO_TEST_CASE(a_push_of_several_steps_is_a_duplicate_if_any_of_them_was_applied) {
  BOOST_REQUIRE(push(push_of(4, matrix::Ones(2, 3))));
  auto group = push_of(3, matrix::Ones(2, 3));  // push_every 2: steps 3 and 4, re-run whole
  group.more_steps = {step_id{1, 0, 4}};
  group.digests = {1003, 1004};
  BOOST_TEST(to_string(push(group)->status) == "duplicate");
  BOOST_TEST(kernel().isApproxToConstant(-1.0f));
}

BOOST_AUTO_TEST_CASE(keep_and_restore_are_carried_out_once_per_epochs_and_id) {
  fence_request k;
  k.f = epochs(1);
  k.id = 1;
  BOOST_REQUIRE(keep(k));  // keeps the zero state
  BOOST_REQUIRE(push(push_of(1, matrix::Ones(2, 3))));
  BOOST_REQUIRE(keep(k));  // a retry of keep 1: must not keep the newer state
  fence_request r;
  r.f = epochs(1);
  r.id = 2;
  BOOST_REQUIRE(restore(r));
  BOOST_TEST(kernel().isZero());
  BOOST_REQUIRE(push(push_of(2, matrix::Ones(2, 3))));
  BOOST_REQUIRE(restore(r));  // the retry changes nothing
  BOOST_TEST(kernel().isApproxToConstant(-1.0f));
  r.id = 3;
  BOOST_REQUIRE(restore(r));  // a newer one is carried out
  BOOST_TEST(kernel().isZero());
}

BOOST_AUTO_TEST_CASE(a_restore_without_a_kept_state_is_refused) {
  fence_request r;
  r.f = epochs(1);
  r.id = 1;
  BOOST_TEST(!restore(r));
  BOOST_TEST(text().find("holds no kept state") != std::string::npos, text());
}

BOOST_AUTO_TEST_CASE(a_shared_snapshot_is_rewritten_only_while_the_state_is_unchanged) {
  model::memory_file_system fs;
  auto dir = model::begin_checkpoint(fs, "/ckpt", 1);
  fence_request req;
  req.f = epochs(1);
  req.id = 7;
  ps_files out;
  BOOST_TEST(!store.snapshot_files(req, checkpoint_target{dir}, snapshot_basis{1, -1, false}, fs, out));
  BOOST_REQUIRE(out.partitions.size() == 2u);
  BOOST_TEST(out.partitions[0].header.name == "dense/kernel");
  ps_files again;
  BOOST_TEST(!store.snapshot_files(req, checkpoint_target{dir}, snapshot_basis{1, -1, false}, fs, again));  // a retry: same state
  BOOST_REQUIRE(push(push_of(1, matrix::Ones(2, 3))));
  ps_files late;
  auto f = store.snapshot_files(req, checkpoint_target{dir}, snapshot_basis{1, -1, false}, fs, late);
  BOOST_TEST(to_string(f.code) == "invalid_request");
  BOOST_TEST(f.what.find("snapshot 7 repeated after the state changed") != std::string::npos, f.what);
}

BOOST_AUTO_TEST_CASE(a_snapshot_shares_the_values_and_carries_slots_and_ledger) {
  BOOST_REQUIRE(push(push_of(1, matrix::Ones(2, 3))));
  fence_request req;
  req.f = epochs(1);
  ps_snapshot snap;
  BOOST_TEST(!store.snapshot(req, snapshot_basis{}, snap));
  BOOST_REQUIRE(snap.partitions.size() == 2u);
  auto& k = snap.partitions[0];
  BOOST_TEST(k.version == 1u);
  BOOST_TEST(k.value.value->isApproxToConstant(-1.0f));
  BOOST_REQUIRE(k.ledger.segments.size() == 1u);
  BOOST_TEST(k.ledger.segments[0].begin == 1u);
  BOOST_REQUIRE(push(push_of(2, matrix::Ones(2, 3))));
  BOOST_TEST(k.value.value->isApproxToConstant(-1.0f));  // the snapshot's version is kept
}

BOOST_AUTO_TEST_CASE(a_snapshot_is_a_state_another_store_takes_whole) {
  BOOST_REQUIRE(push(push_of(1, matrix::Ones(2, 3))));
  BOOST_REQUIRE(push(push_of(2, matrix::Ones(2, 3))));
  fence_request req;
  req.f = epochs(1);
  ps_snapshot snap;
  BOOST_REQUIRE(!store.snapshot(req, snapshot_basis{}, snap));
  BOOST_REQUIRE(snap.partitions.size() == 2u);
  BOOST_TEST((snap.partitions[0].row_end == 2 && snap.partitions[1].row_end == 5));
  BOOST_TEST((!snap.partitions[0].sparse && snap.partitions[1].sparse));
  // The same type goes back in: values, version, apply count, ledger and sparseness.
  shard_store other(*model::make_sgd({1.0}), shard_store::options{1, nullptr, 16, false, {}, {}});
  init_request init;
  init.f = epochs(1);
  init.partitions = snap.partitions;
  BOOST_REQUIRE(!other.init(init));
  ps_snapshot back;
  BOOST_REQUIRE(!other.snapshot(req, snapshot_basis{}, back));
  BOOST_REQUIRE(back.partitions.size() == 2u);
  auto& k = back.partitions[0];
  BOOST_TEST(k.value.value->isApproxToConstant(-2.0f));
  BOOST_TEST(k.version == 2u);  // goes on from the snapshot's count
  BOOST_TEST(k.iterations == 2);
  BOOST_REQUIRE(k.ledger.segments.size() == 1u);
  BOOST_TEST((k.ledger.segments[0].begin == 1u && k.ledger.segments[0].end == 3u));
  BOOST_TEST(back.partitions[1].sparse);
  push_reply pr;
  auto dense_on_sparse = push_of(3, matrix::Ones(5, 2));
  dense_on_sparse.dense[0].key = partition_key{1, 0};
  auto f = other.push(dense_on_sparse, pr);
  BOOST_TEST(f.what.find("variable emb/embeddings is sparse") != std::string::npos, f.what);
}

BOOST_AUTO_TEST_CASE(an_init_whose_rows_disagree_with_its_values_is_refused) {
  BOOST_REQUIRE(push(push_of(1, matrix::Ones(2, 3))));
  auto req = two_partitions(1, 1);
  req.partitions[1].row_begin = 2;  // rows [2, 5) named for 5 rows of values
  BOOST_TEST(!init(req));
  BOOST_TEST(text().find("invalid_request: init: partition of emb/embeddings names rows [2, 5) for 5 rows of values") !=
               std::string::npos,
             text());
  BOOST_TEST(kernel().isApproxToConstant(-1.0f));  // nothing taken
}

BOOST_AUTO_TEST_CASE(an_init_carries_the_kept_state_a_restore_puts_back) {
  // A store whose optimizer has a slot (momentum), restored to a state that holds a kept one.
  shard_store s(*model::make_sgd({1.0, 0.5}), shard_store::options{});
  init_request req;
  req.f = epochs(1);
  auto kernel = testing::start_state(partition_key{0, 0}, "dense/kernel", false, matrix::Zero(2, 3));
  kernel.slot_names = {"momentum"};
  kernel.slots = {tensor{matrix::Zero(2, 3)}};
  auto& kept = kernel.kept.emplace();
  kept.value = tensor{matrix::Constant(2, 3, 5.0f)};
  kept.slots = {tensor{matrix::Constant(2, 3, 0.25f)}};
  kept.iterations = 7;
  req.partitions.push_back(kernel);
  auto take = [&s](init_request r) { return s.init(r); };  // a copy: the request stays whole
  BOOST_REQUIRE(!take(req));
  push_reply pr;
  auto step = push_of(1, matrix::Ones(2, 3));
  BOOST_REQUIRE(!s.push(step, pr));  // away from the kept state
  fence_request r;
  r.f = epochs(1);
  r.id = 1;
  BOOST_REQUIRE(!s.restore(r));
  ps_snapshot snap;
  BOOST_REQUIRE(!s.snapshot(r, snapshot_basis{}, snap));
  auto& k = snap.partitions.at(0);
  BOOST_TEST(k.value.value->isApproxToConstant(5.0f));
  BOOST_REQUIRE(k.slots.size() == 1u);
  BOOST_TEST(k.slots[0].value->isApproxToConstant(0.25f));
  BOOST_TEST(k.iterations == 7);
  // No kept state, or one not shaped like the values: the shard keeps none, and a
  // restore is refused.
  for (uint64_t epoch : {1, 2}) {
    auto again = req;
    again.f.recovery_epoch = epoch;
    if (epoch == 1)
      again.partitions[0].kept.reset();
    else
      again.partitions[0].kept->value = tensor{matrix::Constant(3, 2, 5.0f)};
    BOOST_REQUIRE(!take(again));
    r.f.recovery_epoch = epoch;
    auto f = s.restore(r);
    BOOST_TEST(f.what.find("ps shard 0 holds no kept state") != std::string::npos, f.what);
  }
}

BOOST_AUTO_TEST_SUITE_END()

// A shard of a synchronous cluster: pushes are held, and a round applies their
// example-weighted mean once.
struct sync_fixture : store_fixture {
  sync_fixture() : store_fixture(hold_for_round()) {}

  round_request round_of(std::vector<uint64_t> positions, int64_t examples) {
    round_request r;
    r.f = epochs(1);
    r.round = 1;
    for (auto p : positions) r.steps.push_back(step_id{1, 0, p});
    r.example_count = examples;
    return r;
  }
};

BOOST_FIXTURE_TEST_CASE(held_pushes_are_applied_as_one_example_weighted_mean, sync_fixture) {
  auto a = push_of(0, matrix::Constant(2, 3, 1.0f));  // 4 examples
  auto b = push_of(1, matrix::Constant(2, 3, 4.0f));
  b.example_count = 12;
  sparse_slice rows;  // only step 1 touches embedding rows 1 and 3
  rows.variable = 1;
  rows.ids = {1, 3};
  rows.rows = tensor{matrix::Constant(2, 2, 2.0f)};
  b.sparse.push_back(rows);
  auto ra = push(a);
  BOOST_REQUIRE(ra);
  BOOST_TEST(to_string(ra->status) == "held");
  BOOST_REQUIRE(push(b));
  BOOST_TEST(kernel().isZero());  // nothing applied before the round closes
  BOOST_TEST(stats().held == 2u);
  // A re-run of a held step is a duplicate: the first computation stays.
  BOOST_TEST(to_string(push(push_of(1, matrix::Ones(2, 3)))->status) == "duplicate");
  // Step 2 of the round (4 examples) pushed nothing here: it counts in the mean.
  auto r = round(round_of({0, 1, 2}, 20));
  BOOST_REQUIRE(r);
  BOOST_TEST(r->applied == 2u);
  BOOST_TEST(r->max_staleness == 0u);
  // (4 * 1 + 12 * 4) / 20 = 2.6, one SGD step of lr 1.
  BOOST_TEST(kernel().isApproxToConstant(-2.6f));
  matrix e = embeddings();
  BOOST_TEST(e(1, 0) == -12.0f * 2 / 20, e);  // 12 of 20 examples pushed 2
  BOOST_TEST(e(0, 0) == 0.0f);                // untouched rows stay
  auto s = stats();
  BOOST_TEST(s.applied == 2u);
  BOOST_TEST(s.held == 0u);
  for (auto& v : s.versions) BOOST_TEST(v.version == 1u);  // one update per round
  // The same manifest again (a retry) applies nothing.
  BOOST_TEST(round(round_of({0, 1, 2}, 20))->applied == 0u);
  BOOST_TEST(kernel().isApproxToConstant(-2.6f));
  // Both steps of the mean are in the ledger of every partition the mean touched, each
  // with its own batch's digest.
  auto all = ledgers();
  BOOST_REQUIRE(all);
  for (auto& pl : all->partitions) {
    BOOST_REQUIRE(pl.ledger.segments.size() == 1u);
    BOOST_TEST(pl.ledger.segments[0].checksum == ledger_mix(0, 1000) + ledger_mix(1, 1001));
  }
}

BOOST_FIXTURE_TEST_CASE(a_round_applies_only_the_steps_its_manifest_names, sync_fixture) {
  BOOST_REQUIRE(push(push_of(0, matrix::Ones(2, 3))));
  BOOST_REQUIRE(push(push_of(5, matrix::Ones(2, 3))));
  BOOST_TEST(round(round_of({0}, 4))->applied == 1u);
  BOOST_TEST(kernel().isApproxToConstant(-1.0f));
  BOOST_TEST(stats().held == 1u);  // step 5 waits for its own round
}

BOOST_FIXTURE_TEST_CASE(a_restore_drops_held_pushes_and_old_rounds_are_fenced, sync_fixture) {
  BOOST_REQUIRE(push(push_of(0, matrix::Ones(2, 3))));
  init_request req;
  req.f.coordinator_epoch = 1;
  req.f.recovery_epoch = 1;
  req.partitions.push_back(testing::start_state(partition_key{0, 0}, "dense/kernel", false, matrix::Zero(2, 3)));
  BOOST_REQUIRE(init(req));
  BOOST_TEST(stats().held == 0u);
  BOOST_TEST(!round(round_of({0}, 4)));  // the old epochs' manifest
  BOOST_TEST(text().find("fenced_out") != std::string::npos, text());
  BOOST_TEST(kernel().isZero());
}

// -- dynamic tables ------------------------------------------------------------------------
//
// A shard holding partition 1 of 2 of a table keyed by raw ids (model/dynamic_table.hpp):
// it serves and updates the ids whose hash gives partition 1, refuses the others, starts
// every row from the variable's initializer seeded by (seed, id) alone, keeps and
// restores its rows, and answers a snapshot that another store takes as its init.

namespace {

constexpr uint64_t table_seed = 5;

std::vector<model::variable_spec> table_model() {
  model::variable_spec kernel{"dense/kernel", {2, 3}, model::zeros()};
  model::variable_spec table{"emb/table", {0, 2}, model::uniform(-1, 1), true, true};
  return {kernel, table};
}

partition_state table_part(int32_t index, int32_t partitions) {
  partition_state p;
  p.key = partition_key{1, index};
  p.name = "emb/table";
  p.sparse = true;
  p.dynamic = true;
  p.partitions = partitions;
  p.seed = table_seed;
  p.value = tensor{matrix(0, 2)};
  return p;
}

// The row id starts from: the initializer on one row, seeded by the id alone.
matrix initial_row(int64_t id) {
  matrix m(1, 2);
  model::uniform(-1, 1).fill(m, model::dynamic_table::row_seed(table_seed, id));
  return m;
}

// Ids of partition `k` of 2, and of the other one.
std::vector<int64_t> ids_of(int k, size_t n) {
  std::vector<int64_t> out;
  for (int64_t id = int64_t{1} << 40; out.size() < n; id += 7919)
    if (model::dynamic_owner(id, 2) == k) out.push_back(id);
  return out;
}

struct table_fixture : store_fixture {
  shard_store tables{*model::make_sgd({1.0}), shard_store::options{1, nullptr, 16, false, {}, {}, table_model()}};

  bool init_tables(init_request r) { return !(last = tables.init(r)); }
  std::optional<rows_reply> rows(std::vector<int64_t> ids, bool training) {
    pull_rows_request r;
    r.f = epochs(1);
    r.variable = 1;
    r.ids = std::move(ids);
    r.training = training;
    return call<rows_reply>([&](rows_reply& o) { return tables.pull_rows(r, o); });
  }
  std::optional<push_reply> push_rows(uint64_t position, std::vector<int64_t> ids, float g) {
    push_request r;
    r.f = epochs(1);
    r.step = step_id{1, 0, position};
    r.example_count = 1;
    r.digests = {position};
    sparse_slice s;
    s.variable = 1;
    s.rows = tensor{matrix::Constant(static_cast<Eigen::Index>(ids.size()), 2, g)};
    s.ids = std::move(ids);
    r.sparse.push_back(std::move(s));
    return call<push_reply>([&](push_reply& o) { return tables.push(r, o); });
  }
  table_stats counts() {
    auto s = tables.stats();
    BOOST_REQUIRE(s.tables.size() == 1u);
    return s.tables[0];
  }
  table_fixture() {
    init_request req;
    req.f = epochs(1);
    req.partitions.push_back(table_part(1, 2));
    BOOST_REQUIRE(init_tables(req));
  }
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(shard_store_dynamic_tables, table_fixture)

BOOST_AUTO_TEST_CASE(rows_start_from_the_id_alone_and_only_pushes_create_them) {
  auto mine = ids_of(1, 4);
  auto r = rows(mine, false);
  BOOST_REQUIRE(r);
  for (size_t j = 0; j < mine.size(); ++j)
    BOOST_TEST((r->rows.value->row(static_cast<Eigen::Index>(j)).array() == initial_row(mine[j]).row(0).array()).all());
  BOOST_TEST(counts().rows == 0u);  // an evaluation read creates nothing
  r = rows(mine, true);
  BOOST_REQUIRE(r);
  BOOST_TEST(counts().rows == 0u);  // nor does a training read: a retried one would count twice
  BOOST_REQUIRE(push_rows(1, mine, 0.0f));
  BOOST_TEST(counts().rows == 4u);
  BOOST_TEST(counts().created == 4u);
  BOOST_TEST(counts().bytes > counts().payload_bytes);
  // Another shard count: the same id starts from the same row.
  shard_store one{*model::make_sgd({1.0}), shard_store::options{0, nullptr, 16, false, {}, {}, table_model()}};
  init_request req;
  req.f = epochs(1);
  req.partitions.push_back(table_part(0, 1));
  BOOST_REQUIRE(!one.init(req));
  pull_rows_request pr;
  pr.f = epochs(1);
  pr.variable = 1;
  pr.ids = mine;
  rows_reply got;
  BOOST_REQUIRE(!one.pull_rows(pr, got));
  BOOST_TEST((got.rows.value->array() == r->rows.value->array()).all());
}

BOOST_AUTO_TEST_CASE(ids_of_another_shard_or_negative_are_refused_and_a_bad_push_changes_nothing) {
  auto mine = ids_of(1, 2), theirs = ids_of(0, 1);
  BOOST_TEST(!rows({mine[0], theirs[0]}, true));
  BOOST_TEST(text().find("is not here") != std::string::npos, text());
  BOOST_TEST(!rows({-3}, false));
  BOOST_TEST(counts().rows == 0u);
  BOOST_REQUIRE(rows(mine, true));
  std::vector<int64_t> mixed{mine[0], theirs[0]};
  std::sort(mixed.begin(), mixed.end());
  BOOST_TEST(!push_rows(1, mixed, 1));
  BOOST_TEST(text().find("is not on this shard") != std::string::npos, text());
  BOOST_TEST(tables.stats().rejected == 1u);
  auto r = rows({mine[0]}, false);
  BOOST_TEST((r->rows.value->array() == initial_row(mine[0]).array()).all());
  // The good push: SGD at rate 1 takes the gradient off the row.
  BOOST_REQUIRE(push_rows(2, {mine[0]}, 0.5f));
  r = rows({mine[0]}, false);
  BOOST_TEST((r->rows.value->array() == (initial_row(mine[0]).array() - 0.5f)).all());
  BOOST_TEST(r->version == 1u);
}

BOOST_AUTO_TEST_CASE(keep_and_restore_put_the_rows_back_and_a_snapshot_is_an_init_of_its_rows) {
  auto mine = ids_of(1, 3);
  BOOST_REQUIRE(push_rows(1, mine, 0.25f));
  fence_request k;
  k.f = epochs(1);
  k.id = 1;
  BOOST_REQUIRE(!(last = tables.keep(k)));
  auto before = rows(mine, false);
  BOOST_REQUIRE(push_rows(2, {mine[0]}, 1));
  BOOST_REQUIRE(push_rows(3, {ids_of(1, 5)[4]}, 1));  // a row created after the keep
  BOOST_TEST(counts().rows == 4u);
  k.id = 2;
  BOOST_REQUIRE(!(last = tables.restore(k)));
  auto after = rows(mine, false);
  BOOST_TEST((after->rows.value->array() == before->rows.value->array()).all());
  BOOST_TEST(counts().rows == 3u);
  // A snapshot holds every row, the rows' ids, and the waiting ids; another store takes it.
  ps_snapshot snap;
  BOOST_REQUIRE(!(last = tables.snapshot(k, snapshot_basis{}, snap)));
  BOOST_REQUIRE(snap.partitions.size() == 1u);
  auto& p = snap.partitions[0];
  BOOST_TEST(p.dynamic);
  BOOST_TEST(p.ids.size() == 3u);
  BOOST_TEST(p.value.rows() == 3);
  BOOST_TEST(p.row_begin == 1);  // its "rows" [1, 2): partition 1
  shard_store other{*model::make_sgd({1.0}), shard_store::options{1, nullptr, 16, false, {}, {}, table_model()}};
  init_request req;
  req.f = epochs(1);
  req.partitions.push_back(p);
  BOOST_REQUIRE(!other.init(req));
  pull_rows_request pr;
  pr.f = epochs(1);
  pr.variable = 1;
  pr.ids = mine;
  rows_reply got;
  BOOST_REQUIRE(!other.pull_rows(pr, got));
  BOOST_TEST((got.rows.value->array() == after->rows.value->array()).all());
  BOOST_TEST(other.stats().tables.at(0).rows == 3u);
  // A row sent to a partition that does not hold its id is refused.
  req.partitions[0].key.index = 0;
  req.f = epochs(2);  // a new init, not a retry of the first
  auto refused = other.init(req);
  BOOST_TEST(refused.what.find("does not hold it") != std::string::npos, refused.what);
}

BOOST_AUTO_TEST_CASE(an_init_the_model_does_not_agree_with_is_refused_and_changes_nothing) {
  auto mine = ids_of(1, 1);
  BOOST_REQUIRE(push_rows(1, mine, 0.5f));
  auto bad = [&](partition_state p, const std::string& what) {
    init_request req;
    req.f = epochs(2);
    req.partitions.push_back(std::move(p));
    BOOST_TEST(!init_tables(req));
    BOOST_TEST(text().find(what) != std::string::npos, text());
    BOOST_TEST(counts().rows == 1u);
  };
  auto p = table_part(1, 2);
  p.name = "emb/other";
  bad(p, "no such variable");
  p = table_part(1, 2);
  p.key.index = 2;
  bad(p, "partition 2 of 2");
  p = table_part(1, 2);
  p.value = tensor{matrix::Zero(3, 2)};
  bad(p, "0 ids and 0 last updates for rows [3 x 2]");
  p = table_part(1, 2);
  p.name = "dense/kernel";
  p.key.variable = 0;
  bad(p, "with fixed rows");
  // What a checkpoint's rows may not be: ids of another partition, twice, waiting ids
  // of another partition; and a table sent as fixed rows, or twice to one shard.
  auto theirs = ids_of(0, 1), two = ids_of(1, 2);
  p = table_part(1, 2);
  p.waiting = {{theirs[0], 1, 0}};
  bad(p, "waiting id of id");
  p = table_part(1, 2);
  p.ids = {two[0], two[0]};
  p.last_update = {0, 0};
  p.value = tensor{matrix::Zero(2, 2)};
  bad(p, "sent twice");
  // Steps past the partition's count (an id or a row that would never go idle).
  p = table_part(1, 2);
  p.iterations = 5;
  p.waiting = {{two[0], 1, 6}};
  bad(p, "waiting since step 6 of 5");
  p = table_part(1, 2);
  p.iterations = 5;
  p.ids = {two[0]};
  p.last_update = {9};
  p.value = tensor{matrix::Zero(1, 2)};
  bad(p, "row updated at step 9 of 5");
  auto fixed = testing::start_state(partition_key{1, 1}, "emb/table", true, matrix::Zero(3, 2));
  bad(fixed, "a dynamic table, sent as fixed rows");
  init_request req;
  req.f = epochs(2);
  req.partitions = {table_part(1, 2), table_part(1, 2)};
  req.partitions[1].key.index = 0;
  BOOST_TEST(!init_tables(req));
  BOOST_TEST(text().find("two partitions of the dynamic table") != std::string::npos, text());
  BOOST_TEST(counts().rows == 1u);
}

// A snapshot over a base this shard took holds only the rows changed since and the ids
// dropped since; over a base it did not take, or after a restore, every row.
BOOST_AUTO_TEST_CASE(a_snapshot_over_a_base_it_took_holds_what_changed_and_after_a_restore_every_row) {
  auto mine = ids_of(1, 6);
  BOOST_REQUIRE(push_rows(1, mine, 0.25f));
  fence_request k;
  k.f = epochs(1);
  k.id = 1;
  auto snap = [&](int64_t step, int64_t base) {
    ps_snapshot s;
    BOOST_REQUIRE(!(last = tables.snapshot(k, snapshot_basis{step, base, true}, s)));
    BOOST_REQUIRE(s.partitions.size() == 1u);
    return s.partitions[0];
  };
  auto sorted = [](std::vector<int64_t> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  auto s10 = snap(10, -1);
  BOOST_TEST(s10.base == -1);
  BOOST_TEST(s10.ids.size() == 6u);
  BOOST_REQUIRE(push_rows(2, {mine[0], mine[1]}, 1));
  auto s20 = snap(20, 10);
  BOOST_TEST(s20.base == 10);
  BOOST_TEST(sorted(s20.ids) == sorted({mine[0], mine[1]}));
  BOOST_TEST(s20.value.rows() == 2);
  BOOST_TEST(s20.removed.empty());
  BOOST_TEST(snap(30, 15).base == -1);  // no snapshot of step 15 here: whole
  BOOST_TEST(snap(30, 15).ids.size() == 6u);
  auto s40 = snap(40, 20);
  BOOST_TEST(s40.base == 20);
  BOOST_TEST(s40.ids.empty());
  // The shared form writes the increment's rows and its removed ids.
  model::memory_file_system fs;
  auto dir = model::begin_checkpoint(fs, "/ckpt", 45);
  ps_files files;
  BOOST_REQUIRE(!(last = tables.snapshot_files(k, checkpoint_target{dir}, snapshot_basis{45, 40, true}, fs, files)));
  BOOST_REQUIRE(files.partitions.size() == 1u);
  BOOST_TEST(files.partitions[0].header.base == 40);
  bool removed_file = false;
  for (auto& [what, e] : files.partitions[0].tables) removed_file = removed_file || what == "removed";
  BOOST_TEST(removed_file);
  // A run that does not checkpoint incrementally: nothing kept, nothing logged, so an
  // increment over a snapshot before it cannot be asked for.
  {
    ps_snapshot s;
    BOOST_REQUIRE(!(last = tables.snapshot(k, snapshot_basis{46, -1, false}, s)));
  }
  BOOST_TEST(snap(47, 45).base == -1);
  BOOST_TEST(snap(48, 47).base == 47);
  // A restore puts another state in: the next snapshot is whole whatever it is over.
  k.id = 2;
  BOOST_REQUIRE(!(last = tables.keep(k)));
  k.id = 3;
  BOOST_REQUIRE(!(last = tables.restore(k)));
  BOOST_TEST(snap(50, 45).base == -1);
  // An init takes whole partitions only.
  init_request req;
  req.f = epochs(2);
  req.partitions.push_back(s20);
  auto refused = tables.init(req);
  BOOST_TEST(refused.what.find("an increment over step 10") != std::string::npos, refused.what);
}

BOOST_AUTO_TEST_SUITE_END()

// use_ema (model/optim/optimizer.hpp, "Averaging"): a training step reads the values, every
// other read (evaluation, the application's) reads their moving average. The expected
// average is worked out here from the values the training reads returned, not from the
// store's slot.
BOOST_AUTO_TEST_CASE(an_averaging_optimizer_serves_the_average_to_every_read_but_training) {
  model::sgd_options o;
  o.learning_rate = 1.0;
  o.use_ema = true;
  o.ema_momentum = 0.5;
  shard_store store(*model::make_sgd(o), shard_store::options{0, nullptr, 16, false, {}, {}});
  init_request init;
  init.f.coordinator_epoch = 1;
  init.partitions.push_back(testing::start_state(partition_key{0, 0}, "dense/kernel", false, matrix::Constant(2, 3, 4)));
  BOOST_REQUIRE(!store.init(init));
  auto read = [&](bool training) {
    pull_request p;
    p.f.coordinator_epoch = training ? 1 : 0;
    p.training = training;
    p.partitions.push_back(partition_key{0, 0});
    pull_reply r;
    BOOST_REQUIRE(!store.pull(p, r));
    return matrix(*r.values.at(0).value.value);
  };
  auto push = [&](uint64_t position, float g) {
    push_request r;
    r.f.coordinator_epoch = 1;
    r.f.worker = fence::no_worker;
    r.step = step_id{1, 0, position};
    r.example_count = 4;
    r.dense.push_back(dense_slice{partition_key{0, 0}, position - 1, tensor{matrix::Constant(2, 3, g)}});
    r.digests = {1000 + position};
    push_reply out;
    BOOST_REQUIRE(!store.push(r, out));
  };
  BOOST_TEST((read(false) == read(true)));  // nothing applied yet: the values
  push(1, 1.0f);
  const matrix v1 = read(true);
  BOOST_TEST(v1.isApproxToConstant(3.0f));
  BOOST_TEST((read(false) == v1));  // the first update's average is its values
  push(2, 2.0f);
  const matrix v2 = read(true);
  BOOST_TEST(v2.isApproxToConstant(1.0f));
  const matrix expected = 0.5f * v1 + 0.5f * v2;
  BOOST_TEST((read(false) == expected));  // 2, not the values' 1
  // A snapshot carries it as a slot, and a store that takes the snapshot serves it.
  fence_request req;
  req.f.coordinator_epoch = 1;
  ps_snapshot snap;
  BOOST_REQUIRE(!store.snapshot(req, snapshot_basis{}, snap));
  auto& p = snap.partitions.at(0);
  BOOST_REQUIRE(p.slot_names == std::vector<std::string>{"average"});
  BOOST_TEST((*p.slots.at(0).value == expected));
  shard_store other(*model::make_sgd(o), shard_store::options{1, nullptr, 16, false, {}, {}});
  init_request again;
  again.f.coordinator_epoch = 1;
  again.partitions = snap.partitions;
  BOOST_REQUIRE(!other.init(again));
  pull_request observer;
  observer.partitions.push_back(partition_key{0, 0});
  auto observe = [&] {
    pull_reply r;
    BOOST_REQUIRE(!other.pull(observer, r));
    return matrix(*r.values.at(0).value.value);
  };
  BOOST_TEST((observe() == expected));
  // A state without the slot (a checkpoint from before averaging) starts it as the
  // values, not as zeros.
  again.f.coordinator_epoch = 2;
  again.partitions = snap.partitions;  // the init took the values
  again.partitions.at(0).value = tensor{matrix(*snap.partitions.at(0).value.value)};
  again.partitions.at(0).slot_names.clear();
  again.partitions.at(0).slots.clear();
  auto taken = other.init(again);
  BOOST_REQUIRE_MESSAGE(!taken, taken.what);
  BOOST_TEST((observe() == v2));
  // Rows cannot keep an average: a partition pulled by rows is refused at init.
  init_request rows;
  rows.f.coordinator_epoch = 3;
  rows.partitions.push_back(testing::start_state(partition_key{1, 0}, "emb/embeddings", true, matrix::Zero(5, 2)));
  auto refused = other.init(rows);
  BOOST_TEST(refused.what.find("emb/embeddings is updated by rows") != std::string::npos, refused.what);
  BOOST_TEST(refused.what.find("use_ema") != std::string::npos, refused.what);
}
