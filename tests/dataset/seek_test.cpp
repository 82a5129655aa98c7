#include "test_util.hpp"

#include <actortrain/model/random.hpp>

#include <boost/test/unit_test.hpp>

#include <functional>

using namespace actortrain::dataset;
using namespace actortrain::dataset::test;

namespace {

/// Adds a seeded random value to every feature, so the map's seeds are checked too.
element jitter(element e, uint64_t seed) {
  e.features[0](0, 1) += actortrain::model::uniform01(seed);
  return e;
}

/// iterate(epoch, p) must equal iterate(epoch, 0) without its first p elements.
void check_seeks(const dataset& d, uint64_t epoch, const std::vector<uint64_t>& starts,
                 size_t limit) {
  const auto all = collect(d, epoch, 0, limit);
  for (uint64_t p : starts) {
    auto it = d.iterate(epoch, p);
    BOOST_TEST(it->position() == p);
    std::vector<element> got;
    while (got.size() + p < all.size()) {
      auto e = it->next();
      if (!e) break;
      got.push_back(std::move(*e));
    }
    const std::vector<element> expected(all.begin() + static_cast<std::ptrdiff_t>(std::min<size_t>(p, all.size())),
                                        all.end());
    BOOST_TEST(same(got, expected), d.describe() << " epoch " << epoch << " from " << p);
    if (all.size() < limit) BOOST_TEST(!it->next(), "ends after the same elements");
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(seek)

BOOST_AUTO_TEST_CASE(shuffle_map_batch_repeat_seeks_by_index) {
  auto d = numbers(23).shuffle(23, 5).map(jitter, 17).batch(4).repeat(3);
  BOOST_TEST(d.cardinality() == cardinality_info::known(18));
  for (uint64_t epoch : {0u, 1u, 4u}) check_seeks(d, epoch, {0, 1, 5, 6, 7, 12, 17, 18, 40}, 100);
}

BOOST_AUTO_TEST_CASE(infinite_shuffle_map_batch_repeat_seeks) {
  auto d = numbers(23).shuffle(8, 5).repeat().map(jitter, 3).batch(5);
  for (uint64_t epoch : {0u, 2u}) check_seeks(d, epoch, {0, 3, 4, 5, 9, 14}, 20);
}

BOOST_AUTO_TEST_CASE(filter_pipelines_seek_by_replaying) {
  auto keep_odd = [](const element& e) { return static_cast<int>(e.features[0](0, 0)) % 2 == 1; };
  auto d = numbers(40).shuffle(40, 2).filter(keep_odd).map(jitter, 9).batch(3).repeat(2);
  BOOST_TEST(d.cardinality().kind == cardinality_kind::unknown);
  for (uint64_t epoch : {0u, 3u}) check_seeks(d, epoch, {0, 1, 2, 6, 7, 13, 14, 30}, 100);
  // Without the repeat, batch and map pass the start position down to the filter itself.
  auto no_repeat = numbers(40).shuffle(40, 2).filter(keep_odd).map(jitter, 9).batch(3);
  check_seeks(no_repeat, 2, {0, 1, 2, 5, 6, 7, 9}, 100);
  auto shuffled_after = numbers(40).filter(keep_odd).shuffle(7, 4).batch(2);
  check_seeks(shuffled_after, 1, {0, 1, 4, 9, 10, 11}, 100);
}

BOOST_AUTO_TEST_CASE(shard_take_skip_concatenate_cache_prefetch_seek) {
  auto d = numbers(30)
               .skip(2)
               .shard(3, 1)
               .concatenate(numbers(5).take(4))
               .shuffle(6, 8)
               .cache()
               .batch(2)
               .prefetch(3);
  check_seeks(d, 0, {0, 1, 3, 6, 7, 20}, 100);
  check_seeks(d, 2, {0, 2, 5}, 100);
}

BOOST_AUTO_TEST_CASE(sequential_nodes_translate_start_positions) {
  // prefetch hides random access but keeps a known cardinality, so every node above it
  // takes its sequential path and seeks by translating the start position.
  auto seq = numbers(13).prefetch(1);
  auto ra = numbers(13);
  auto unknown = numbers(13).filter([](const element&) { return true; });
  const std::vector<std::function<dataset(const dataset&)>> pipelines = {
      [](const dataset& d) { return d.repeat(3); },
      [](const dataset& d) { return d.shuffle(5, 3).repeat(2); },
      [](const dataset& d) { return d.repeat().take(30); },
      [](const dataset& d) { return d.skip(4); },
      [](const dataset& d) { return d.take(9); },
      [](const dataset& d) { return d.shard(3, 1); },
      [](const dataset& d) { return d.shard(4, 3).repeat(2); },
      [](const dataset& d) { return d.batch(4); },
      [](const dataset& d) { return d.batch(4, true).repeat(2); },
      [](const dataset& d) { return d.map(jitter, 5).skip(1).batch(3); },
      [](const dataset& d) { return d.concatenate(d.take(3)).shard(2, 0); },
      [](const dataset& d) { return d.shuffle(13, 1).batch(5); },
  };
  for (size_t i = 0; i < pipelines.size(); ++i) {
    const auto fast = pipelines[i](ra);
    for (const auto& d : {pipelines[i](seq), pipelines[i](unknown)}) {
      BOOST_TEST(same(collect(d, 1), collect(fast, 1)), "pipeline " << i << ": " << d.describe());
      check_seeks(d, 1, {0, 1, 2, 3, 5, 8, 13, 17, 26, 40}, 100);
    }
  }
}

BOOST_AUTO_TEST_CASE(starting_past_the_end_reports_the_start_position) {
  auto seq = numbers(5).filter([](const element&) { return true; });
  const std::vector<dataset> pipelines = {
      numbers(5),           numbers(5).shuffle(3, 1), seq,           seq.shuffle(3, 1),
      seq.repeat(2),        seq.batch(2),             seq.shard(2, 1), seq.skip(1),
      seq.take(2),          seq.concatenate(seq),     seq.prefetch(1), numbers(5).repeat().take(3),
      numbers(5).repeat(0), numbers(5).cache(),       seq.map([](element e) { return e; }),
  };
  for (const auto& d : pipelines) {
    auto it = d.iterate(1, 12);
    BOOST_TEST(it->position() == 12u, d.describe());
    BOOST_TEST(!it->next(), d.describe());
    BOOST_TEST(it->position() == 12u, d.describe());
  }
}

BOOST_AUTO_TEST_CASE(seeded_map_seeds_depend_on_epoch_and_position) {
  auto d = numbers(5).map(jitter, 1);
  auto e0 = collect(d, 0), e1 = collect(d, 1);
  BOOST_TEST(!same(e0, e1));
  BOOST_TEST(same(e0, collect(d, 0)));
  for (size_t i = 0; i + 1 < e0.size(); ++i)
    BOOST_TEST(e0[i].features[0](0, 1) - static_cast<float>(i) !=
               e0[i + 1].features[0](0, 1) - static_cast<float>(i + 1));
}

BOOST_AUTO_TEST_SUITE_END()
