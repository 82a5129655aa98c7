#include "test_util.hpp"

#include <actortrain/dataset/digest.hpp>

#include <boost/test/unit_test.hpp>

#include <set>

using namespace actortrain::dataset;
using namespace actortrain::dataset::test;

BOOST_AUTO_TEST_SUITE(digest)

BOOST_AUTO_TEST_CASE(equal_elements_have_equal_digests) {
  auto a = collect(numbers(10).batch(4));
  auto b = collect(numbers(10).batch(4));
  BOOST_REQUIRE(a.size() == 3);
  for (size_t i = 0; i < a.size(); ++i) BOOST_TEST(element_digest(a[i]) == element_digest(b[i]));
  // A seek gives the same batch as a pass from the start.
  auto it = numbers(10).batch(4).iterate(0, 2);
  BOOST_TEST(element_digest(*it->next()) == element_digest(a[2]));
}

BOOST_AUTO_TEST_CASE(every_batch_of_a_pass_differs) {
  std::set<uint64_t> seen;
  for (auto& e : collect(numbers(1000).batch(7))) BOOST_TEST(seen.insert(element_digest(e)).second);
  BOOST_TEST(seen.size() == 143u);
  BOOST_TEST(!seen.count(0));
}

BOOST_AUTO_TEST_CASE(one_changed_bit_shape_or_label_changes_it) {
  auto e = collect(numbers(8).batch(8)).front();
  auto d = element_digest(e);
  auto f = e;
  f.features[0](3, 1) = std::nextafter(f.features[0](3, 1), 1e9f);
  BOOST_TEST(element_digest(f) != d);
  auto g = e;
  g.labels(0, 0) += 1;
  BOOST_TEST(element_digest(g) != d);
  // The same floats in another shape.
  auto h = e;
  h.features[0].resize(e.features[0].cols(), e.features[0].rows());
  std::copy(e.features[0].data(), e.features[0].data() + e.features[0].size(), h.features[0].data());
  BOOST_TEST(element_digest(h) != d);
  // Features and labels swapped.
  auto s = e;
  s.features[0] = e.labels;
  s.labels = e.features[0];
  BOOST_TEST(element_digest(s) != d);
  // A trailing zero counts (the tail is not padded away).
  std::vector<float> a{1, 2, 3}, b{1, 2, 3, 0};
  BOOST_TEST(float_digest(a.data(), a.size(), 1) != float_digest(b.data(), b.size(), 1));
}

BOOST_AUTO_TEST_CASE(does_not_depend_on_the_epoch_unless_the_data_does) {
  auto fixed = numbers(20).batch(5);
  BOOST_TEST(element_digest(*fixed.iterate(0)->next()) == element_digest(*fixed.iterate(3)->next()));
  auto shuffled = numbers(20).shuffle(20, 7).batch(5);
  BOOST_TEST(element_digest(*shuffled.iterate(0)->next()) != element_digest(*shuffled.iterate(1)->next()));
}

BOOST_AUTO_TEST_SUITE_END()
