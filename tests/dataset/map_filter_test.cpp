#include "test_util.hpp"

#include <actortrain/model/random.hpp>

#include <boost/test/unit_test.hpp>

using namespace actortrain::dataset;
using namespace actortrain::dataset::test;

BOOST_AUTO_TEST_SUITE(map_filter)

BOOST_AUTO_TEST_CASE(map_applies_the_function_in_order) {
  auto d = numbers(4).map([](element e) {
    e.features[0] *= 2.0f;
    return e;
  });
  BOOST_TEST(ids(d) == (std::vector<float>{0, 2, 4, 6}));
  BOOST_TEST(ids(d, 0, 2) == (std::vector<float>{4, 6}));
}

BOOST_AUTO_TEST_CASE(map_after_batch_sees_batches) {
  auto d = numbers(5).batch(2).map([](element e) {
    e.labels = matrix::Constant(e.rows(), 1, static_cast<float>(e.rows()));
    return e;
  });
  auto all = collect(d);
  BOOST_REQUIRE_EQUAL(all.size(), 3u);
  BOOST_TEST(all[0].labels(1, 0) == 2.0f);
  BOOST_TEST(all[2].labels(0, 0) == 1.0f);
}

BOOST_AUTO_TEST_CASE(seeded_map_is_deterministic_and_uses_the_seed) {
  auto tag = [](element e, uint64_t seed) {
    e.labels(0, 0) = static_cast<float>(seed % 1000003);
    return e;
  };
  auto a = collect(numbers(10).map(tag, 1));
  BOOST_TEST(same(a, collect(numbers(10).map(tag, 1))));
  BOOST_TEST(!same(a, collect(numbers(10).map(tag, 2))));
  BOOST_TEST(!same(a, collect(numbers(10).map(tag, 1), 1)));
  // element_seed = model::draw(seed, position, epoch).
  BOOST_TEST(a[3].labels(0, 0) ==
             static_cast<float>(actortrain::model::draw(1, 3, 0) % 1000003));
}

BOOST_AUTO_TEST_CASE(filter_keeps_matching_elements) {
  auto d = numbers(10).filter([](const element& e) { return e.features[0](0, 0) >= 6.0f; });
  BOOST_TEST(ids(d) == (std::vector<float>{6, 7, 8, 9}));
  BOOST_TEST(ids(d, 0, 3) == (std::vector<float>{9}));
  BOOST_TEST(ids(d, 0, 9).empty());
  BOOST_TEST(d.iterate(0, 9)->position() == 9u);
}

BOOST_AUTO_TEST_CASE(map_exceptions_reach_the_caller_with_the_position) {
  auto d = numbers(5).map([](element e) {
    if (e.features[0](0, 0) == 2.0f) throw std::invalid_argument("record 2 is malformed");
    return e;
  });
  auto it = d.iterate();
  it->next();
  it->next();
  BOOST_CHECK_THROW(it->next(), std::invalid_argument);
  BOOST_TEST(it->position() == 2u);
}

BOOST_AUTO_TEST_CASE(rejects_empty_functions) {
  BOOST_CHECK_THROW(numbers(2).map(map_fn{}), std::invalid_argument);
  BOOST_CHECK_THROW(numbers(2).filter(predicate_fn{}), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()
