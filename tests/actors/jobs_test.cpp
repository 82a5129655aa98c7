// The registered jobs (jobs/jobs.hpp): each defined once, built by name from flags.

#include <boost/test/unit_test.hpp>

#include <actortrain/actors/cli/flags.hpp>
#include <actortrain/actors/jobs/jobs.hpp>
#include <actortrain/dataset/all.hpp>
#include <actortrain/model/all.hpp>

#include <filesystem>

namespace at = actortrain;
namespace jobs = actortrain::jobs;

namespace {

std::string refusal(const std::string& name, std::vector<std::string> args) {
  at::job j;
  try {
    jobs::make_job(name, args, j);
  } catch (const at::cli::usage_error& e) {
    return e.what();
  }
  return "accepted";
}

// The main job reads the test images when it is built (tools/setup installs them).
struct fashion_mnist_installed {
  boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) const {
    auto dir = std::filesystem::path(at::dataset::fashion_mnist_default_dir);
    boost::test_tools::assertion_result r{std::filesystem::exists(dir / "t10k-images-idx3-ubyte.gz")};
    r.message() << "no Fashion-MNIST under " << dir.string() << " (tools/setup installs it)";
    return r;
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(registered_jobs)

BOOST_AUTO_TEST_CASE(the_registry_holds_the_four_jobs_in_order) {
  std::vector<std::string> names;
  for (auto& r : jobs::registered()) names.push_back(r.name);
  BOOST_TEST(names == (std::vector<std::string>{"linear", "fashion_mnist", "ctr", "tutorial"}));
  BOOST_TEST(jobs::registered_names() == "linear, fashion_mnist, ctr, tutorial");
}

BOOST_AUTO_TEST_CASE(flags_reach_the_job_and_the_common_ones_its_spec) {
  at::job j;
  BOOST_TEST(jobs::make_job("linear", {"--epochs", "2", "--examples", "300", "--pull-every", "3", "--push-every=2",
                                       "--verbose", "1"},
                            j));
  BOOST_TEST(j.fit.epochs == 2);
  BOOST_TEST(j.fit.verbose == 1);
  BOOST_TEST(j.spec.pull_every == 3);
  BOOST_TEST(j.spec.push_every == 2);
  BOOST_TEST(j.spec.steps_per_execution == 2);  // push_every's default
  BOOST_TEST(j.name.find("examples=300") != std::string::npos);
  BOOST_CHECK_NO_THROW(at::check_job(j, "test"));
  BOOST_TEST(j.train(at::dataset::input_context{}).cardinality().n == 15);  // 300 examples, batches of 20
  BOOST_TEST(!j.spec.partitioner);  // whole variables unless asked
}

// The main job's tasks are of 8 steps unless --steps-per-execution says otherwise;
// --push-every N keeps them when 8 is a multiple of N, else takes N (a push never spans
// tasks); a value given is kept, and the cluster refuses it if it does not fit.
BOOST_AUTO_TEST_CASE(the_main_job_sends_tasks_of_8_steps_unless_told,
                     *boost::unit_test::precondition(fashion_mnist_installed())) {
  auto spe = [](std::vector<std::string> args) {
    at::job j;
    args.insert(args.begin(), {"--limit", "64"});
    BOOST_TEST(jobs::make_job("fashion_mnist", args, j));
    return j.spec.steps_per_execution;
  };
  BOOST_TEST(spe({}) == 8);
  BOOST_TEST(jobs::fashion_mnist().spec.steps_per_execution == 8);
  BOOST_TEST(spe({"--push-every", "4"}) == 8);
  BOOST_TEST(spe({"--push-every", "3"}) == 3);
  BOOST_TEST(spe({"--steps-per-execution", "2"}) == 2);
  BOOST_TEST(spe({"--push-every", "16"}) == 16);
  BOOST_TEST(spe({"--steps-per-execution", "8", "--push-every", "3"}) == 8);
  at::job j;
  BOOST_TEST(jobs::make_job("linear", {}, j));
  BOOST_TEST(j.spec.steps_per_execution == 1);  // the other jobs: one step per task
}

BOOST_AUTO_TEST_CASE(a_partitioner_splits_the_variables_over_the_shards) {
  at::job j;
  BOOST_TEST(jobs::make_job("linear", {"--partitioner", "fixed_shards(2)"}, j));
  BOOST_REQUIRE(j.spec.partitioner);
  BOOST_TEST(j.spec.partitioner->describe() == "fixed_shards(num_shards=2)");
  BOOST_TEST(refusal("linear", {"--partitioner", "halves"}).find("--partitioner: make_partitioner: unknown partitioner "
                                                                 "'halves'") == 0u,
             refusal("linear", {"--partitioner", "halves"}));
}

BOOST_AUTO_TEST_CASE(bad_names_and_flags_are_refused_by_name) {
  BOOST_TEST(refusal("nope", {}) == "unknown job 'nope' (linear, fashion_mnist, ctr, tutorial)");
  BOOST_TEST(refusal("", {}) == "which job? --example NAME (linear, fashion_mnist, ctr, tutorial)");
  BOOST_TEST(refusal("linear", {"--epochs", "0"}) == "--epochs: '0' is out of range (1 to 1048576)");
  BOOST_TEST(refusal("linear", {"--local-lr", "0.3"}) == "linear: --local-lr needs --pull-every > 1");
  BOOST_TEST(refusal("tutorial", {"stray"}) == "tutorial: unexpected argument 'stray'");
  BOOST_TEST(refusal("ctr", {"--rows", "100", "--test-rows", "10", "--optimizer", "sideways(1)"}).find(
               "--optimizer: make_optimizer: unknown optimizer 'sideways'") == 0u);
  BOOST_TEST(refusal("ctr", {"--rows", "100", "--id-bits", "40"}) ==
             "ctr: id_bits needs dynamic tables (a fixed table's rows are its buckets)");
  BOOST_TEST(refusal("ctr", {"--rows", "100", "--dynamic", "--scale", "5000"}).find(
               "ctr: 18000000 category values do not fit float ids below 2^24") == 0u);
}

BOOST_AUTO_TEST_CASE(help_prints_and_builds_nothing) {
  at::job j;
  BOOST_TEST(!jobs::make_job("ctr", {"--help"}, j));
  BOOST_TEST(j.structure.empty());
}

BOOST_AUTO_TEST_CASE(the_tutorial_is_tensorflows) {
  auto j = jobs::tutorial();
  BOOST_TEST(j.structure.describe().find("dense(10") != std::string::npos);
  BOOST_TEST(j.optimizer->describe().find("adam(") == 0u);
  BOOST_TEST(j.loss->describe() == at::model::mean_squared_error()->describe());
  BOOST_TEST(j.fit.steps_per_epoch == 10);
  auto it = j.train(at::dataset::input_context{}).iterate();
  auto b = it->next();
  BOOST_REQUIRE(b);
  BOOST_TEST(b->features[0].rows() == 20);
  BOOST_TEST(b->features[0].cols() == 5);
  BOOST_TEST(b->features[0].minCoeff() == 1.0f);
  BOOST_TEST(b->labels.maxCoeff() == 1.0f);
}

BOOST_AUTO_TEST_CASE(ctr_knows_its_optimum_and_pulls_rows) {
  jobs::ctr_options o;
  o.rows = 1000;
  o.test_rows = 500;
  o.buckets = 256;
  auto j = jobs::ctr(o);
  BOOST_TEST(j.spec.pull_rows);
  auto best = jobs::ctr_best(o);
  BOOST_TEST(best.auc > 0.6);
  BOOST_TEST(best.auc <= 1.0);
  BOOST_TEST(best.log_loss > 0.0);
  BOOST_TEST(best.shared_buckets > 0);  // 3,600 values in 256 buckets
  o.whole_tables = true;
  BOOST_TEST(!jobs::ctr(o).spec.pull_rows);
}

BOOST_AUTO_TEST_CASE(ctr_draws_large_data_when_read_with_64_bit_ids) {
  jobs::ctr_options o;
  o.rows = int64_t{1} << 36;  // never held: drawn example by example
  o.test_rows = 2000;
  o.dynamic = true;
  o.id_bits = 40;
  o.scale = 20000;  // 72M category values
  auto j = jobs::ctr(o);
  BOOST_TEST(j.name.find("scale=20000, id_bits=40") != std::string::npos, j.name);
  auto pipeline = [&](int id) { return j.train(at::dataset::input_context{2, id, 2}); };
  BOOST_TEST(pipeline(0).cardinality().n == (int64_t{1} << 35) / 256);
  auto b = pipeline(1).iterate()->next();
  BOOST_REQUIRE(b);
  BOOST_TEST(b->rows() == 256);
  BOOST_REQUIRE(b->is_ids(0));
  BOOST_TEST(!b->is_ids(1));
  BOOST_TEST(b->features[1].cols() == 4);
  const auto& ids = b->ids[0];
  BOOST_TEST(ids.cols() == 4);
  BOOST_TEST(ids.minCoeff() >= 0);
  BOOST_TEST(ids.maxCoeff() < int64_t{1} << 40);
  BOOST_TEST(ids.maxCoeff() >= int64_t{1} << 24);  // past what floats hold
  // The same examples on every read: the digest of a pass's first batch agrees.
  auto again = pipeline(1).iterate()->next();
  BOOST_TEST(at::dataset::element_digest(*b) == at::dataset::element_digest(*again));
  BOOST_TEST(at::dataset::element_digest(*b) != at::dataset::element_digest(*pipeline(0).iterate()->next()));
  auto best = jobs::ctr_best(o);
  BOOST_TEST(best.auc > 0.6);
  BOOST_TEST(best.values == 72000000);
  BOOST_TEST(best.shared_buckets == -1);
  // A fixed table of the same data: the values as bucket numbers, floats.
  o.dynamic = false;
  o.id_bits = 0;
  o.scale = 2;
  o.buckets = 8000;
  o.rows = 1000;
  auto f = jobs::ctr(o).train(at::dataset::input_context{}).iterate()->next();
  BOOST_REQUIRE(f);
  BOOST_TEST(!f->has_ids());
  BOOST_TEST(f->features[0].maxCoeff() < 8000.0f);
  BOOST_TEST(jobs::ctr_best(o).shared_buckets == 0);  // 7,200 values, one to one
}

BOOST_AUTO_TEST_SUITE_END()
