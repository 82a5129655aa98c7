#include "test_util.hpp"

#include <boost/test/unit_test.hpp>

#include <algorithm>

using namespace actortrain::dataset;
using namespace actortrain::dataset::test;

namespace {

dataset sequential(const dataset& d) {
  return d.filter([](const element&) { return true; });
}

}  // namespace

BOOST_AUTO_TEST_SUITE(repeat_take_skip)

BOOST_AUTO_TEST_CASE(repeat_counts) {
  BOOST_TEST(ids(numbers(3).repeat(2)) == (std::vector<float>{0, 1, 2, 0, 1, 2}));
  BOOST_TEST(ids(numbers(3).repeat(0)).empty());
  BOOST_TEST(ids(numbers(3).repeat(1)) == ids(numbers(3)));
  BOOST_TEST(ids(numbers(3).repeat(), 0, 0, 7) == (std::vector<float>{0, 1, 2, 0, 1, 2, 0}));
  BOOST_TEST(ids(sequential(numbers(3)).repeat(2)) == (std::vector<float>{0, 1, 2, 0, 1, 2}));
}

BOOST_AUTO_TEST_CASE(repeat_of_nothing_ends_instead_of_hanging) {
  BOOST_TEST(ids(numbers(0).repeat()).empty());
  BOOST_TEST(ids(numbers(5).filter([](const element&) { return false; }).repeat()).empty());
}

BOOST_AUTO_TEST_CASE(repetitions_reshuffle_differently_and_reproducibly) {
  auto d = numbers(20).shuffle(20, 9).repeat(3);
  auto all = ids(d);
  BOOST_REQUIRE_EQUAL(all.size(), 60u);
  std::vector<float> r0(all.begin(), all.begin() + 20), r1(all.begin() + 20, all.begin() + 40);
  BOOST_TEST(r0 != r1);
  BOOST_TEST(ids(d) == all);
  // Repetition k of epoch e is the upstream's epoch e * count + k.
  auto shuffled = numbers(20).shuffle(20, 9);
  BOOST_TEST(r1 == ids(shuffled, 1));
  const auto epoch1 = ids(d, 1);
  std::vector<float> e1r0(epoch1.begin(), epoch1.begin() + 20);
  BOOST_TEST(e1r0 == ids(shuffled, 3));
  // repeat(1) is the identity in every epoch.
  BOOST_TEST(ids(shuffled.repeat(1), 4) == ids(shuffled, 4));
  // The sequential path agrees.
  BOOST_TEST(ids(sequential(numbers(20)).shuffle(20, 9).repeat(3)) == all);
}

BOOST_AUTO_TEST_CASE(take_counts) {
  BOOST_TEST(ids(numbers(10).take(3)) == (std::vector<float>{0, 1, 2}));
  BOOST_TEST(ids(numbers(2).take(3)) == (std::vector<float>{0, 1}));
  BOOST_TEST(ids(numbers(10).take(0)).empty());
  BOOST_TEST(ids(numbers(3).repeat().take(5)) == (std::vector<float>{0, 1, 2, 0, 1}));
  BOOST_TEST(ids(sequential(numbers(10)).take(3)) == (std::vector<float>{0, 1, 2}));
  BOOST_CHECK_THROW(numbers(3).take(-1), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(skip_counts) {
  BOOST_TEST(ids(numbers(5).skip(3)) == (std::vector<float>{3, 4}));
  BOOST_TEST(ids(numbers(5).skip(7)).empty());
  BOOST_TEST(ids(numbers(5).skip(0)) == ids(numbers(5)));
  BOOST_TEST(ids(sequential(numbers(5)).skip(3)) == (std::vector<float>{3, 4}));
  BOOST_TEST(ids(numbers(3).repeat().skip(2), 0, 0, 3) == (std::vector<float>{2, 0, 1}));
  BOOST_CHECK_THROW(numbers(3).skip(-2), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(skip_then_take_selects_a_window) {
  BOOST_TEST(ids(numbers(10).skip(2).take(3)) == (std::vector<float>{2, 3, 4}));
  BOOST_TEST(ids(numbers(10).take(6).skip(4)) == (std::vector<float>{4, 5}));
}

BOOST_AUTO_TEST_CASE(rejects_repeat_count_below_minus_one) {
  auto msg = error_of([] { numbers(3).repeat(-2); });
  BOOST_TEST(msg == "repeat: count must be -1 (forever) or >= 0, got -2");
}

BOOST_AUTO_TEST_SUITE_END()
