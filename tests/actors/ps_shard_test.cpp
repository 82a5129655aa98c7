// ps_shard on CAF's test coordinator: exactly-once application per step id, validation
// that names variable and shapes, fences, versions and staleness, copy-on-write pulls.

#include <actortrain/actors/core/errors.hpp>
#include <actortrain/actors/ps/ps_shard.hpp>
#include <actortrain/model/optim/sgd.hpp>

// Last: CAF's test DSL defines macros (inject, expect) that clash with ordinary names.
#include "caf_test.hpp"

using namespace actortrain;
using model::matrix;

namespace {

struct ps_fixture : testing::fixture {
  ps_shard_actor ps;
  caf::error last_error;

  ps_fixture() {
    ps = spawn_ps_shard(sys, *model::make_sgd({1.0}), ps_shard_options{});
    init_request req;
    req.f.coordinator_epoch = 1;
    req.partitions.push_back(partition_init{partition_key{0, 0}, "dense/kernel", 0, false, tensor{matrix::Zero(2, 3)}, {}, {}, 0, {}, {}, {}, 0});
    req.partitions.push_back(partition_init{partition_key{1, 0}, "emb/embeddings", 0, true, tensor{matrix::Zero(5, 2)}, {}, {}, 0, {}, {}, {}, 0});
    BOOST_REQUIRE(ask<caf::ok_atom>(init_atom::value, req));
  }

  ~ps_fixture() { caf::anon_send_exit(ps, caf::exit_reason::user_shutdown); }

  template <class T, class... Ts>
  caf::optional<T> ask(Ts&&... xs) {
    auto rh = self->request(ps, std::chrono::seconds(10), std::forward<Ts>(xs)...);
    sched.run();
    caf::optional<T> out;
    rh.receive([&](T& x) { out = std::move(x); }, [&](caf::error& e) { last_error = e; });
    return out;
  }

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

  matrix kernel() {
    pull_request p;
    p.f = epochs(0);  // an observer's read: passes any fence
    p.partitions.push_back(partition_key{0, 0});
    auto r = ask<pull_reply>(pull_atom::value, p);
    BOOST_REQUIRE(r);
    return *r->values.at(0).value.value;
  }

  ps_stats stats() { return *ask<ps_stats>(stats_atom::value); }
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(ps_shard, ps_fixture)

BOOST_AUTO_TEST_CASE(a_push_is_applied_once_and_a_repeated_step_id_is_acknowledged_as_duplicate) {
  auto first = ask<push_reply>(push_atom::value, push_of(7, matrix::Ones(2, 3)));
  BOOST_REQUIRE(first);
  BOOST_TEST(to_string(first->status) == "applied");
  BOOST_TEST(kernel().isApproxToConstant(-1.0f));  // SGD lr 1: w -= g
  auto again = ask<push_reply>(push_atom::value, push_of(7, matrix::Ones(2, 3)));
  BOOST_REQUIRE(again);
  BOOST_TEST(to_string(again->status) == "duplicate");
  BOOST_TEST(kernel().isApproxToConstant(-1.0f));  // not applied twice
  auto s = stats();
  BOOST_TEST(s.applied == 1u);
  BOOST_TEST(s.duplicates == 1u);
}

BOOST_AUTO_TEST_CASE(a_wrong_shape_is_rejected_naming_variable_and_shapes_and_nothing_changes) {
  auto r = ask<push_reply>(push_atom::value, push_of(1, matrix::Ones(3, 3)));
  BOOST_TEST(!r);
  auto text = describe(last_error);
  BOOST_TEST(text.find("invalid_gradient") != std::string::npos, text);
  BOOST_TEST(text.find("dense/kernel") != std::string::npos, text);
  BOOST_TEST(text.find("[3 x 3]") != std::string::npos, text);
  BOOST_TEST(text.find("[2 x 3]") != std::string::npos, text);
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
  BOOST_TEST(!static_cast<bool>(ask<push_reply>(push_atom::value, req)));
  BOOST_TEST(describe(last_error).find("not finite") != std::string::npos, describe(last_error));
  BOOST_TEST(kernel().isZero());
  BOOST_TEST(stats().applied == 0u);
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
  BOOST_REQUIRE(ask<push_reply>(push_atom::value, req));
  pull_rows_request pr;
  pr.f = epochs(1);
  pr.variable = 1;
  pr.ids = {0, 1, 4};
  auto rows = ask<rows_reply>(pull_rows_atom::value, pr);
  BOOST_REQUIRE(rows);
  const matrix& m = *rows->rows.value;
  BOOST_TEST(m.row(0).isZero());
  BOOST_TEST(m.row(1).isApproxToConstant(-1.0f));
  BOOST_TEST(m.row(2).isApproxToConstant(-1.0f));
}

BOOST_AUTO_TEST_CASE(a_message_with_an_older_fence_is_rejected) {
  BOOST_REQUIRE(ask<push_reply>(push_atom::value, push_of(1, matrix::Ones(2, 3), 0, epochs(3))));
  BOOST_TEST(!static_cast<bool>(ask<push_reply>(push_atom::value, push_of(2, matrix::Ones(2, 3), 0, epochs(2)))));
  BOOST_TEST(describe(last_error).find("fenced_out") != std::string::npos, describe(last_error));
  BOOST_TEST(stats().fenced == 1u);
  BOOST_TEST(kernel().isApproxToConstant(-1.0f));
}

BOOST_AUTO_TEST_CASE(a_fenced_worker_generation_cannot_push) {
  fence_request fr;
  fr.f = epochs(1, 0, 2);
  auto ack = ask<fence>(fence_atom::value, fr);
  BOOST_REQUIRE(ack);
  BOOST_TEST(ack->worker_generation == 2u);
  BOOST_TEST(!static_cast<bool>(ask<push_reply>(push_atom::value, push_of(1, matrix::Ones(2, 3), 0, epochs(1, 0, 1)))));
  BOOST_TEST(static_cast<bool>(ask<push_reply>(push_atom::value, push_of(1, matrix::Ones(2, 3), 0, epochs(1, 0, 2)))));
  BOOST_TEST(static_cast<bool>(ask<push_reply>(push_atom::value, push_of(2, matrix::Ones(2, 3), 0, epochs(1, 1, 1)))));
}

BOOST_AUTO_TEST_CASE(versions_count_updates_and_staleness_is_recorded) {
  BOOST_REQUIRE(ask<push_reply>(push_atom::value, push_of(1, matrix::Ones(2, 3), 0)));
  auto late = ask<push_reply>(push_atom::value, push_of(2, matrix::Ones(2, 3), 0));  // read v0, applied at v1
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
  auto held = ask<pull_reply>(pull_atom::value, p);  // holds version 0
  BOOST_REQUIRE(held);
  BOOST_REQUIRE(ask<push_reply>(push_atom::value, push_of(1, matrix::Ones(2, 3))));
  BOOST_TEST(held->values[0].value.value->isZero());  // copy-on-write: unchanged
  BOOST_TEST(kernel().isApproxToConstant(-1.0f));
}

BOOST_AUTO_TEST_CASE(copy_on_write_reuses_the_buffer_of_a_version_nobody_reads_any_more) {
  pull_request p;
  p.f = epochs(1);
  p.partitions.push_back(partition_key{0, 0});
  auto first = ask<pull_reply>(pull_atom::value, p);  // version 0
  BOOST_REQUIRE(first);
  const matrix* old_buffer = first->values[0].value.value.get();
  BOOST_REQUIRE(ask<push_reply>(push_atom::value, push_of(1, matrix::Ones(2, 3))));  // copied: version 0 is read
  auto second = ask<pull_reply>(pull_atom::value, p);  // version 1
  BOOST_REQUIRE(second);
  BOOST_TEST(second->values[0].value.value.get() != old_buffer);
  first = caf::none;  // nobody reads version 0 now
  BOOST_REQUIRE(ask<push_reply>(push_atom::value, push_of(2, matrix::Ones(2, 3))));  // version 1 is read
  auto third = ask<pull_reply>(pull_atom::value, p);
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
    auto rep = ask<push_reply>(push_atom::value, r);
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
  BOOST_REQUIRE(ask<caf::ok_atom>(hyper_atom::value, h));
  BOOST_REQUIRE(ask<push_reply>(push_atom::value, push_of(1, matrix::Ones(2, 3))));
  BOOST_TEST(kernel().isApproxToConstant(-0.5f));
  h.values = {{"learning_rate", 0.1}, {"no_such_thing", 1.0}};
  BOOST_TEST(!ask<caf::ok_atom>(hyper_atom::value, h));
  BOOST_REQUIRE(ask<push_reply>(push_atom::value, push_of(2, matrix::Ones(2, 3))));
  BOOST_TEST(kernel().isApproxToConstant(-1.0f));  // still 0.5
}

BOOST_AUTO_TEST_CASE(each_partition_records_the_steps_it_applies_with_their_batch_digests) {
  BOOST_REQUIRE(ask<push_reply>(push_atom::value, push_of(7, matrix::Ones(2, 3))));
  BOOST_REQUIRE(ask<push_reply>(push_atom::value, push_of(8, matrix::Ones(2, 3))));
  BOOST_REQUIRE(ask<push_reply>(push_atom::value, push_of(7, matrix::Ones(2, 3))));  // a duplicate: not applied
  auto l = ask<ps_ledgers>(ledger_atom::value);
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
  req.partitions.push_back(partition_init{partition_key{0, 0}, "dense/kernel", 0, false, tensor{matrix::Zero(2, 3)}, {}, {},
                                          0, saved.data(), {}, {}, 0});
  BOOST_REQUIRE(ask<caf::ok_atom>(init_atom::value, req));
  auto f = epochs(1);
  f.recovery_epoch = 1;
  BOOST_TEST(to_string(ask<push_reply>(push_atom::value, push_of(7, matrix::Ones(2, 3), 0, f))->status) == "applied");
  auto violations = [&] { return ask<ps_ledgers>(ledger_atom::value)->partitions.at(0).ledger.violations; };
  BOOST_REQUIRE(violations().size() == 1u);
  BOOST_TEST(violations()[0].position == 7u);
  // Another restore does not wash it out.
  req.f.recovery_epoch = 2;
  BOOST_REQUIRE(ask<caf::ok_atom>(init_atom::value, req));
  BOOST_TEST(violations().size() == 1u);
}

BOOST_AUTO_TEST_CASE(a_push_must_carry_one_digest_per_step) {
  auto p = push_of(3, matrix::Ones(2, 3));
  p.more_steps.push_back(step_id{1, 0, 4});
  BOOST_TEST(!ask<push_reply>(push_atom::value, p));
  BOOST_TEST(describe(last_error).find("1 batch digest(s) for 2 step(s)") != std::string::npos, describe(last_error));
  p.digests.push_back(1004);
  BOOST_REQUIRE(ask<push_reply>(push_atom::value, p));
  auto seg = ask<ps_ledgers>(ledger_atom::value)->partitions.at(0).ledger.segments.at(0);
  BOOST_TEST((seg.begin == 3u && seg.end == 5u));
  BOOST_TEST(seg.checksum == ledger_mix(3, 1003) + ledger_mix(4, 1004));
}

BOOST_AUTO_TEST_CASE(a_shard_without_partitions_says_so) {
  auto fresh = spawn_ps_shard(sys, *model::make_sgd({1.0}), ps_shard_options{});
  auto rh = self->request(fresh, std::chrono::seconds(10), pull_atom::value, pull_request{});
  sched.run();
  std::string text;
  rh.receive([](pull_reply&) {}, [&](caf::error& e) { text = describe(e); });
  BOOST_TEST(text.find("not_initialized") != std::string::npos, text);
  caf::anon_send_exit(fresh, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_SUITE_END()

// A shard of a synchronous cluster: pushes are held, and a round applies their
// example-weighted mean once.
struct sync_fixture : ps_fixture {
  sync_fixture() {
    caf::anon_send_exit(ps, caf::exit_reason::user_shutdown);
    ps_shard_options o;
    o.policy = hold_for_round();
    ps = spawn_ps_shard(sys, *model::make_sgd({1.0}), o);
    init_request req;
    req.f.coordinator_epoch = 1;
    req.partitions.push_back(partition_init{partition_key{0, 0}, "dense/kernel", 0, false, tensor{matrix::Zero(2, 3)}, {}, {}, 0, {}, {}, {}, 0});
    req.partitions.push_back(partition_init{partition_key{1, 0}, "emb/embeddings", 0, true, tensor{matrix::Zero(5, 2)}, {}, {}, 0, {}, {}, {}, 0});
    BOOST_REQUIRE(ask<caf::ok_atom>(init_atom::value, req));
  }

  round_request round_of(std::vector<uint64_t> positions, int64_t examples) {
    round_request r;
    r.f = epochs(1);
    r.round = 1;
    for (auto p : positions) r.steps.push_back(step_id{1, 0, p});
    r.example_count = examples;
    return r;
  }

  matrix embeddings() {
    pull_request p;
    p.f = epochs(0);
    p.partitions.push_back(partition_key{1, 0});
    return *ask<pull_reply>(pull_atom::value, p)->values.at(0).value.value;
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
  auto ra = ask<push_reply>(push_atom::value, a);
  BOOST_REQUIRE(ra);
  BOOST_TEST(to_string(ra->status) == "held");
  BOOST_REQUIRE(ask<push_reply>(push_atom::value, b));
  BOOST_TEST(kernel().isZero());  // nothing applied before the round closes
  BOOST_TEST(stats().held == 2u);
  // A re-run of a held step is a duplicate: the first computation stays.
  BOOST_TEST(to_string(ask<push_reply>(push_atom::value, push_of(1, matrix::Ones(2, 3)))->status) == "duplicate");
  // Step 2 of the round (4 examples) pushed nothing here: it counts in the mean.
  auto r = ask<round_reply>(round_atom::value, round_of({0, 1, 2}, 20));
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
  BOOST_TEST(ask<round_reply>(round_atom::value, round_of({0, 1, 2}, 20))->applied == 0u);
  BOOST_TEST(kernel().isApproxToConstant(-2.6f));
  // Both steps of the mean are in the ledger of every partition the mean touched, each
  // with its own batch's digest.
  auto all = ask<ps_ledgers>(ledger_atom::value);
  BOOST_REQUIRE(all);
  for (auto& pl : all->partitions) {
    BOOST_REQUIRE(pl.ledger.segments.size() == 1u);
    BOOST_TEST(pl.ledger.segments[0].checksum == ledger_mix(0, 1000) + ledger_mix(1, 1001));
  }
}

BOOST_FIXTURE_TEST_CASE(a_round_applies_only_the_steps_its_manifest_names, sync_fixture) {
  BOOST_REQUIRE(ask<push_reply>(push_atom::value, push_of(0, matrix::Ones(2, 3))));
  BOOST_REQUIRE(ask<push_reply>(push_atom::value, push_of(5, matrix::Ones(2, 3))));
  BOOST_TEST(ask<round_reply>(round_atom::value, round_of({0}, 4))->applied == 1u);
  BOOST_TEST(kernel().isApproxToConstant(-1.0f));
  BOOST_TEST(stats().held == 1u);  // step 5 waits for its own round
}

BOOST_FIXTURE_TEST_CASE(a_restore_drops_held_pushes_and_old_rounds_are_fenced, sync_fixture) {
  BOOST_REQUIRE(ask<push_reply>(push_atom::value, push_of(0, matrix::Ones(2, 3))));
  init_request req;
  req.f.coordinator_epoch = 1;
  req.f.recovery_epoch = 1;
  req.partitions.push_back(partition_init{partition_key{0, 0}, "dense/kernel", 0, false, tensor{matrix::Zero(2, 3)}, {}, {}, 0, {}, {}, {}, 0});
  BOOST_REQUIRE(ask<caf::ok_atom>(init_atom::value, req));
  BOOST_TEST(stats().held == 0u);
  BOOST_TEST(!ask<round_reply>(round_atom::value, round_of({0}, 4)));  // the old epochs' manifest
  BOOST_TEST(describe(last_error).find("fenced_out") != std::string::npos, describe(last_error));
  BOOST_TEST(kernel().isZero());
}
