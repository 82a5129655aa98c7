// The ps shard actor on CAF's test coordinator: what the actor adds to its shard store
// (shard_store_test.cpp tests the decisions): requests through the mailbox, the store's
// failures as errors of category actortrain, pulls shared through messages without a
// copy, a synchronous round closed by message, the ledger by message.

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

BOOST_AUTO_TEST_CASE(a_message_with_an_older_fence_is_rejected) {
  BOOST_REQUIRE(ask<push_reply>(push_atom::value, push_of(1, matrix::Ones(2, 3), 0, epochs(3))));
  BOOST_TEST(!static_cast<bool>(ask<push_reply>(push_atom::value, push_of(2, matrix::Ones(2, 3), 0, epochs(2)))));
  BOOST_TEST(describe(last_error).find("fenced_out") != std::string::npos, describe(last_error));
  BOOST_TEST(stats().fenced == 1u);
  BOOST_TEST(kernel().isApproxToConstant(-1.0f));
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
