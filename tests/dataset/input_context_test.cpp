#include "test_util.hpp"

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <atomic>
#include <memory>

using namespace actortrain::dataset;
using namespace actortrain::dataset::test;

namespace {

/// Files named "<k>_<n>": reading one gives numbers(n) with 100 k added to every id, so
/// ids are unique across files and name their file.
dataset numbered_files(std::vector<std::string> files, std::shared_ptr<std::atomic<int>> reads) {
  return from_files(std::move(files), [reads](const std::string& f) {
    if (reads) ++*reads;
    const auto sep = f.find('_');
    const float k = std::stof(f.substr(0, sep));
    return numbers(std::stoi(f.substr(sep + 1))).map([k](element e) {
      e.features[0].array() += 100.0f * k;
      return e;
    });
  });
}

std::vector<float> sorted(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(input_context_suite)

BOOST_AUTO_TEST_CASE(per_replica_batch_size_divides_the_global_batch) {
  input_context ctx(2, 1, 4);
  BOOST_TEST(ctx.get_per_replica_batch_size(128) == 32);
  BOOST_TEST(input_context{}.get_per_replica_batch_size(130) == 130);
}

BOOST_AUTO_TEST_CASE(per_replica_batch_size_error_uses_tf_wording) {
  input_context ctx(1, 0, 4);
  auto msg = error_of([&] { ctx.get_per_replica_batch_size(130); });
  BOOST_TEST(msg == "The `global_batch_size` 130 is not divisible by `num_replicas_in_sync` 4");
  BOOST_CHECK_THROW(ctx.get_per_replica_batch_size(130), std::invalid_argument);
  BOOST_CHECK_THROW(ctx.get_per_replica_batch_size(0), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(constructor_validates_the_context) {
  BOOST_CHECK_THROW(input_context(0, 0, 1), std::invalid_argument);
  BOOST_CHECK_THROW(input_context(2, -1, 1), std::invalid_argument);
  BOOST_CHECK_THROW(input_context(2, 0, 0), std::invalid_argument);
  auto msg = error_of([] { input_context(3, 3, 1); });
  BOOST_TEST(msg == "input_context: input_pipeline_id must be in [0, num_input_pipelines) = "
                    "[0, 3), got 3");
  input_context assigned;
  assigned.input_pipeline_id = 5;
  BOOST_CHECK_THROW(assigned.validate(), std::invalid_argument);
  BOOST_CHECK_THROW(auto_shard(numbers(3), assigned, auto_shard_policy::data),
                    std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(data_policy_shards_elements_below_a_trailing_prefetch) {
  auto d = numbers(10).batch(2).prefetch(2);
  std::vector<float> all;
  for (int64_t id = 0; id < 3; ++id) {
    auto mine = auto_shard(d, input_context(3, id, 1), auto_shard_policy::data);
    BOOST_TEST(mine.describe().find("batch(2) -> shard(3, " + std::to_string(id) +
                                    ") -> prefetch(2)") != std::string::npos,
               mine.describe());
    auto got = ids(mine);
    all.insert(all.end(), got.begin(), got.end());
  }
  BOOST_TEST(sorted(all) == ids(numbers(10)));
  // Batches 1 and 4 (examples 2, 3 and 8, 9) go to pipeline 1.
  BOOST_TEST(ids(auto_shard(d, input_context(3, 1, 1), auto_shard_policy::data)) ==
             (std::vector<float>{2, 3, 8, 9}));
}

BOOST_AUTO_TEST_CASE(off_policy_and_single_pipeline_leave_the_dataset_alone) {
  auto d = numbers(4);
  BOOST_TEST(auto_shard(d, input_context(2, 1, 1), auto_shard_policy::off).describe() ==
             d.describe());
  BOOST_TEST(auto_shard(d, input_context{}, auto_shard_policy::file).describe() == d.describe());
}

BOOST_AUTO_TEST_CASE(file_policy_gives_each_pipeline_its_files_under_transformations) {
  auto reads = std::make_shared<std::atomic<int>>(0);
  auto d = numbered_files({"0_3", "1_1", "2_2", "3_4", "4_2"}, reads)
               .map([](element e) { return e; })
               .shuffle(20, 1)
               .batch(2);
  std::vector<float> all;
  for (int64_t id = 0; id < 2; ++id) {
    auto mine = auto_shard(d, input_context(2, id, 1), auto_shard_policy::file);
    auto got = ids(mine);
    for (float x : got) {
      const int file = static_cast<int>(x) / 100;
      BOOST_TEST(file % 2 == id, "example " << x << " of file " << file << " in pipeline " << id);
    }
    all.insert(all.end(), got.begin(), got.end());
    BOOST_TEST(mine.describe() == (id == 0 ? "files(0_3, 2_2, 4_2)" : "files(1_1, 3_4)") +
                                      std::string(" -> map -> shuffle(20, seed=1) -> batch(2)"));
  }
  BOOST_TEST(sorted(all) == sorted(ids(d)));
  BOOST_TEST(all.size() == 12u);
}

BOOST_AUTO_TEST_CASE(file_policy_reads_only_this_pipelines_files) {
  auto reads = std::make_shared<std::atomic<int>>(0);
  auto d = numbered_files({"0_1", "1_1", "2_1", "3_1"}, reads).batch(2);
  auto mine = auto_shard(d, input_context(4, 2, 1), auto_shard_policy::file);
  BOOST_TEST(ids(mine) == (std::vector<float>{200}));
  BOOST_TEST(*reads == 1);
}

BOOST_AUTO_TEST_CASE(file_policy_rejects_too_few_files) {
  auto d = numbered_files({"0_2", "1_3"}, nullptr).batch(2);
  auto msg = error_of([&] { auto_shard(d, input_context(3, 0, 1), auto_shard_policy::file); });
  BOOST_TEST(msg.find("cannot shard 2 files across 3 input pipelines") != std::string::npos, msg);
  BOOST_CHECK_THROW(auto_shard(d, input_context(3, 0, 1), auto_shard_policy::file),
                    std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(file_policy_rejects_datasets_that_are_not_file_based) {
  auto msg = error_of([] {
    auto_shard(numbers(10).batch(2), input_context(2, 0, 1), auto_shard_policy::file);
  });
  BOOST_TEST(msg.find("is not file-based") != std::string::npos, msg);
  // A file source concatenated with an in-memory one would duplicate the latter.
  auto mixed = numbered_files({"0_1", "1_2"}, nullptr).concatenate(numbers(3));
  BOOST_CHECK_THROW(auto_shard(mixed, input_context(2, 0, 1), auto_shard_policy::file),
                    std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(auto_policy_prefers_files_and_falls_back_to_data) {
  auto files = numbered_files({"0_2", "1_3", "2_1"}, nullptr);
  auto by_file = auto_shard(files, input_context(3, 1, 1), auto_shard_policy::auto_);
  BOOST_TEST(by_file.describe() == "files(1_3)");
  BOOST_TEST(ids(by_file) == (std::vector<float>{100, 101, 102}));
  auto too_few = auto_shard(files, input_context(4, 1, 1), auto_shard_policy::auto_);
  BOOST_TEST(too_few.describe() == "files(0_2, 1_3, 2_1) -> shard(4, 1)");
  BOOST_TEST(ids(too_few) == (std::vector<float>{1, 200}));
  auto in_memory = auto_shard(numbers(5), input_context(2, 1, 1), auto_shard_policy::auto_);
  BOOST_TEST(ids(in_memory) == (std::vector<float>{1, 3}));
}

BOOST_AUTO_TEST_CASE(dataset_fn_builds_a_pipeline_for_a_context) {
  dataset_fn fn = [](const input_context& ctx) {
    return numbers(8)
        .shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        .batch(ctx.get_per_replica_batch_size(4));
  };
  BOOST_TEST(ids(fn(input_context(2, 1, 2))) == (std::vector<float>{1, 3, 5, 7}));
  BOOST_TEST(row_counts(collect(fn(input_context(2, 1, 2)))) == (std::vector<int64_t>{2, 2}));
}

BOOST_AUTO_TEST_SUITE_END()
