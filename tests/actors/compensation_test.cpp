// Staleness compensation on a ps shard (ps/compensation.hpp), through the shard store's
// own requests: what a training step's pull sees, what a stale push moves the values
// by. The gradients come from a planted quadratic the test computes itself,
//   f(w) = 1/2 sum_i a_i (w_i - t_i)^2,   grad f(w) = a * (w - t),
// so each check compares the values the shard holds after a stale gradient with the
// values a fresh gradient would have given, reading them with an observer's pull.

#include <boost/test/unit_test.hpp>

#include <actortrain/model/optim/sgd.hpp>

#include "../../actors/src/ps/shard_store.hpp"
#include "partition_state.hpp"

#include <optional>
#include <string>

using namespace actortrain;
using model::matrix;

namespace {

const partition_key key{0, 0};
constexpr double lr = 0.05;  // small steps: consecutive updates alike, as late in training

// The planted problem: curvatures in [0.5, 2], targets in [-1, 1].
struct quadratic {
  matrix a{2, 3}, t{2, 3};
  quadratic() {
    a << 0.5f, 1.0f, 2.0f, 1.5f, 0.75f, 1.25f;
    t << 1.0f, -1.0f, 0.5f, -0.5f, 0.25f, 0.8f;
  }
  matrix grad(const matrix& w) const { return (a.array() * (w.array() - t.array())).matrix(); }
};

struct shard {
  shard_store store;
  uint64_t position = 0;

  explicit shard(staleness_compensation how)
      : store(*model::make_sgd({lr}), shard_store::options{0, nullptr, 16, false, {}, how}) {
    init_request req;
    req.f.coordinator_epoch = 1;
    req.partitions.push_back(testing::start_state(key, "dense/kernel", false, matrix::Zero(2, 3)));
    BOOST_REQUIRE(!store.init(req));
  }

  // A pull of the partition: a training step's, or an observer's (the true values).
  std::pair<matrix, uint64_t> pull(bool training) {
    pull_request r;
    r.f.coordinator_epoch = training ? 1 : 0;
    r.training = training;
    r.partitions.push_back(key);
    pull_reply out;
    auto err = store.pull(r, out);
    BOOST_REQUIRE_MESSAGE(!err, err.what);
    return {*out.values.at(0).value.value, out.values.at(0).version};
  }
  matrix values() { return pull(false).first; }

  void push(const matrix& g, uint64_t read_version) {
    push_request r;
    r.f.coordinator_epoch = 1;
    r.step = step_id{1, 0, ++position};
    r.example_count = 1;
    r.dense.push_back(dense_slice{key, read_version, tensor{matrix(g)}});
    r.digests = {position};
    push_reply out;
    auto err = store.push(r, out);
    BOOST_REQUIRE_MESSAGE(!err, err.what);
    BOOST_REQUIRE(to_string(out.status) == "applied");
  }
};

// Two workers, A and B, after a first fresh step: both read version 1, B pushes first,
// then A's gradient arrives one version late. Returns how far the values after A's push
// are from where a fresh gradient (computed on the values it was applied to) would have
// put them.
double error_of_a_stale_step(staleness_compensation how) {
  quadratic q;
  shard s{how};
  auto [w0, v0] = s.pull(true);
  s.push(q.grad(w0), v0);
  auto [seen_by_a, va] = s.pull(true);
  auto [seen_by_b, vb] = s.pull(true);
  s.push(q.grad(seen_by_b), vb);
  matrix now = s.values();
  matrix fresh = now - static_cast<float>(lr) * q.grad(now);
  s.push(q.grad(seen_by_a), va);
  return (s.values() - fresh).norm();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(staleness_compensation_on_the_shard)

BOOST_AUTO_TEST_CASE(every_method_brings_a_stale_gradients_update_closer_to_the_fresh_one) {
  const double none = error_of_a_stale_step(staleness_compensation::none());
  BOOST_TEST_REQUIRE(none > 1e-3);  // the planted staleness costs something to compensate
  const double lookahead = error_of_a_stale_step(staleness_compensation::lookahead(1));
  const double dc = error_of_a_stale_step(staleness_compensation::dc_asgd(0.1));
  BOOST_TEST_MESSAGE("distance from the fresh update: none " << none << ", lookahead(1) " << lookahead
                                                             << ", dc_asgd(0.1) " << dc);
  BOOST_TEST(lookahead < 0.5 * none);
  BOOST_TEST(dc < none);
}

BOOST_AUTO_TEST_CASE(lookahead_shows_training_pulls_the_extrapolated_values_and_everyone_else_the_values) {
  quadratic q;
  shard s{staleness_compensation::lookahead(2)};
  auto [w0, v0] = s.pull(true);
  BOOST_TEST((w0 == s.values()));  // no update seen yet: nothing to extrapolate
  s.push(q.grad(w0), v0);
  matrix w1 = s.values();
  auto [view, v1] = s.pull(true);
  BOOST_TEST(v1 == v0 + 1);  // the version is the values' own
  matrix expected = w1 + 2.0f * (w1 - w0);
  BOOST_TEST(view.isApprox(expected, 1e-6f));
  BOOST_TEST(!view.isApprox(w1, 1e-3f));
  BOOST_TEST((s.values() == w1));  // observers (and evaluation) read the values
}

BOOST_AUTO_TEST_CASE(lookahead_without_k_extrapolates_by_the_staleness_it_measured) {
  quadratic q;
  shard s{staleness_compensation::lookahead()};
  auto [w, v] = s.pull(true);
  s.push(q.grad(w), v);
  for (int i = 0; i < 10; ++i) {  // every gradient one version late, as with two workers
    matrix g = q.grad(s.values());
    s.push(g, s.pull(false).second - 1);
  }
  matrix before = s.values();
  s.push(q.grad(before), s.pull(false).second - 1);
  matrix now = s.values();
  auto [view, version] = s.pull(true);
  // 11 of its 12 applies were one version late: the mean staleness is 11/12.
  BOOST_TEST(view.isApprox(now + (11.0f / 12.0f) * (now - before), 1e-5f));
}

BOOST_AUTO_TEST_CASE(a_restore_forgets_the_last_update) {
  quadratic q;
  shard s{staleness_compensation::lookahead(1)};
  fence_request f;
  f.f.coordinator_epoch = 1;
  f.id = 1;
  BOOST_REQUIRE(!s.store.keep(f));
  auto [w0, v0] = s.pull(true);
  s.push(q.grad(w0), v0);
  f.id = 2;
  BOOST_REQUIRE(!s.store.restore(f));
  auto [view, v] = s.pull(true);
  BOOST_TEST((view == w0));  // the kept values, not extrapolated from the update undone
  BOOST_TEST(v == v0 + 2);
}

BOOST_AUTO_TEST_CASE(staleness_lr_divides_the_step_by_the_staleness) {
  quadratic q;
  shard s{staleness_compensation::staleness_lr()};
  auto [w0, v0] = s.pull(true);
  s.push(q.grad(w0), v0);                    // fresh
  s.push(q.grad(w0), v0);                    // 1 version late: full step still (tau = 1)
  matrix before = s.values();
  matrix g = q.grad(w0);
  s.push(g, v0);                             // 2 versions late: half the step
  matrix step = before - s.values();
  BOOST_TEST(step.isApprox(static_cast<float>(lr / 2) * g, 1e-6f));
  matrix before2 = s.values();
  s.push(g, v0 + 3);                         // fresh again: the whole step
  BOOST_TEST((before2 - s.values()).isApprox(static_cast<float>(lr) * g, 1e-6f));
}

BOOST_AUTO_TEST_CASE(dc_asgd_compensates_up_to_15_versions_late_and_counts_what_is_older) {
  for (uint64_t late : {15u, 16u}) {
    quadratic q;
    shard s{staleness_compensation::dc_asgd(0.1)};
    auto [w0, v0] = s.pull(true);
    for (uint64_t i = 0; i < late; ++i) s.push(q.grad(s.values()), v0 + i);
    BOOST_TEST(s.store.stats().uncompensated == 0u);
    matrix before = s.values();
    matrix g = q.grad(w0);
    s.push(g, v0);  // `late` versions late
    matrix plain = static_cast<float>(lr) * g;
    if (late == 15) {  // version 0 is still kept: corrected by lambda g*g*(w_now - w0)
      matrix corrected = static_cast<float>(lr) * (g.array() + 0.1f * g.array() * g.array() * (before - w0).array()).matrix();
      BOOST_TEST((before - s.values()).isApprox(corrected, 1e-5f));
      BOOST_TEST(!corrected.isApprox(plain, 1e-3f));
      BOOST_TEST(s.store.stats().uncompensated == 0u);
    } else {  // version 0 is gone: applied as it is, and counted
      BOOST_TEST((before - s.values()).isApprox(plain, 1e-6f));
      BOOST_TEST(s.store.stats().uncompensated == 1u);
    }
  }
}

BOOST_AUTO_TEST_CASE(the_text_forms_read_back_and_bad_ones_are_named) {
  for (const std::string t : {"none", "lookahead", "lookahead(1)", "lookahead(0.5)", "staleness_lr", "dc_asgd(0.04)"})
    BOOST_TEST(staleness_compensation::parse(t).to_string() == t);
  for (const std::string t : {"", "Lookahead", "lookahead()", "lookahead(0)", "lookahead(9)", "lookahead(-1)", "dc_asgd", "dc_asgd(0)",
                              "dc_asgd(x)", "dc_asgd(1e7)", "staleness_lr(2)", "dc_asgd(nan)"}) {
    std::string msg;
    try {
      staleness_compensation::parse(t);
    } catch (const std::invalid_argument& e) {
      msg = e.what();
    }
    BOOST_TEST(msg.find("'" + t + "'") != std::string::npos, "'" << t << "': " << msg);
  }
}

BOOST_AUTO_TEST_SUITE_END()
