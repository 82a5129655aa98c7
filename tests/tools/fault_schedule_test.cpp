// The kill schedule of `actortrain launch --kill` and `bench faults` (fault_schedule.hpp):
// what a spec plans, that a seed decides it, and that bad specs are refused by name.

#include <boost/test/unit_test.hpp>

#include "../../tools/src/fault_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <string>

using actortrain::tools::fault_schedule;

namespace {

const std::map<std::string, int> cluster{{"chief", 1}, {"ps", 2}, {"worker", 3}};

std::string refusal(const std::string& spec, const std::map<std::string, int>& tasks = cluster) {
  try {
    fault_schedule::parse(spec, tasks, 1, 100);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "accepted";
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_period_kills_jittered_and_once_kills_once) {
  auto s = fault_schedule::parse("worker=10,ps=30,chief@60", cluster, 7, 100);
  int workers = 0, ps = 0, chiefs = 0;
  double last = 0;
  for (auto& k : s.kills()) {
    BOOST_TEST(k.at >= last);  // in time order
    last = k.at;
    if (k.role == "worker") {
      ++workers;
      // the k-th within a quarter period of k * 10
      BOOST_TEST(std::abs(k.at - 10.0 * workers) <= 2.5);
      BOOST_TEST((k.index >= 0 && k.index < 3));
    } else if (k.role == "ps") {
      ++ps;
      BOOST_TEST(std::abs(k.at - 30.0 * ps) <= 7.5);
      BOOST_TEST((k.index >= 0 && k.index < 2));
    } else {
      ++chiefs;
      BOOST_TEST(k.at == 60.0);
      BOOST_TEST(k.index == 0);
    }
  }
  // Up to 100 s: kills 1..10 of the workers (k * 10 - 2.5 <= 100), 1..3 of the ps.
  BOOST_TEST(workers == 10);
  BOOST_TEST(ps == 3);
  BOOST_TEST(chiefs == 1);
}

BOOST_AUTO_TEST_CASE(the_seed_decides_the_schedule) {
  auto a = fault_schedule::parse("worker=5", cluster, 3, 200).kills();
  auto b = fault_schedule::parse("worker=5", cluster, 3, 200).kills();
  auto c = fault_schedule::parse("worker=5", cluster, 4, 200).kills();
  BOOST_REQUIRE(a.size() == b.size());
  bool same_as_b = true, same_as_c = a.size() == c.size();
  for (size_t i = 0; i < a.size(); ++i) {
    same_as_b = same_as_b && a[i].at == b[i].at && a[i].index == b[i].index;
    same_as_c = same_as_c && i < c.size() && a[i].at == c[i].at && a[i].index == c[i].index;
  }
  BOOST_TEST(same_as_b);
  BOOST_TEST(!same_as_c);
  // Every worker is hit over 40 kills.
  std::map<int, int> hits;
  for (auto& k : a) ++hits[k.index];
  BOOST_TEST(hits.size() == 3u);
}

BOOST_AUTO_TEST_CASE(due_hands_out_each_kill_once_in_order) {
  auto s = fault_schedule::parse("ps@5,worker@2", cluster, 1, 100);
  BOOST_TEST(s.due(1.0).empty());
  auto first = s.due(3.0);
  BOOST_REQUIRE(first.size() == 1u);
  BOOST_TEST(first[0].role == "worker");
  BOOST_TEST(s.due(3.0).empty());
  auto rest = s.due(100.0);
  BOOST_REQUIRE(rest.size() == 1u);
  BOOST_TEST(rest[0].role == "ps");
  BOOST_TEST(s.due(1e9).empty());
}

BOOST_AUTO_TEST_CASE(bad_specs_are_refused_by_name) {
  BOOST_TEST(refusal("").find("empty") != std::string::npos);
  BOOST_TEST(refusal("worker").find("'worker': not ROLE=SECONDS") != std::string::npos);
  BOOST_TEST(refusal("evaluator=3").find("unknown role 'evaluator'") != std::string::npos);
  BOOST_TEST(refusal("worker=x").find("'x' is not a number of seconds > 0") != std::string::npos);
  BOOST_TEST(refusal("worker=0").find("'0' is not a number of seconds > 0") != std::string::npos);
  BOOST_TEST(refusal("worker=-2").find("is not a number of seconds > 0") != std::string::npos);
  BOOST_TEST(refusal("worker=1s").find("'1s' is not a number") != std::string::npos);
  BOOST_TEST(refusal("worker=nan").find("is not a number") != std::string::npos);
  BOOST_TEST(refusal("worker=3,worker@4").find("role 'worker' named twice") != std::string::npos);
  BOOST_TEST(refusal("chief@4", {{"ps", 1}, {"worker", 2}}).find("the cluster has no chief task") != std::string::npos);
  BOOST_TEST(refusal("worker=0.0001").find("more than 100,000 kills") != std::string::npos);
  BOOST_TEST(refusal("worker=3,ps@7") == "accepted");
}
