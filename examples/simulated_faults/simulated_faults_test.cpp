// The application's own test of its training under simulated faults (the example beside
// it): the Fashion-MNIST MLP on 512 images under 200 random fault plans through the
// public API, each with two fit calls; and a few in sync mode, whose values must equal
// the fault-free run's. Skipped when the Fashion-MNIST files are not installed.

#include "fashion_mnist_job.hpp"

#include <actortrain/actors/sim/simulator.hpp>
#include <actortrain/dataset/fashion_mnist.hpp>

#include <boost/test/unit_test.hpp>

#include <chrono>
#include <filesystem>

namespace {

struct have_fashion_mnist {
  boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) {
    auto dir = std::filesystem::path(actortrain::dataset::fashion_mnist_default_dir);
    boost::test_tools::assertion_result r{std::filesystem::exists(dir / "train-images-idx3-ubyte.gz")};
    r.message() << "no Fashion-MNIST under " << dir.string() << " (tools/setup installs it)";
    return r;
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(simulated_faults)

BOOST_AUTO_TEST_CASE(two_hundred_random_plans_keep_exactly_once, *boost::unit_test::precondition(have_fashion_mnist())) {
  auto job = example::fashion_mnist_job(actortrain::dataset::fashion_mnist_default_dir, 512);
  auto began = std::chrono::steady_clock::now();
  size_t faults = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    actortrain::sim_options o;
    o.seed = seed;
    o.fits = 2;
    auto r = actortrain::simulate(job, o);
    faults += r.injected.size();
    BOOST_TEST(r.ok(), r.report() << "replay: " << r.replay);
    BOOST_TEST(r.steps > 0);
  }
  BOOST_TEST(faults > 400u);  // the plans did something
  BOOST_TEST_MESSAGE("200 plans, " << faults << " faults, "
                                   << std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count()
                                   << " s");
}

BOOST_AUTO_TEST_CASE(in_sync_mode_the_values_equal_a_fault_free_runs,
                     *boost::unit_test::precondition(have_fashion_mnist())) {
  auto job = example::fashion_mnist_job(actortrain::dataset::fashion_mnist_default_dir, 512);
  job.spec.consistency = actortrain::consistency_mode::sync();
  int compared = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    actortrain::sim_options o;
    o.seed = seed;
    auto r = actortrain::simulate(job, o);
    compared += r.values_compared ? 1 : 0;
    BOOST_TEST(r.ok(), r.report() << "replay: " << r.replay);
  }
  BOOST_TEST(compared >= 15);
}

BOOST_AUTO_TEST_SUITE_END()
