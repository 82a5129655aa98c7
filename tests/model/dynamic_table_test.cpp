// An embedding table keyed by the raw 64-bit id (model/dynamic_table.hpp): rows created
// at the first training read with values that depend on the id alone, updated exactly as
// a fixed table's rows, admission and eviction with their counts, incremental checkpoints
// restored into another number of tables, and memory close to the floats it holds.

#include <boost/test/unit_test.hpp>

#include <actortrain/dataset/all.hpp>
#include <actortrain/model/all.hpp>
#include <actortrain/model/checkpoint/checkpoint_error.hpp>
#include <actortrain/model/checkpoint/memory_file_system.hpp>
#include <actortrain/model/dynamic_table.hpp>
#include <actortrain/model/optim/adam.hpp>
#include <actortrain/model/optim/adagrad.hpp>
#include <actortrain/model/random.hpp>

#include <fmt/format.h>

#include <map>
#include <set>

using namespace actortrain;
using namespace actortrain::model;

namespace {

constexpr int64_t dim = 4;

dynamic_table_options opts(int64_t chunk_rows = 3) {
  dynamic_table_options o;
  o.dim = dim;
  o.init = uniform(-0.05f, 0.05f);
  o.seed = 7;
  o.chunk_rows = chunk_rows;
  return o;
}

std::vector<float> adam_slots() { return {0.0f, 0.0f}; }

std::vector<float> read(dynamic_table& t, const std::vector<int64_t>& ids, bool training = true) {
  std::vector<float> out(ids.size() * dim);
  t.read(ids.data(), ids.size(), out.data(), training);
  return out;
}

std::vector<float> row_of(const dynamic_table& t, int64_t id) {
  std::vector<float> out(dim);
  BOOST_REQUIRE_MESSAGE(t.find(id, out.data()), "no row for id " << id);
  return out;
}

std::vector<float> initial(int64_t id) {
  matrix m(1, dim);
  uniform(-0.05f, 0.05f).fill(m, dynamic_table::row_seed(7, id));
  return {m.data(), m.data() + dim};
}

// A gradient for `ids` that depends on the step and the id.
std::vector<float> gradient(const std::vector<int64_t>& ids, int step) {
  std::vector<float> g;
  for (auto id : ids)
    for (int64_t k = 0; k < dim; ++k) g.push_back(0.01f * static_cast<float>((id % 7) - 3 + k) + 0.001f * step);
  return g;
}

void apply(dynamic_table& t, const optimizer& opt, const std::vector<int64_t>& ids, int step) {
  auto g = gradient(ids, step);
  t.apply(opt, ids.data(), ids.size(), g.data());
}

// A step with a zero gradient for `ids` (unique): creates their rows (or counts them
// towards admission) and leaves new rows at their initial values (Adam moves nothing
// on a zero gradient when its slots are fresh).
void touch(dynamic_table& t, const std::vector<int64_t>& ids) {
  static const auto adam = make_adam({0.05});
  std::vector<float> zero(ids.size() * static_cast<size_t>(t.dim()), 0.0f);
  t.apply(*adam, ids.data(), ids.size(), zero.data());
}

}  // namespace

BOOST_AUTO_TEST_SUITE(dynamic_table_suite)

BOOST_AUTO_TEST_CASE(an_id_gets_the_same_initial_row_whatever_the_table) {
  const int64_t huge = int64_t{1} << 40;
  dynamic_table a{opts(2), adam_slots()}, b{opts(1000), adam_slots()};
  auto ra = read(a, {5, huge + 3, 12, 5});
  auto rb = read(b, {12, huge + 3});
  BOOST_TEST(a.counts().rows == 0u);  // a read creates nothing
  touch(a, {5, huge + 3, 12});
  touch(b, {12, huge + 3});
  BOOST_TEST(a.counts().rows == 3u);
  BOOST_TEST(a.counts().created == 3u);
  BOOST_TEST(std::vector<float>(ra.begin(), ra.begin() + dim) == initial(5));
  BOOST_TEST(std::vector<float>(ra.begin() + dim, ra.begin() + 2 * dim) == initial(huge + 3));
  BOOST_TEST(std::vector<float>(rb.begin() + dim, rb.end()) == initial(huge + 3));
  BOOST_TEST(row_of(b, 12) == row_of(a, 12));
  BOOST_TEST(initial(5) != initial(6));
}

BOOST_AUTO_TEST_CASE(a_read_creates_nothing_and_training_reads_are_counted) {
  dynamic_table t{opts(), adam_slots()};
  auto r = read(t, {9, 10}, /*training=*/false);
  BOOST_TEST(t.counts().rows == 0u);
  BOOST_TEST(t.counts().unadmitted_reads == 0u);
  BOOST_TEST(std::vector<float>(r.begin(), r.begin() + dim) == initial(9));
  read(t, {9, 10, 9});
  BOOST_TEST(t.counts().rows == 0u);
  BOOST_TEST(t.counts().unadmitted_reads == 3u);
  BOOST_TEST(!t.find(9));
}

// The rows train to the bit as a fixed table's rows under apply_rows, with the step
// count advancing on applies that touch none of them, across chunks of 2 rows.
BOOST_AUTO_TEST_CASE(rows_train_as_a_fixed_tables_rows) {
  for (std::string which : {"adam", "adagrad"}) {
    optimizer_ptr opt = which == "adam" ? make_adam({0.05}) : make_adagrad({0.1});
    dynamic_table t{opts(2), *opt};  // Adagrad's accumulator starts at 0.1
    auto init_slots = opt->make_slots(1);
    // The fixed table: row i is id ids_[i].
    const std::vector<int64_t> ids = {100, 3, 77, 1 << 30, 42};
    matrix fixed(static_cast<Eigen::Index>(ids.size()), dim);
    for (size_t i = 0; i < ids.size(); ++i)
      fixed.row(static_cast<Eigen::Index>(i)) = Eigen::Map<const row_vector>(initial(ids[i]).data(), dim);
    slot_block s = opt->make_slots(static_cast<size_t>(fixed.size()));
    BOOST_TEST(t.num_slots() == init_slots.slots.size());
    read(t, ids);
    const std::vector<std::vector<size_t>> steps = {{0, 1}, {}, {2, 3, 4}, {1}, {}, {0, 4}};
    for (int step = 0; step < static_cast<int>(steps.size()); ++step) {
      std::vector<int64_t> these, rows;
      for (auto i : steps[static_cast<size_t>(step)]) {
        these.push_back(ids[i]);
        rows.push_back(static_cast<int64_t>(i));
      }
      auto g = gradient(these, step);
      opt->apply_rows(fixed.data(), dim, rows.data(), rows.size(), g.data(), s);
      apply(t, *opt, these, step);
    }
    BOOST_TEST(t.iterations() == static_cast<int64_t>(steps.size()));
    for (size_t i = 0; i < ids.size(); ++i) {
      auto want = fixed.row(static_cast<Eigen::Index>(i));
      BOOST_TEST(row_of(t, ids[i]) == std::vector<float>(want.data(), want.data() + dim), which << " id " << ids[i]);
    }
  }
}

// Admission counts the applies with a gradient for the id (a step each), not reads: a
// read repeated, retried or made for a step never applied counts nothing.
BOOST_AUTO_TEST_CASE(an_id_is_admitted_at_its_nth_gradient_and_its_gradients_dropped_before) {
  auto o = opts();
  o.admit_after = 3;
  auto adam = make_adam({0.05});
  dynamic_table t{o, adam_slots()}, fresh{opts(), adam_slots()};
  for (int i = 0; i < 2; ++i) {
    for (int again = 0; again < 3; ++again) read(t, {8, 9});  // reads count nothing
    apply(t, *adam, {8, 9}, i);
  }
  auto c = t.counts();
  BOOST_TEST(c.rows == 0u);
  BOOST_TEST(c.waiting == 2u);
  BOOST_TEST(c.dropped_gradients == 4u);
  BOOST_TEST(c.unadmitted_reads == 12u);
  BOOST_TEST(read(t, {8}) == initial(8));  // the dropped gradients left no trace
  apply(t, *adam, {8}, 2);  // 8's third: admitted, and this gradient applied
  BOOST_TEST(t.counts().rows == 1u);
  BOOST_TEST(t.counts().waiting == 1u);  // 9 still waits
  BOOST_TEST(t.counts().dropped_gradients == 4u);
  // As a row that took only that gradient (on a table whose step count is the same).
  for (int i = 0; i < 2; ++i) apply(fresh, *adam, {}, i);
  apply(fresh, *adam, {8}, 2);
  BOOST_TEST(row_of(t, 8) == row_of(fresh, 8));
  apply(t, *adam, {8, 9}, 3);
  BOOST_TEST(t.counts().rows == 2u);
  BOOST_TEST(t.counts().waiting == 0u);
}

BOOST_AUTO_TEST_CASE(rows_not_updated_for_n_applies_are_evicted_and_come_back_as_new) {
  auto o = opts(2);
  o.evict_after = 4;  // looked for every apply
  auto adam = make_adam({0.05});
  dynamic_table t{o, adam_slots()};
  read(t, {1, 2, 3, 4, 5});
  apply(t, *adam, {1, 2, 3, 4, 5}, 0);
  for (int step = 1; step <= 3; ++step) apply(t, *adam, {2, 4}, step);
  BOOST_TEST(t.counts().rows == 5u);  // 1, 3 and 5 were updated 3 applies ago
  apply(t, *adam, {2, 4}, 4);
  BOOST_TEST(t.counts().rows == 2u);
  BOOST_TEST(t.counts().evicted == 3u);
  BOOST_TEST(t.find(2));
  BOOST_TEST(t.find(4));
  BOOST_TEST(!t.find(1));
  BOOST_TEST(!t.find(3));
  BOOST_TEST(!t.find(5));
  BOOST_TEST(read(t, {3}) == initial(3));  // as new
  apply(t, *adam, {3}, 5);
  BOOST_TEST(t.counts().created == 6u);
  BOOST_TEST(row_of(t, 3) != initial(3));
  // Not updated again, it goes again.
  for (int step = 6; step <= 9; ++step) apply(t, *adam, {2, 4}, step);
  BOOST_TEST(!t.find(3));
  BOOST_TEST(t.counts().evicted == 4u);
}

// Rows spread over chunks, with rows dropped in the middle: the index finds every id
// (probe chains intact after back shifts), compared with a map.
BOOST_AUTO_TEST_CASE(the_index_holds_through_growth_and_removals) {
  auto o = opts(5);
  o.evict_after = 1;
  auto adam = make_adam({0.01});
  dynamic_table t{o, adam_slots()};
  rng g{3};
  std::map<int64_t, bool> present;
  for (int step = 0; step < 300; ++step) {
    std::vector<int64_t> ids;
    for (int j = 0; j < 20; ++j) ids.push_back(static_cast<int64_t>(g.below(400)) * 1000003);
    read(t, ids);
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    // Only half are updated: the others are evicted at this apply.
    std::vector<int64_t> kept;
    for (size_t j = 0; j < ids.size(); j += 2) kept.push_back(ids[j]);
    apply(t, *adam, kept, step);
    for (auto& [id, p] : present) p = false;
    for (auto id : kept) present[id] = true;
  }
  uint64_t want = 0;
  for (auto& [id, p] : present) {
    BOOST_TEST(t.find(id) == p, "id " << id);
    want += p;
  }
  BOOST_TEST(t.counts().rows == want);
}

// A read of many ids split over threads (parts of 32,768 ids) gives what one thread
// reads, every row where its id asked for it, ids without a row at their initial values
// and counted once each.
BOOST_AUTO_TEST_CASE(a_read_split_over_threads_gives_what_one_thread_reads) {
  auto adam = make_adam({0.01});
  dynamic_table t{opts(1024), adam_slots()};
  std::vector<int64_t> held;
  for (int64_t v = 0; v < 50000; ++v) held.push_back(v * 7919 + 3);
  apply(t, *adam, held, 0);
  std::vector<int64_t> ids;
  rng g{5};
  for (int j = 0; j < 150001; ++j) ids.push_back(static_cast<int64_t>(g.below(60000)) * 7919 + 3);  // 1 in 6 without a row
  const auto one = read(t, ids);
  const auto missing = t.counts().unadmitted_reads;
  BOOST_TEST(missing > 0u);
  uint64_t counted = missing;
  for (unsigned threads : {2u, 3u, 8u}) {
    std::vector<float> out(ids.size() * dim, -1.0f);
    t.read(ids.data(), ids.size(), out.data(), true, threads);
    BOOST_TEST((out == one), threads << " threads");
    counted += missing;
    BOOST_TEST(t.counts().unadmitted_reads == counted, threads << " threads");
  }
  // Spot checks against the rows themselves, at both ends of every part.
  std::vector<float> out(ids.size() * dim);
  t.read(ids.data(), ids.size(), out.data(), false, 4);
  for (size_t j : {size_t{0}, size_t{32767}, size_t{32768}, size_t{37500}, size_t{75000}, size_t{150000}}) {
    std::vector<float> want = t.find(ids[j]) ? row_of(t, ids[j]) : initial(ids[j]);
    BOOST_TEST((std::vector<float>(out.begin() + static_cast<long>(j * dim), out.begin() + static_cast<long>((j + 1) * dim)) == want),
               "id " << ids[j] << " at " << j);
  }
}

// What a part of a split read throws reaches the caller once every thread is joined,
// and the table reads on after it.
BOOST_AUTO_TEST_CASE(an_error_in_a_part_of_a_split_read_reaches_the_caller) {
  constexpr int64_t bad = 5;
  auto o = opts(1024);
  o.init.fill = [](matrix& m, uint64_t seed) {
    if (seed == dynamic_table::row_seed(7, bad)) throw std::runtime_error("no initial row for id 5");
    m.setConstant(0.25f);
  };
  auto adam = make_adam({0.01});
  dynamic_table t{o, adam_slots()};
  std::vector<int64_t> held;
  for (int64_t v = 10; v < 70010; ++v) held.push_back(v);
  apply(t, *adam, held, 0);
  std::vector<int64_t> ids = held;
  ids[60000] = bad;  // in the second part
  std::vector<float> out(ids.size() * dim);
  BOOST_CHECK_THROW(t.read(ids.data(), ids.size(), out.data(), true, 2), std::runtime_error);
  ids[60000] = 11;
  t.read(ids.data(), ids.size(), out.data(), true, 2);
  BOOST_TEST((std::vector<float>(out.begin() + 60000 * dim, out.begin() + 60001 * dim) == row_of(t, 11)));
}

BOOST_AUTO_TEST_CASE(incremental_checkpoints_restore_into_another_number_of_tables) {
  auto o = opts(4);
  o.evict_after = 3;
  o.admit_after = 2;
  auto adam = make_adam({0.05});
  dynamic_table t{o, adam_slots()};
  std::vector<int64_t> all;
  for (int64_t i = 0; i < 30; ++i) all.push_back(i * 7919);
  apply(t, *adam, all, 0);  // waiting
  auto with = all;
  with.push_back(5);
  with.push_back(6);
  apply(t, *adam, with, 1);  // all admitted; 5 and 6 wait
  BOOST_CHECK_THROW(t.save(t.iterations()), std::logic_error);  // no log of dropped ids yet
  auto full = t.save();
  const auto base = t.iterations();
  t.log_removed_after(base);
  BOOST_TEST(full.ids.size() == 30u);
  BOOST_TEST(full.waiting.size() == 2u);
  // Some rows change, the rest are evicted.
  std::vector<int64_t> some(all.begin(), all.begin() + 10);
  for (int step = 2; step <= 4; ++step) apply(t, *adam, some, step);
  BOOST_TEST(t.counts().rows == 10u);
  auto inc = t.save(base);
  BOOST_TEST(!inc.full);
  BOOST_TEST(inc.ids.size() == 10u);
  BOOST_TEST(inc.removed.size() == 20u);
  BOOST_TEST(t.save(t.iterations()).ids.empty());  // nothing changed after the last apply
  BOOST_TEST(t.save(t.iterations()).removed.empty());
  BOOST_TEST(t.save(base).ids.size() == 10u);  // saving changes nothing
  BOOST_CHECK_THROW(t.save(base - 1), std::logic_error);  // dropped ids before base forgotten

  // One table, and two that split the ids by parity.
  dynamic_table one{o, adam_slots()}, even{o, adam_slots()}, odd{o, adam_slots()};
  for (auto* s : {&full, &inc}) {
    one.merge(*s);
    even.merge(*s, [](int64_t id) { return id % 2 == 0; });
    odd.merge(*s, [](int64_t id) { return id % 2 != 0; });
  }
  BOOST_TEST(one.counts().rows == 10u);
  BOOST_TEST(even.counts().rows + odd.counts().rows == 10u);
  BOOST_TEST(one.iterations() == t.iterations());
  // 5 and 6 waited 3 steps without a gradient: forgotten in the table saved, and so here.
  BOOST_TEST(t.counts().waiting == 0u);
  BOOST_TEST(one.counts().waiting == 0u);
  BOOST_TEST(even.counts().waiting + odd.counts().waiting == 0u);
  // Restored rows train on exactly as the original's (values and slots, step count).
  for (int step = 5; step <= 6; ++step) {
    apply(t, *adam, some, step);
    apply(one, *adam, some, step);
    std::vector<int64_t> e, d;
    for (auto id : some) (id % 2 == 0 ? e : d).push_back(id);
    apply(even, *adam, e, step);
    apply(odd, *adam, d, step);
  }
  for (auto id : some) {
    BOOST_TEST(row_of(one, id) == row_of(t, id), "id " << id);
    BOOST_TEST(row_of(id % 2 == 0 ? even : odd, id) == row_of(t, id), "id " << id);
  }
  // An evicted id is not restored; a forgotten one starts its admission over.
  BOOST_TEST(!one.find(all[20]));
  apply(one, *adam, {5}, 7);
  BOOST_TEST(!one.find(5));
  apply(one, *adam, {5}, 8);
  BOOST_TEST(one.find(5));
  // A waiting id restored is admitted at its next gradient, as in the table saved.
  dynamic_table w{o, adam_slots()}, w_back{o, adam_slots()};
  touch(w, {9});
  w_back.merge(w.save());
  touch(w_back, {9});
  BOOST_TEST(w_back.find(9));

  auto bad = full;
  bad.values.pop_back();
  BOOST_CHECK_THROW(one.merge(bad), std::invalid_argument);
  dynamic_table wide{[] {
                       auto w = opts();
                       w.dim = dim + 1;
                       return w;
                     }(),
                     adam_slots()};
  BOOST_CHECK_THROW(wide.merge(full), std::invalid_argument);
}

// An id admitted and evicted between two saves starts its admission over after a
// restore, as in the table saved; a copy leaves the next incremental save alone.
BOOST_AUTO_TEST_CASE(admission_survives_a_restore_between_eviction_and_save) {
  auto o = opts();
  o.admit_after = 2;
  o.evict_after = 2;  // looked for every apply
  auto adam = make_adam({0.05});
  dynamic_table t{o, adam_slots()};
  touch(t, {7});  // waiting, one gradient
  auto full = t.save();
  const auto base = t.iterations();
  t.log_removed_after(base);
  BOOST_TEST(full.waiting == (std::vector<waiting_id>{{7, 1, 0}}));  // one gradient, at the first apply
  touch(t, {7});  // admitted
  BOOST_TEST(t.find(7));
  apply(t, *adam, {}, 0);
  BOOST_TEST(t.find(7));
  apply(t, *adam, {}, 1);  // not updated for 2 applies: evicted
  BOOST_TEST(!t.find(7));
  auto inc = t.save(base);
  BOOST_TEST(inc.removed == (std::vector<int64_t>{7}));
  dynamic_table back{o, adam_slots()};
  back.merge(full);
  back.merge(inc);
  touch(back, {7});  // a first gradient again: it waits, as in t
  touch(t, {7});
  BOOST_TEST(back.find(7) == t.find(7));
  BOOST_TEST(!back.find(7));

  // A save changes nothing: one that is never committed costs the next nothing; the log
  // forgets what lies at or before its step; a merge ends it.
  auto e = opts();
  e.evict_after = 2;  // looked for every apply
  dynamic_table u{e, adam_slots()};
  touch(u, {1, 2});
  u.save();
  const auto at = u.iterations();
  u.log_removed_after(at);
  apply(u, *adam, {1}, 0);
  BOOST_TEST(u.save().ids.size() == 2u);
  BOOST_TEST(u.save(at).ids == (std::vector<int64_t>{1}));
  BOOST_TEST(u.save(at).ids == (std::vector<int64_t>{1}));
  apply(u, *adam, {}, 1);  // 2 not updated for 2 applies: evicted
  BOOST_TEST(u.save(at).removed == (std::vector<int64_t>{2}));
  u.log_removed_after(u.iterations());
  BOOST_TEST(u.save(u.iterations()).removed.empty());
  BOOST_CHECK_THROW(u.save(at), std::logic_error);
  dynamic_table r{e, adam_slots()};
  r.log_removed_after(0);
  r.merge(u.save());
  BOOST_CHECK_THROW(r.save(r.iterations()), std::logic_error);  // restored: no past to be incremental to
}

// An id waiting for admission keeps its last step through a snapshot: restored, it is
// forgotten at the step the table without a restore forgets it (not N steps after the
// restore), so admission and eviction together are exact across restores.
BOOST_AUTO_TEST_CASE(a_restored_waiting_id_is_forgotten_when_it_would_have_been_without_the_restore) {
  auto o = opts();
  o.admit_after = 3;
  o.evict_after = 4;  // looked for every apply
  auto adam = make_adam({0.05});
  dynamic_table t{o, adam_slots()};
  touch(t, {9});  // a first gradient (apply 0): waiting
  apply(t, *adam, {}, 0);
  apply(t, *adam, {}, 1);
  auto snap = t.save();
  BOOST_TEST(snap.waiting == (std::vector<waiting_id>{{9, 1, 0}}));
  dynamic_table back{o, adam_slots()};
  back.merge(snap);
  BOOST_TEST(back.counts().waiting == 1u);
  for (int s = 2; s < 10; ++s) {
    apply(t, *adam, {}, s);
    apply(back, *adam, {}, s);
    BOOST_TEST(back.counts().waiting == t.counts().waiting, "step " << t.iterations());
  }
  BOOST_TEST(t.counts().waiting == 0u);
  // The count too: two more gradients admit it in both.
  dynamic_table u{o, adam_slots()};
  touch(u, {9});
  dynamic_table v{o, adam_slots()};
  v.merge(u.save());
  for (auto* x : {&u, &v}) {
    touch(*x, {9});
    BOOST_TEST(!x->find(9));
    touch(*x, {9});
    BOOST_TEST(x->find(9));
  }
}

// Evictions give back what the rows held: chunks, the index, and nothing kept for
// ids dropped when no save asked for them; ids that wait too long are forgotten.
BOOST_AUTO_TEST_CASE(evictions_give_memory_back) {
  auto o = opts(64);
  o.evict_after = 2;
  o.admit_after = 2;
  auto adam = make_adam({0.05});
  dynamic_table t{o, adam_slots()};
  std::vector<int64_t> ids(5000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i) * 31;
  touch(t, ids);  // waiting
  auto with = ids;
  with.insert(with.end(), {1, 2, 3});
  touch(t, with);  // admitted; 1, 2 and 3 wait
  const auto full = t.bytes();
  BOOST_TEST(t.counts().rows == 5000u);
  BOOST_TEST(t.counts().waiting == 3u);
  for (int step = 0; step < 3; ++step) apply(t, *adam, {}, step);
  BOOST_TEST(t.counts().rows == 0u);
  BOOST_TEST(t.counts().evicted == 5000u);
  BOOST_TEST(t.counts().waiting == 0u);
  BOOST_TEST(t.bytes() < full / 20, "bytes " << t.bytes() << " after " << full);
}

BOOST_AUTO_TEST_CASE(repeated_ids_in_an_apply_and_bad_options_are_refused) {
  auto adam = make_adam({0.05});
  dynamic_table t{opts(), adam_slots()};
  touch(t, {1});
  std::vector<int64_t> ids = {1, 1};
  std::vector<float> g(2 * dim, 0.1f);
  BOOST_CHECK_THROW(t.apply(*adam, ids.data(), ids.size(), g.data()), std::invalid_argument);
  BOOST_TEST(row_of(t, 1) == initial(1));
  auto o = opts();
  o.dim = 0;
  BOOST_CHECK_THROW((dynamic_table{o, {}}), std::invalid_argument);
  o = opts(0);
  BOOST_CHECK_THROW((dynamic_table{o, {}}), std::invalid_argument);
  o = opts();
  o.init = {};
  BOOST_CHECK_THROW((dynamic_table{o, {}}), std::invalid_argument);
}

// 200,000 rows of width 16 with Adam's two slots: the table holds at most 1.3 times the
// floats of its rows and slots (chunks of 16,384 rows, the index, per-row bookkeeping).
BOOST_AUTO_TEST_CASE(memory_is_close_to_the_floats_held) {
  dynamic_table_options o;
  o.dim = 16;
  o.init = uniform(-0.05f, 0.05f);
  dynamic_table t{o, adam_slots()};
  std::vector<int64_t> ids(1000);
  std::vector<float> out(ids.size() * 16);
  rng g{11};
  const auto adam16 = make_adam({0.05});
  const std::vector<float> zero16(ids.size() * 16, 0.0f);
  for (int b = 0; b < 200; ++b) {
    for (auto& id : ids) id = static_cast<int64_t>(g.next() >> 20);  // 44-bit ids
    std::sort(ids.begin(), ids.end());
    const auto end = std::unique(ids.begin(), ids.end());
    t.apply(*adam16, ids.data(), static_cast<size_t>(end - ids.begin()), zero16.data());
  }
  BOOST_TEST(t.counts().rows >= 199000u);
  const double ratio = static_cast<double>(t.bytes()) / static_cast<double>(t.payload_bytes());
  BOOST_TEST(ratio < 1.3, "bytes " << t.bytes() << " for " << t.payload_bytes() << " of floats: " << ratio);
  BOOST_TEST(ratio > 1.0);
  // A small table pays for its rows, not for a whole chunk of 16,384 (its first chunk
  // grows by doubling), and its rows stay where they were as it grows.
  for (int64_t n : {1, 100, 1000, 20000}) {
    dynamic_table small{o, adam_slots()};
    std::vector<int64_t> some;
    for (int64_t id = 0; id < n; ++id) some.push_back(id * 7919);
    static const auto adam = make_adam({0.05});
    const std::vector<float> zero(37 * 16, 0.0f);
    for (size_t at = 0; at < some.size(); at += 37)
      small.apply(*adam, some.data() + at, std::min<size_t>(37, some.size() - at), zero.data());
    BOOST_TEST(small.counts().rows == static_cast<uint64_t>(n));
    const double r = static_cast<double>(small.bytes()) / static_cast<double>(small.payload_bytes());
    BOOST_TEST(r < (n < 100 ? 200.0 : 2.6), n << " rows: " << r << " times their floats");
    std::vector<float> row(16);
    for (auto id : {some.front(), some[static_cast<size_t>(n / 2)], some.back()}) {
      BOOST_TEST(small.find(id, row.data()), "id " << id);
      matrix want(1, 16);
      o.init.fill(want, dynamic_table::row_seed(o.seed, id));
      BOOST_TEST(row == std::vector<float>(want.data(), want.data() + 16), "id " << id);
    }
  }
}

// ---- the local trainer with a dynamic table (layers::dynamic_embedding) ----------------

namespace {

// Three ids in [0, 40) and two dense features per example; y = the ids' planted weights
// summed + x0 - x1.
struct planted_data {
  matrix ids, dense, y;
  explicit planted_data(int64_t n) : ids(n, 3), dense(n, 2), y(n, 1) {
    rng g{9};
    std::vector<float> weight;
    for (int k = 0; k < 40; ++k) weight.push_back(2 * g.uniform() - 1);
    std::vector<float> draws;  // drawn first: GCC 12's vectorizer fails on the fused loop
    for (int64_t k = 0; k < n * 8; ++k) draws.push_back(g.uniform());
    size_t at = 0;
    for (Eigen::Index r = 0; r < n; ++r) {
      float t = 0;
      for (Eigen::Index j = 0; j < 3; ++j, at += 2) {
        auto id = static_cast<int64_t>(40.0 * draws[at] * draws[at + 1]);
        ids(r, j) = static_cast<float>(id);
        t += weight[static_cast<size_t>(id)];
      }
      dense(r, 0) = 2 * draws[at++] - 1;
      dense(r, 1) = 2 * draws[at++] - 1;
      y(r, 0) = t + dense(r, 0) - dense(r, 1);
    }
  }
};

model::model tower(layer_ptr table) {
  model::graph g;
  auto ids = g.input(3, "ids");
  auto dense = g.input(2, "dense");
  auto e = g.apply(std::move(table), ids);
  auto h = g.apply(layers::concatenate(), {e, dense});
  auto out = g.apply(layers::dense(1), g.apply(layers::dense(8, layers::activation::tanh), h));
  return model::model::functional(g, {ids, dense}, out);
}

}  // namespace

// A fixed table whose rows start where the dynamic table's rows start trains to the same
// values, to the bit: same rows, same dense variables, same evaluation and predictions.
BOOST_AUTO_TEST_CASE(a_trainer_with_a_dynamic_table_trains_as_with_a_fixed_one_from_the_same_rows) {
  planted_data d{256};
  const uint64_t seed = 5;
  trainer dyn{tower(layers::dynamic_embedding(4, layers::combiner::sum)), make_adam({0.02}), mean_squared_error(), seed};
  // 1001 rows: id 1000, which the data never holds, reads its initial row in predict.
  trainer fixed{tower(layers::embedding(1001, 4, layers::combiner::sum)), make_adam({0.02}), mean_squared_error(), seed};
  const auto name = "embedding/embeddings";
  const auto v = fixed.structure().find_variable(name);
  BOOST_REQUIRE(v >= 0);
  BOOST_TEST(dyn.structure().variables()[static_cast<size_t>(v)].dynamic);
  for (int64_t id = 0; id <= 1000; ++id) {
    matrix row(1, 4);
    uniform(-0.05f, 0.05f).fill(row, dynamic_table::row_seed(variable_seed(seed, static_cast<size_t>(v)), id));
    fixed.parameters()[v].row(id) = row;
  }
  fit_options o;
  o.epochs = 3;
  o.batch_size = 16;
  o.verbose = 0;
  auto hd = dyn.fit(std::vector<matrix>{d.ids, d.dense}, d.y, o);
  auto hf = fixed.fit(std::vector<matrix>{d.ids, d.dense}, d.y, o);
  BOOST_TEST(hd["loss"] == hf["loss"]);
  BOOST_TEST(hd["loss"].back() < hd["loss"].front() / 2);
  const auto& table = dyn.table(name);
  BOOST_TEST(table.iterations() == fixed.steps());
  uint64_t seen = 0;
  for (int64_t id = 0; id < 40; ++id) {
    std::vector<float> row(4);
    if (!table.find(id, row.data())) continue;
    ++seen;
    auto want = fixed.variable(name).row(id);
    BOOST_TEST(row == std::vector<float>(want.data(), want.data() + 4), "id " << id);
  }
  // Every id the data holds has a row, and no other.
  std::set<float> distinct(d.ids.data(), d.ids.data() + d.ids.size());
  BOOST_TEST(seen == distinct.size());
  BOOST_TEST(table.counts().rows == distinct.size());
  for (const auto& var : {"dense/kernel", "dense/bias", "dense_1/kernel"})
    BOOST_TEST((dyn.variable(var).array() == fixed.variable(var).array()).all(), var);
  BOOST_TEST(dyn.evaluate(std::vector<matrix>{d.ids, d.dense}, d.y) == fixed.evaluate(std::vector<matrix>{d.ids, d.dense}, d.y));
  matrix unseen = d.ids;
  unseen(0, 0) = 1000;  // an id without a row reads its initial values and creates nothing
  auto pd = dyn.predict(std::vector<matrix>{unseen, d.dense});
  BOOST_TEST(table.counts().rows == distinct.size());
  BOOST_TEST((pd.array() == fixed.predict(std::vector<matrix>{unseen, d.dense}).array()).all());
  // Between steps the trainer's parameters hold no rows of the table (a batch's rows
  // mean nothing past its step).
  BOOST_TEST(dyn.parameters()[v].rows() == 0);
}

// The data of planted_data with its ids given as 64-bit ids: each id i as i itself, or
// as the id `big(i)`, past 2^24 where no float holds it.
int64_t big(int64_t i) { return (int64_t{1} << 40) * (i + 1) + 7 * i; }

dataset::dataset as_ids(const planted_data& d, bool make_big) {
  dataset::element all;
  all.features = {matrix(d.ids.rows(), 0), d.dense};
  all.ids.resize(1);
  all.ids[0] = d.ids.cast<int64_t>();
  if (make_big) all.ids[0] = all.ids[0].unaryExpr([](int64_t i) { return big(i); });
  all.labels = d.y;
  return dataset::from_tensor_slices(std::move(all)).batch(16);
}

BOOST_AUTO_TEST_CASE(a_dynamic_table_takes_64_bit_ids_that_floats_would_alias) {
  planted_data d{256};
  const uint64_t seed = 5;
  fit_options o;
  o.epochs = 3;
  o.verbose = 0;
  o.shuffle = false;  // fit(x, y) as the dataset's batches
  auto make = [&](layer_ptr table) {
    return trainer{tower(std::move(table)), make_adam({0.02}), mean_squared_error(), seed};
  };
  // The same ids as floats and as int64: the same training, to the bit.
  auto floats = make(layers::dynamic_embedding(4, layers::combiner::sum));
  auto ints = make(layers::dynamic_embedding(4, layers::combiner::sum));
  o.batch_size = 16;
  auto hf = floats.fit(std::vector<matrix>{d.ids, d.dense}, d.y, o);
  auto hi = ints.fit(as_ids(d, false), o);
  BOOST_TEST(hf["loss"] == hi["loss"]);
  // Ids past 2^24: a row each, found by its id, trained as well as small ids train.
  auto large = make(layers::dynamic_embedding(4, layers::combiner::sum));
  auto hl = large.fit(as_ids(d, true), o);
  BOOST_TEST(hl["loss"].back() < hl["loss"].front() / 2);
  std::set<float> distinct(d.ids.data(), d.ids.data() + d.ids.size());
  const auto& table = large.table("embedding/embeddings");
  BOOST_TEST(table.counts().rows == distinct.size());
  std::vector<float> row(4);
  for (auto id : distinct) BOOST_TEST(table.find(big(static_cast<int64_t>(id)), row.data()), "id " << big(static_cast<int64_t>(id)));
  BOOST_TEST(!table.find(static_cast<int64_t>(*distinct.begin()), row.data()));
  auto r = large.evaluate(as_ids(d, true));
  BOOST_TEST(r["loss"] < hl["loss"].front() / 2);
  BOOST_TEST(large.predict(as_ids(d, true)).rows() == 256);
  // A fixed table reads floats, which would alias such ids: it names the first one and
  // where it is.
  auto fixed = make(layers::embedding(64, 4, layers::combiner::sum));
  std::string msg;
  try {
    fixed.fit(as_ids(d, true), o);
  } catch (const std::invalid_argument& e) {
    msg = e.what();
  }
  BOOST_TEST(msg.find(fmt::format("input 0 row 0 column 0: id {} is at least 2^24", big(static_cast<int64_t>(d.ids(0, 0))))) !=
               std::string::npos,
             msg);
  // Small int64 ids read by a fixed table are its rows as floats would be.
  auto fixed_floats = make(layers::embedding(64, 4, layers::combiner::sum));
  auto fixed_ints = make(layers::embedding(64, 4, layers::combiner::sum));
  BOOST_TEST(fixed_floats.fit(std::vector<matrix>{d.ids, d.dense}, d.y, o)["loss"] == fixed_ints.fit(as_ids(d, false), o)["loss"]);
}

BOOST_AUTO_TEST_CASE(a_trainer_admits_rare_ids_late_and_reports_what_it_cannot_do) {
  planted_data d{256};
  trainer t{tower(layers::dynamic_embedding(4, layers::combiner::sum, uniform(-0.05f, 0.05f), {3, 0})), make_adam({0.02}),
            mean_squared_error(), 1};
  BOOST_TEST(t.structure().describe().find("[dynamic x 4] sparse admit_after=3 evict_after=0") != std::string::npos,
             t.structure().describe());
  fit_options o;
  o.batch_size = 16;
  o.verbose = 0;
  t.fit(std::vector<matrix>{d.ids, d.dense}, d.y, o);
  auto c = t.table("embedding/embeddings").counts();
  std::set<float> distinct(d.ids.data(), d.ids.data() + d.ids.size());
  BOOST_TEST(c.rows + c.waiting == distinct.size());
  BOOST_TEST(c.waiting > 0u);  // the rare ids, read fewer than 3 times
  BOOST_TEST(c.dropped_gradients > 0u);
  BOOST_CHECK_THROW(t.variable("embedding/embeddings"), std::out_of_range);
  BOOST_CHECK_THROW(t.table("dense/kernel"), std::out_of_range);
  // On ps shards: a partition on every shard, ids spread over them by their hash.
  auto pl = place(t.structure().variables(), nullptr, 3);
  const auto& vp = *pl.find("embedding/embeddings");
  BOOST_TEST(vp.dynamic);
  BOOST_REQUIRE(vp.partitions.size() == 3u);
  std::vector<int> per_shard(3);
  for (int64_t id = 0; id < 3000; ++id) {
    auto loc = pl.locate_row(vp.variable, id);
    BOOST_TEST(loc.local_row == id);
    BOOST_TEST(loc.ps == dynamic_owner(id, 3));
    ++per_shard[static_cast<size_t>(loc.ps)];
  }
  for (int n : per_shard) BOOST_TEST((n > 900 && n < 1100), n);
  BOOST_TEST(pl.locate_row(vp.variable, int64_t{1} << 40).ps == dynamic_owner(int64_t{1} << 40, 3));
  BOOST_CHECK_THROW(pl.locate_row(vp.variable, -1), std::out_of_range);
  BOOST_CHECK_THROW(layers::dynamic_embedding(4, layers::combiner::sum, glorot_uniform()), std::invalid_argument);
  // A table whose ids a dense layer reads too cannot be computed on its batch's rows.
  model::graph g;
  auto ids = g.input(3, "ids");
  auto e = g.apply(layers::dynamic_embedding(4, layers::combiner::sum), ids);
  auto out = g.apply(layers::dense(1), g.apply(layers::concatenate(), {e, g.apply(layers::dense(2), ids)}));
  try {
    trainer bad{model::model::functional(g, {ids}, out), make_adam({0.02}), mean_squared_error(), 1};
    BOOST_FAIL("the trainer took a table it cannot renumber");
  } catch (const std::invalid_argument& err) {
    BOOST_TEST(std::string(err.what()).find("must be applied straight to model inputs") != std::string::npos, err.what());
  }
}

// A trainer's dynamic table in a checkpoint: written and read back, restored into a new
// trainer that then trains exactly as the one that never stopped; cut into 3 partitions
// by the ids' owners; a changed ids file is refused by its CRC.
BOOST_AUTO_TEST_CASE(a_trainer_checkpoints_its_dynamic_table_and_trains_on_after_a_restore) {
  planted_data d{256};
  auto make = [] {
    return trainer{tower(layers::dynamic_embedding(4, layers::combiner::sum, uniform(-0.05f, 0.05f), {2, 40})),
                   make_adam({0.02}), mean_squared_error(), 1};
  };
  auto a = make();
  fit_options o;
  o.batch_size = 16;
  o.verbose = 0;
  o.shuffle = false;
  a.fit(std::vector<matrix>{d.ids, d.dense}, d.y, o);
  memory_file_system fs;
  auto dir = write_checkpoint(fs, "/ck", a.checkpoint());
  auto saved = read_checkpoint(fs, dir);
  const auto& name = std::string("embedding/embeddings");
  auto v = std::find_if(saved.variables.begin(), saved.variables.end(), [&](auto& x) { return x.name == name; });
  BOOST_REQUIRE(v != saved.variables.end());
  BOOST_TEST(v->dynamic);
  BOOST_TEST(v->partitions.at(0).ids.size() == a.table(name).counts().rows);
  BOOST_TEST(v->partitions.at(0).waiting.size() == a.table(name).counts().waiting);
  // Each waiting id with its count and last step, as the table holds it.
  BOOST_TEST((v->partitions.at(0).waiting == a.table(name).save().waiting));
  BOOST_TEST(std::any_of(v->partitions.at(0).waiting.begin(), v->partitions.at(0).waiting.end(),
                         [](const waiting_id& w) { return w.last > 0; }));
  auto b = make();
  b.restore(saved);
  BOOST_TEST(b.table(name).counts().rows == a.table(name).counts().rows);
  a.fit(std::vector<matrix>{d.ids, d.dense}, d.y, o);
  b.fit(std::vector<matrix>{d.ids, d.dense}, d.y, o);
  std::set<float> distinct(d.ids.data(), d.ids.data() + d.ids.size());
  size_t compared = 0;
  for (float f : distinct) {
    matrix ra(1, 4), rb(1, 4);
    bool ha = a.table(name).find(static_cast<int64_t>(f), ra.data());
    BOOST_TEST(ha == b.table(name).find(static_cast<int64_t>(f), rb.data()));
    if (ha) BOOST_TEST((ra.array() == rb.array()).all(), "id " << f);
    compared += ha;
  }
  BOOST_TEST(compared > 10u);
  for (size_t k = 0; k < saved.variables.size(); ++k)
    if (!saved.variables[k].dynamic)
      BOOST_TEST((a.parameters()[static_cast<variable_id>(k)].array() ==
                  b.parameters()[static_cast<variable_id>(k)].array()).all());
  // Three shards' partitions: each id with its owner, none lost.
  auto three = repartition(saved, place(a.structure().variables(), nullptr, 3));
  auto t = std::find_if(three.variables.begin(), three.variables.end(), [&](auto& x) { return x.name == name; });
  size_t rows = 0;
  for (size_t k = 0; k < 3; ++k) {
    for (auto id : t->partitions[k].ids) BOOST_TEST(dynamic_owner(id, 3) == static_cast<int>(k));
    rows += t->partitions[k].ids.size();
    BOOST_TEST(t->partitions[k].row_begin == static_cast<int64_t>(k));
  }
  BOOST_TEST(rows == v->partitions.at(0).ids.size());
  auto back = repartition(three, place(a.structure().variables(), nullptr, 1));
  auto again = make(), ref = make();
  again.restore(back);
  ref.restore(saved);
  BOOST_TEST(again.table(name).counts().rows == ref.table(name).counts().rows);
  BOOST_TEST(again.table(name).counts().waiting == ref.table(name).counts().waiting);
  for (float f : distinct) {
    matrix ra(1, 4), rb(1, 4);
    bool ha = again.table(name).find(static_cast<int64_t>(f), ra.data());
    BOOST_TEST(ha == ref.table(name).find(static_cast<int64_t>(f), rb.data()));
    if (ha) BOOST_TEST((ra.array() == rb.array()).all(), "id " << f);
  }
  // A changed byte in the ids file is refused, naming the file.
  std::string bytes;
  BOOST_REQUIRE(fs.read_file(dir + "/embedding.embeddings.part0.ids.npy", bytes).ok());
  bytes.back() ^= 1;
  BOOST_REQUIRE(fs.write_file(dir + "/embedding.embeddings.part0.ids.npy", bytes).ok());
  try {
    read_checkpoint(fs, dir);
    BOOST_FAIL("a changed ids file was read");
  } catch (const checkpoint_error& e) {
    BOOST_TEST(std::string(e.what()).find("part0.ids.npy") != std::string::npos, e.what());
  }
}

// Checkpoints of a table that keeps changing (rows created, trained and evicted, ids
// waiting for admission), written as a ps shard writes them: whole every fifth, the
// others increments over the one before. Each reads back as the table's every row at its
// step (compared by id with save(), not with what was written); pruning keeps the chain
// a kept checkpoint needs; an increment whose base is missing, replaced or of another
// partition count is refused, naming it.
BOOST_AUTO_TEST_CASE(increments_read_back_as_the_whole_table_at_their_step) {
  auto o = opts(5);
  o.admit_after = 2;
  o.evict_after = 8;
  auto adam = make_adam({0.05});
  const auto names = adam->slot_names();
  dynamic_table t{o, adam_slots()};
  memory_file_system fs;
  const std::string root = "/ckpt";
  auto dir = [&](int64_t step) { return join_path(root, checkpoint_dir_name(step)); };
  auto one_partition = [&](int64_t step, partition_data p) {
    checkpoint_data d;
    d.step = step;
    p.row_begin = 0;
    p.row_end = 1;
    d.variables.push_back(variable_data{"emb", shape2{0, dim}, true, {std::move(p)}});
    return d;
  };
  // A partition as a map: id -> values, slots and last update; and its waiting ids.
  using row = std::tuple<std::vector<float>, std::vector<float>, std::vector<float>, int64_t>;
  auto rows_of = [&](const partition_data& p) {
    std::map<int64_t, row> out;
    for (size_t j = 0; j < p.ids.size(); ++j) {
      auto r = static_cast<Eigen::Index>(j);
      auto vec = [&](const matrix& m) { return std::vector<float>(m.row(r).data(), m.row(r).data() + dim); };
      out[p.ids[j]] = row{vec(p.values), vec(p.slots.at(names[0])), vec(p.slots.at(names[1])), p.last_update[j]};
    }
    return out;
  };
  rng g{5};
  int step = 0;
  int64_t prev = -1, prev_iterations = -1;
  size_t increments = 0, removed = 0, smaller = 0;
  for (int64_t ck = 1; ck <= 10; ++ck) {
    for (int s = 0; s < 5; ++s) {
      std::set<int64_t> ids;
      for (int j = 0; j < 9; ++j) ids.insert(static_cast<int64_t>(g.below(70)) * 1000003 + (int64_t{1} << 40));
      apply(t, *adam, {ids.begin(), ids.end()}, step++);
    }
    const int64_t at = ck * 5;
    const bool whole = (ck - 1) % 5 == 0;  // 5 and 30
    auto snap = whole ? t.save() : t.save(prev_iterations);
    auto p = table_partition(snap, names);
    p.base = whole ? -1 : prev;
    if (!whole) {
      ++increments;
      removed += p.removed.size();
      smaller += snap.ids.size() < t.counts().rows;
    }
    write_checkpoint(fs, root, one_partition(at, std::move(p)));
    prev = at;
    prev_iterations = t.iterations();
    t.log_removed_after(prev_iterations);
    // Read back whole, as the table holds it now.
    auto back = read_checkpoint(fs, dir(at));
    const auto& bp = back.variables.at(0).partitions.at(0);
    const auto want = table_partition(t.save(), names);
    BOOST_TEST(bp.base == -1);
    BOOST_TEST(bp.iterations == t.iterations());
    BOOST_TEST((rows_of(bp) == rows_of(want)), "checkpoint " << at);
    BOOST_TEST((bp.waiting == want.waiting), "checkpoint " << at);
    BOOST_TEST(read_manifest(fs, dir(at)).at("format_version").get<int>() == (whole ? 1 : 2));
  }
  BOOST_TEST(increments == 8u);
  BOOST_TEST(removed > 0u);       // evictions travelled as removed ids
  BOOST_TEST(smaller == increments);  // and each increment held fewer rows than the table
  BOOST_TEST(t.counts().evicted > 0u);
  BOOST_TEST(t.counts().waiting > 0u);

  // The newest (50) is an increment over 45, an increment over 40, ... back to 30, whole.
  auto listed = list_checkpoints(fs, root);
  BOOST_TEST(listed.back().bases == (std::vector<int64_t>{45}));
  BOOST_TEST(listed.front().bases.empty());
  prune_checkpoints(fs, root, 1);
  std::vector<int64_t> kept;
  for (const auto& c : list_checkpoints(fs, root)) kept.push_back(c.step);
  BOOST_TEST(kept == (std::vector<int64_t>{30, 35, 40, 45, 50}));
  BOOST_TEST((rows_of(read_checkpoint(fs, dir(50)).variables[0].partitions[0]) ==
              rows_of(table_partition(t.save(), names))));

  // A base replaced by another state of its step (a run rolled back past it that
  // checkpoints the step again): the increments over it are refused.
  remove_checkpoint(fs, root, dir(40));
  auto other = table_partition(t.save(), names);
  other.values(0, 0) += 1.0f;
  other.iterations = 30;
  for (auto& u : other.last_update) u = std::min<int64_t>(u, 30);
  for (auto& w : other.waiting) w.last = std::min<int64_t>(w.last, 30);
  write_checkpoint(fs, root, one_partition(40, other));
  try {
    read_checkpoint(fs, dir(50));
    BOOST_ERROR("an increment over a replaced base was read");
  } catch (const checkpoint_error& e) {
    BOOST_TEST(std::string(e.what()).find("replaced since") != std::string::npos, e.what());
    BOOST_TEST(std::string(e.what()).find("step 40") != std::string::npos, e.what());
  }
  // No base, or a base of another partition count: refused when written.
  auto inc = table_partition(t.save(t.iterations()), names);
  inc.base = 17;
  try {
    write_checkpoint(fs, root, one_partition(55, inc));
    BOOST_ERROR("an increment over a missing checkpoint was written");
  } catch (const checkpoint_error& e) {
    BOOST_TEST(std::string(e.what()).find("step 17, which cannot be read") != std::string::npos, e.what());
  }
  BOOST_TEST(!fs.exists(dir(55)));
  {
    checkpoint_data two;
    two.step = 60;
    variable_data v{"emb", shape2{0, dim}, true, {}};
    for (int k = 0; k < 2; ++k) {
      partition_data p;
      p.row_begin = k;
      p.row_end = k + 1;
      p.values = matrix(0, dim);
      for (auto& n : names) p.slots[n] = matrix(0, dim);
      p.base = 50;
      v.partitions.push_back(p);
    }
    two.variables.push_back(v);
    try {
      write_checkpoint(fs, root, two);
      BOOST_ERROR("an increment over another partition count was written");
    } catch (const checkpoint_error& e) {
      BOOST_TEST(std::string(e.what()).find("in 1 partitions, not 2") != std::string::npos, e.what());
    }
  }
}

// A base whose manifest was tampered with: the increment over it is refused with a
// checkpoint_error (read and write), never read past.
BOOST_AUTO_TEST_CASE(an_increment_over_a_malformed_base_is_refused) {
  auto adam = make_adam({0.05});
  const auto names = adam->slot_names();
  dynamic_table t{opts(), adam_slots()};
  memory_file_system fs;
  // Checkpoint `step`, an increment over checkpoint `base` (taken at apply `since`).
  auto write = [&](int64_t step, int64_t base, int64_t since) {
    auto snap = base < 0 ? t.save() : t.save(since);
    auto p = table_partition(snap, names);
    p.base = base;
    p.row_begin = 0;
    p.row_end = 1;
    checkpoint_data d;
    d.step = step;
    d.variables.push_back(variable_data{"emb", shape2{0, dim}, true, {std::move(p)}});
    write_checkpoint(fs, "/ck", d);
  };
  touch(t, {1, 2});
  write(10, -1, -1);
  t.log_removed_after(t.iterations());
  const auto at = t.iterations();
  touch(t, {2, 3});
  write(20, 10, at);
  // ckpt-10's variable loses its partitions.
  const auto manifest = join_path(join_path("/ck", checkpoint_dir_name(10)), "manifest.json");
  std::string text;
  BOOST_REQUIRE(fs.read_file(manifest, text).ok());
  auto j = nlohmann::json::parse(text);
  j["variables"][0].erase("partitions");
  BOOST_REQUIRE(fs.write_file(manifest, j.dump()).ok());
  BOOST_CHECK_THROW(read_checkpoint(fs, join_path("/ck", checkpoint_dir_name(20))), checkpoint_error);
  try {
    write(30, 10, at);
    BOOST_ERROR("an increment over a base without partitions was written");
  } catch (const checkpoint_error& e) {
    BOOST_TEST(std::string(e.what()).find("holds it in 0 partitions, not 1") != std::string::npos, e.what());
  }
  j["variables"][0]["dynamic"] = "yes";
  BOOST_REQUIRE(fs.write_file(manifest, j.dump()).ok());
  BOOST_CHECK_THROW(write(30, 10, at), checkpoint_error);
}

BOOST_AUTO_TEST_CASE(an_increment_puts_its_rows_over_the_base) {
  partition_data base, inc;
  auto rows = [](std::vector<int64_t> ids, float v) {
    partition_data p;
    p.ids = ids;
    p.last_update.assign(ids.size(), 1);
    p.values = matrix::Constant(static_cast<Eigen::Index>(ids.size()), 2, v);
    p.slots["m"] = p.values * 2.0f;
    return p;
  };
  base = rows({1, 2, 3, 4}, 1.0f);
  inc = rows({3, 5}, 7.0f);
  inc.base = 0;
  inc.removed = {2, 3, 9};  // 3 dropped, then created again: the increment's row
  inc.iterations = 4;
  inc.waiting = {{6, 1, 3}};
  apply_increment(base, inc);
  BOOST_TEST(base.ids == (std::vector<int64_t>{1, 3, 4, 5}));
  BOOST_TEST(base.values(0, 0) == 1.0f);
  BOOST_TEST(base.values(1, 0) == 7.0f);
  BOOST_TEST(base.slots.at("m")(3, 1) == 14.0f);
  BOOST_TEST(base.iterations == 4);
  BOOST_TEST(base.base == -1);
  BOOST_TEST((base.waiting == std::vector<waiting_id>{{6, 1, 3}}));
  auto bad = rows({8}, 0.0f);
  bad.base = 0;
  bad.waiting = {{1, 1, 0}};  // waiting, yet it has a row
  BOOST_CHECK_THROW(apply_increment(base, bad), std::invalid_argument);
  bad.waiting.clear();
  bad.slots.clear();
  BOOST_CHECK_THROW(apply_increment(base, bad), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()
