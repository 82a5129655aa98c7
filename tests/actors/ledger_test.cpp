// The ledger (actortrain/actors/ps/ledger.hpp) without actors: compaction from its own
// contiguous positions, violations that are never absorbed, its JSON form, and the
// checker deciding exactly-once from ledgers and the dataset's definition alone.

#include <actortrain/actors/ps/ledger.hpp>
#include <actortrain/dataset/all.hpp>

#include <boost/test/unit_test.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>

using namespace actortrain;
namespace ds = actortrain::dataset;

namespace {

// 40 numbered examples in batches of 4, split over the pipelines.
ds::dataset_fn numbers_fn(int64_t n = 40, int64_t batch = 4) {
  model::matrix x(n, 2), y(n, 1);
  for (int64_t i = 0; i < n; ++i) {
    x(i, 0) = static_cast<float>(i);
    x(i, 1) = static_cast<float>(i) / 2;
    y(i, 0) = static_cast<float>(i % 3);
  }
  auto d = ds::from_tensor_slices({x}, y);
  return [d, batch](const ds::input_context& c) {
    return d.shard(c.num_input_pipelines, c.input_pipeline_id).shuffle(100, 5).batch(batch);
  };
}

// Records run `r` into `l` as a correct run would (every step once, with its batch's
// digest), except what `change(pipeline, position, digest)` alters: it returns the
// digest to record, or 0 to leave the step out.
template <class Change>
void record_run(step_ledger& l, const ledger_run& r, Change change) {
  for (int p = 0; p < r.num_pipelines; ++p) {
    auto data = r.fn(ds::input_context{r.num_pipelines, p, 1});
    uint64_t pos = 0;
    for (int e = 0; e < r.epochs; ++e)
      for (auto it = data.iterate(static_cast<uint64_t>(e)); auto b = it->next(); ++pos)
        if (auto d = change(p, pos, ds::element_digest(*b))) l.record(r.run, static_cast<uint32_t>(p), pos, d);
  }
}

step_ledger correct_ledger(const ledger_run& r) {
  step_ledger l;
  record_run(l, r, [](int, uint64_t, uint64_t d) { return d; });
  return l;
}

std::vector<partition_ledger> on_two_partitions(const step_ledger& a, const step_ledger& b) {
  return {partition_ledger{0, "dense/kernel", 0, 2, a.data()}, partition_ledger{1, "dense/bias", 0, 1, b.data()}};
}

bool mentions(const ledger_verdict& v, const std::string& what) {
  return std::any_of(v.violations.begin(), v.violations.end(),
                     [&](const std::string& s) { return s.find(what) != std::string::npos; });
}

ledger_run two_pipelines(uint64_t run = 1, int epochs = 2) {
  ledger_run r;
  r.run = run;
  r.fn = numbers_fn();
  r.num_pipelines = 2;
  r.epochs = epochs;
  return r;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ledger)

BOOST_AUTO_TEST_CASE(compacts_contiguous_positions_into_one_segment) {
  step_ledger l;
  // Out of order, with a gap that is filled last.
  for (uint64_t p : {0, 1, 3, 4, 6, 5, 2}) BOOST_TEST(l.record(1, 0, p, 100 + p));
  BOOST_TEST(l.segments() == 1u);
  BOOST_TEST(l.steps(1) == 7u);
  auto d = l.data();
  BOOST_REQUIRE(d.segments.size() == 1u);
  BOOST_TEST(d.segments[0].begin == 0u);
  BOOST_TEST(d.segments[0].end == 7u);
  uint64_t sum = 0;
  for (uint64_t p = 0; p < 7; ++p) sum += ledger_mix(p, 100 + p);
  BOOST_TEST(d.segments[0].checksum == sum);
  // Other pipelines and runs keep segments of their own.
  l.record(1, 1, 0, 9);
  l.record(2, 0, 0, 9);
  BOOST_TEST(l.segments() == 3u);
  BOOST_TEST(l.total() == 9u);
}

BOOST_AUTO_TEST_CASE(a_second_apply_is_a_violation_never_absorbed) {
  step_ledger l;
  for (uint64_t p = 0; p < 10; ++p) l.record(1, 0, p, p);
  BOOST_TEST(l.holds(1, 0, 4));
  BOOST_TEST(!l.holds(1, 0, 10));
  BOOST_TEST(!l.record(1, 0, 4, 4));  // inside a compacted segment
  BOOST_TEST(!l.record(1, 0, 9, 9));  // its last position
  BOOST_TEST(l.steps(1) == 10u);
  BOOST_REQUIRE(l.violations().size() == 2u);
  BOOST_TEST(l.violations()[0].position == 4u);
  // A restored ledger keeps the violations seen before, once.
  step_ledger restored;
  restored.keep_violations(l.violations());
  restored.keep_violations(l.violations());
  BOOST_TEST(restored.violations().size() == 2u);
}

BOOST_AUTO_TEST_CASE(round_trips_through_json_and_refuses_malformed_ledgers) {
  step_ledger l;
  for (uint64_t p : {0, 1, 2, 7, 8}) l.record(3, 1, p, p * 31);
  l.record(3, 1, 1, 5);
  auto d = ledger_from_json(to_json(l.data()));
  BOOST_TEST(to_json(d) == to_json(l.data()));
  step_ledger again{d};
  BOOST_TEST(again.holds(3, 1, 8));
  BOOST_TEST(again.violations().size() == 1u);
  auto bad = [](const char* text) {
    try {
      ledger_from_json(nlohmann::json::parse(text));
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  BOOST_TEST(bad(R"({"segments": [[1, 0, 5, 5, 0]], "violations": []})").find("begin 5 is not below end 5") !=
             std::string::npos);
  BOOST_TEST(bad(R"({"segments": [[1, 0, 0, 5, 0], [1, 0, 3, 8, 0]], "violations": []})").find("overlaps") !=
             std::string::npos);
  BOOST_TEST(bad(R"({"segments": [[1, 0, -1, 5, 0]], "violations": []})").find("field 2 is not an unsigned integer") !=
             std::string::npos);
  BOOST_TEST(bad(R"({"segments": []})").find("\"violations\"") != std::string::npos);
  std::vector<partition_ledger> ps{{2, "emb/table", 0, 8, l.data()}};
  auto back = ledgers_from_json(ledgers_to_json(ps));
  BOOST_REQUIRE(back.size() == 1u);
  BOOST_TEST(back[0].variable == "emb/table");
  BOOST_TEST(back[0].row_end == 8);
  try {
    ledgers_from_json(nlohmann::json::parse(R"({"format": "actortrain.ledgers", "partitions": [{"shard": 0}]})"));
    BOOST_FAIL("accepted a partition without a variable");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("partition 0") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(a_correct_run_is_exactly_once) {
  auto r = two_pipelines();
  auto l = correct_ledger(r);
  auto v = check_ledgers(on_two_partitions(l, l), {r});
  BOOST_TEST(v.ok(), (v.violations.empty() ? "" : v.violations.front()));
  BOOST_TEST(v.steps[1] == 20u);  // 2 epochs x 2 pipelines x 5 batches
}

BOOST_AUTO_TEST_CASE(finds_a_missing_step_on_the_partition_that_lacks_it) {
  auto r = two_pipelines();
  auto full = correct_ledger(r);
  step_ledger l;
  record_run(l, r, [](int p, uint64_t pos, uint64_t d) { return p == 1 && pos == 7 ? 0 : d; });
  auto v = check_ledgers(on_two_partitions(full, l), {r});
  BOOST_TEST(!v.ok());
  BOOST_TEST(mentions(v, "ps 1 dense/bias[0:1): run 1 pipeline 1: position(s) 7 never applied"));
  BOOST_TEST(!mentions(v, "ps 0"));
  BOOST_TEST(v.steps[1] == 19u);
  // The same ledger is a valid prefix of a run that did not complete.
  r.complete = false;
  BOOST_TEST(check_ledgers(on_two_partitions(full, l), {r}).ok());
}

BOOST_AUTO_TEST_CASE(finds_a_wrong_batch_a_repeated_batch_and_a_foreign_step) {
  auto r = two_pipelines();
  // Pipeline 0's digests by position (10 per pipeline over 2 epochs).
  std::vector<uint64_t> digests(10);
  {
    step_ledger scratch;
    record_run(scratch, r, [&](int p, uint64_t pos, uint64_t d) {
      if (p == 0) digests[pos] = d;
      return d;
    });
  }
  auto check = [&](auto change) {
    step_ledger l;
    record_run(l, r, change);
    return check_ledgers(on_two_partitions(correct_ledger(r), l), {r});
  };
  // Position 3 got epoch 1's first batch (another epoch's).
  auto wrong = check([&](int p, uint64_t pos, uint64_t d) { return p == 0 && pos == 3 ? digests[5] : d; });
  BOOST_TEST(mentions(wrong, "ps 1 dense/bias[0:1): run 1 pipeline 0: positions 0..9 were applied with batches other"));
  // Position 4 got position 3's batch again.
  auto repeated = check([&](int p, uint64_t pos, uint64_t d) { return p == 0 && pos == 4 ? digests[3] : d; });
  BOOST_TEST(mentions(repeated, "positions 0..9 were applied with batches other"));
  // Position 6 lost and a foreign position 10 in its place: the counts agree, the
  // ledger does not.
  step_ledger offset;
  record_run(offset, r, [](int p, uint64_t pos, uint64_t d) { return p == 0 && pos == 6 ? 0 : d; });
  offset.record(1, 0, 10, digests[6]);
  auto foreign = check_ledgers(on_two_partitions(correct_ledger(r), offset), {r});
  BOOST_TEST(mentions(foreign, "position(s) 10..10 applied, but the data defines no batch past position 9"));
  BOOST_TEST(mentions(foreign, "pipeline 0: position(s) 6 never applied"));
  // A step of a run the job never had.
  auto l = correct_ledger(r);
  l.record(7, 0, 0, digests[0]);
  BOOST_TEST(mentions(check_ledgers(on_two_partitions(l, l), {r}), "holds 1 step(s) of run 7, which is not a run of this job"));
}

BOOST_AUTO_TEST_CASE(reports_every_second_apply) {
  auto r = two_pipelines();
  auto l = correct_ledger(r);
  l.record(1, 0, 2, 0);
  auto v = check_ledgers(on_two_partitions(l, correct_ledger(r)), {r});
  BOOST_TEST(mentions(v, "ps 0 dense/kernel[0:2): step (1, 0, 2) applied again although its state held it"));
}

BOOST_AUTO_TEST_CASE(runs_are_checked_apart) {
  auto one = two_pipelines(1, 1), two = two_pipelines(2, 2);
  step_ledger both;
  for (auto* r : {&one, &two}) record_run(both, *r, [](int, uint64_t, uint64_t d) { return d; });
  auto v = check_ledgers(on_two_partitions(both, both), {one, two});
  BOOST_TEST(v.ok(), (v.violations.empty() ? "" : v.violations.front()));
  BOOST_TEST(v.steps[1] == 10u);
  BOOST_TEST(v.steps[2] == 20u);
  // Checking run 2 alone: run 1's steps are foreign unless other runs are allowed.
  BOOST_TEST(!check_ledgers(on_two_partitions(both, both), {two}).ok());
  BOOST_TEST(check_ledgers(on_two_partitions(both, both), {two}, /*other_runs=*/true).ok());
  // Run 2 checked as a run of one epoch: its second epoch is beyond the data.
  two.epochs = 1;
  BOOST_TEST(!check_ledgers(on_two_partitions(both, both), {one, two}).ok());
}

BOOST_AUTO_TEST_CASE(steps_per_epoch_takes_prefixes_of_the_stream) {
  ledger_run r;
  r.run = 4;
  auto base = numbers_fn(12, 4);  // 3 batches per pipeline and pass
  r.fn = [base](const ds::input_context& c) { return base(c).repeat(); };
  r.num_pipelines = 2;
  r.epochs = 2;
  r.steps_per_epoch = 5;
  auto stream = [&](int p, uint64_t n, step_ledger& l) {
    auto it = r.fn(ds::input_context{2, p, 1}).iterate(0);
    for (uint64_t pos = 0; pos < n; ++pos) l.record(4, static_cast<uint32_t>(p), pos, ds::element_digest(*it->next()));
  };
  step_ledger l;
  stream(0, 6, l);
  stream(1, 4, l);
  auto v = check_ledgers(on_two_partitions(l, l), {r});
  BOOST_TEST(v.ok(), (v.violations.empty() ? "" : v.violations.front()));
  step_ledger short_one;
  stream(0, 6, short_one);
  stream(1, 3, short_one);
  BOOST_TEST(mentions(check_ledgers(on_two_partitions(short_one, short_one), {r}),
                      "9 step(s) applied, but 2 epoch(s) of 5 steps make 10"));
  // The partitions disagree on how the steps fell on the pipelines.
  step_ledger other;
  stream(0, 5, other);
  stream(1, 5, other);
  BOOST_TEST(!check_ledgers(on_two_partitions(l, other), {r}).ok());
}

BOOST_AUTO_TEST_CASE(refuses_no_ledgers_and_bad_runs) {
  BOOST_TEST(mentions(check_ledgers({}, {two_pipelines()}), "no ledgers"));
  auto r = two_pipelines();
  r.fn = nullptr;
  BOOST_CHECK_THROW(check_ledgers(on_two_partitions(step_ledger{}, step_ledger{}), {r}), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(coverage_finds_a_missing_a_partial_an_overlapping_and_a_foreign_ledger) {
  auto part = [](const std::string& v, int64_t b, int64_t e) { return partition_ledger{0, v, b, e, {}}; };
  const std::vector<ledger_variable> model = {{"dense/kernel", 10}, {"dense/bias", 1}};
  BOOST_TEST(check_coverage({part("dense/kernel", 0, 4), part("dense/kernel", 4, 10), part("dense/bias", 0, 1)}, model)
               .empty());
  auto has = [](const std::vector<std::string>& v, const std::string& what) {
    return std::any_of(v.begin(), v.end(), [&](const std::string& s) { return s.find(what) != std::string::npos; });
  };
  // A ps task's file forgotten: the bias has no ledger at all.
  BOOST_TEST(has(check_coverage({part("dense/kernel", 0, 10)}, model), "dense/bias: no ledger of any"));
  // A gap, a short end, an overlap, rows past the end, a variable the model lacks.
  BOOST_TEST(has(check_coverage({part("dense/kernel", 0, 4), part("dense/kernel", 6, 10), part("dense/bias", 0, 1)}, model),
                 "no ledger of rows [4:6)"));
  BOOST_TEST(has(check_coverage({part("dense/kernel", 0, 8), part("dense/bias", 0, 1)}, model), "no ledger of rows [8:10)"));
  BOOST_TEST(has(check_coverage({part("dense/kernel", 0, 6), part("dense/kernel", 4, 10), part("dense/bias", 0, 1)}, model),
                 "overlaps"));
  BOOST_TEST(has(check_coverage({part("dense/kernel", 0, 12), part("dense/bias", 0, 1)}, model), "cover 12 rows"));
  BOOST_TEST(has(check_coverage({part("dense/kernel", 0, 10), part("dense/bias", 0, 1), part("emb", 0, 3)}, model),
                 "the model has no variable emb"));
}

BOOST_AUTO_TEST_SUITE_END()
