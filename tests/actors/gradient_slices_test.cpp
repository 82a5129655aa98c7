// A worker's gradients on their way to the shards, without the actor
// (actors/src/worker/gradient_slices.hpp): cut per shard by the placement — whole dense
// variables moved without a copy and their buffers reused once the shard lets go,
// partitioned ones by rows, embedding rows to the shard that holds them with an empty
// slice where none is touched — and push_every's example-weighted mean.

#include <boost/test/unit_test.hpp>

#include "../../actors/src/worker/gradient_slices.hpp"

#include <string>

using namespace actortrain;
using model::matrix;

namespace {

// bias 1x4 (one partition, shard 0); kernel 6x2 in rows [0,3) on shard 1 and [3,6) on
// shard 0; table 10x3 (sparse) in rows [0,5) on shard 1 and [5,10) on shard 0.
struct slicing_fixture {
  std::vector<model::variable_spec> specs{{"bias", {1, 4}, {}, false},
                                          {"kernel", {6, 2}, {}, false},
                                          {"table", {10, 3}, {}, true}};
  model::fixed_shards two{2};
  model::placement pl = model::place(specs, &two, 2);
  model::gradient_store grads{specs};
  std::vector<uint64_t> read_version{5, 6, 7};
  std::vector<std::shared_ptr<const matrix>> sent = std::vector<std::shared_ptr<const matrix>>(3);

  slicing_fixture() {
    grads.dense[0] = matrix::Constant(1, 4, 1.0f);
    for (int r = 0; r < 6; ++r) grads.dense[1].row(r).setConstant(static_cast<float>(r));
    grads.sparse[2].ids = {1, 6, 8};
    grads.sparse[2].rows = matrix(3, 3);
    for (int r = 0; r < 3; ++r) grads.sparse[2].rows.row(r).setConstant(static_cast<float>(10 + r));
  }

  push_header header() const {
    push_header h;
    h.f.coordinator_epoch = 3;
    h.steps = {step_id{1, 0, 4}, step_id{1, 0, 5}};
    h.example_count = 16;
    h.watermark = {2};
    h.attempt = 9;
    h.digests = {104, 105};
    return h;
  }

  static const dense_slice* dense_of(const push_request& r, int32_t variable, int32_t index) {
    for (auto& d : r.dense)
      if (d.key == partition_key{variable, index}) return &d;
    return nullptr;
  }
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(gradient_slices, slicing_fixture)

BOOST_AUTO_TEST_CASE(every_shard_gets_one_push_with_the_whole_header) {
  auto reqs = slice_gradients(pl, grads, read_version, sent, header());
  BOOST_REQUIRE(reqs.size() == 2u);
  for (auto& r : reqs) {
    BOOST_TEST(r.f.coordinator_epoch == 3u);
    BOOST_TEST(r.step.position == 4u);
    BOOST_REQUIRE(r.more_steps.size() == 1u);
    BOOST_TEST(r.more_steps[0].position == 5u);
    BOOST_TEST(r.example_count == 16);
    BOOST_TEST(r.watermark == std::vector<uint64_t>{2});
    BOOST_TEST(r.attempt == 9u);
    BOOST_TEST((r.digests == std::vector<uint64_t>{104, 105}));
  }
}

BOOST_AUTO_TEST_CASE(a_whole_variable_moves_its_buffer_and_gets_it_back_once_the_shard_lets_go) {
  const float* data = grads.dense[0].data();
  auto reqs = slice_gradients(pl, grads, read_version, sent, header());
  auto* d = dense_of(reqs[0], 0, 0);
  BOOST_REQUIRE(d);
  BOOST_TEST(d->grad.value->data() == data);  // moved, not copied
  BOOST_TEST(d->read_version == 5u);
  BOOST_TEST(dense_of(reqs[1], 0, 0) == nullptr);
  BOOST_TEST(grads.dense[0].rows() == 1);  // a fresh buffer of the variable's shape
  BOOST_TEST(grads.dense[0].cols() == 4);
  BOOST_TEST(grads.dense[0].data() != data);
  // While the shard holds the pushed buffer it is not reused...
  auto held = reqs;
  grads.dense[0].setZero();
  auto second = slice_gradients(pl, grads, read_version, sent, header());
  BOOST_TEST(grads.dense[0].data() != data);
  // ...once nobody holds the first one (second push's buffer is in `sent` now, and the
  // first was dropped from `sent`), a later step gets its buffer back.
  held.clear();
  reqs.clear();
  second.clear();
  const float* second_data = sent[0]->data();
  auto third = slice_gradients(pl, grads, read_version, sent, header());
  BOOST_TEST(grads.dense[0].data() == second_data);
}

BOOST_AUTO_TEST_CASE(a_partitioned_variable_goes_by_rows_to_the_shard_of_each_partition) {
  auto reqs = slice_gradients(pl, grads, read_version, sent, header());
  auto* top = dense_of(reqs[1], 1, 0);
  auto* bottom = dense_of(reqs[0], 1, 1);
  BOOST_REQUIRE(top);
  BOOST_REQUIRE(bottom);
  BOOST_TEST(top->grad.rows() == 3);
  BOOST_TEST(top->grad.value->row(0).isApproxToConstant(0.0f));
  BOOST_TEST(top->grad.value->row(2).isApproxToConstant(2.0f));
  BOOST_TEST(bottom->grad.value->row(0).isApproxToConstant(3.0f));
  BOOST_TEST(bottom->grad.value->row(2).isApproxToConstant(5.0f));
  BOOST_TEST(top->read_version == 6u);
  BOOST_TEST(grads.dense[1].row(4).isApproxToConstant(4.0f));  // copied: the worker's buffer stays
}

BOOST_AUTO_TEST_CASE(embedding_rows_go_to_their_shard_and_an_untouched_shard_gets_an_empty_slice) {
  auto reqs = slice_gradients(pl, grads, read_version, sent, header());
  BOOST_REQUIRE(reqs[1].sparse.size() == 1u);  // rows [0, 5): id 1
  BOOST_REQUIRE(reqs[0].sparse.size() == 1u);  // rows [5, 10): ids 6, 8
  auto& low = reqs[1].sparse[0];
  auto& high = reqs[0].sparse[0];
  BOOST_TEST(low.ids == std::vector<int64_t>{1});
  BOOST_TEST(low.rows.value->row(0).isApproxToConstant(10.0f));
  BOOST_TEST((high.ids == std::vector<int64_t>{6, 8}));
  BOOST_TEST(high.rows.value->row(0).isApproxToConstant(11.0f));
  BOOST_TEST(high.rows.value->row(1).isApproxToConstant(12.0f));
  BOOST_TEST(high.read_version == 7u);
  // A batch that touches only the upper half: the lower shard still counts the step.
  grads.sparse[2].ids = {9};
  grads.sparse[2].rows = matrix::Ones(1, 3);
  auto only = slice_gradients(pl, grads, read_version, sent, header());
  BOOST_REQUIRE(only[1].sparse.size() == 1u);
  BOOST_TEST(only[1].sparse[0].ids.empty());
  BOOST_TEST(only[1].sparse[0].rows.rows() == 0);
  BOOST_TEST(only[0].sparse[0].ids == std::vector<int64_t>{9});
}

BOOST_AUTO_TEST_CASE(push_every_pushes_the_example_weighted_mean_read_at_the_first_step) {
  specs.pop_back();  // dense only
  model::placement dense_pl = model::place(specs, nullptr, 1);
  model::gradient_store g{specs};
  gradient_mean mean;
  g.dense[0].setConstant(1.0f);
  g.dense[1].setConstant(2.0f);
  BOOST_TEST(!mean.add(dense_pl, g, 4, {5, 6}));
  g.dense[0].setConstant(5.0f);
  g.dense[1].setConstant(6.0f);
  BOOST_TEST(!mean.add(dense_pl, g, 12, {8, 9}));
  BOOST_TEST(mean.steps() == 2u);
  std::vector<uint64_t> rv;
  mean.take(g, rv);
  BOOST_TEST(g.dense[0].isApproxToConstant((4 * 1.0f + 12 * 5.0f) / 16));
  BOOST_TEST(g.dense[1].isApproxToConstant((4 * 2.0f + 12 * 6.0f) / 16));
  BOOST_TEST((rv == std::vector<uint64_t>{5, 6}));  // staleness counts from the first read
  BOOST_TEST(mean.steps() == 0u);
  // After take (or clear: a failed task), the next step starts a new sum.
  g.dense[0].setConstant(3.0f);
  BOOST_TEST(!mean.add(dense_pl, g, 2, {1, 1}));
  mean.clear();
  g.dense[0].setConstant(7.0f);
  BOOST_TEST(!mean.add(dense_pl, g, 2, {2, 2}));
  mean.take(g, rv);
  BOOST_TEST(g.dense[0].isApproxToConstant(7.0f));
  BOOST_TEST((rv == std::vector<uint64_t>{2, 2}));
}

BOOST_AUTO_TEST_CASE(push_every_refuses_a_table_pulled_by_row_naming_it) {
  gradient_mean mean;
  auto f = mean.add(pl, grads, 4, read_version);
  BOOST_TEST(to_string(f.code) == "invalid_request");
  BOOST_TEST(f.what.find("push_every > 1 with table") != std::string::npos, f.what);
  BOOST_TEST(mean.steps() == 0u);
}

BOOST_AUTO_TEST_SUITE_END()
