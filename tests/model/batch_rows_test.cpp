// A step's rows of an embedding table (model/batch_rows.hpp): the distinct valid ids of a batch's feeds, the
// batch renumbered to rows of a compact table, the gradient given the table's ids back;
// and which tables a model lets a worker hold compactly (model::compact_rows).

#include <boost/test/unit_test.hpp>

#include <actortrain/model/all.hpp>

#include <actortrain/model/batch_rows.hpp>

using namespace actortrain;
using namespace actortrain::model;
using model::matrix;

namespace {

// Input 0: ids (two per row) with values that are no id (negative, fractional, too big);
// input 1: other features, which are not read as ids.
model::batch sample() {
  model::batch b;
  b.features.push_back(matrix(4, 2));
  b.features[0] << 7, 3,  //
    3, -1,                //
    2.5f, 9,              //
    10, 0;
  b.features.push_back(matrix::Constant(4, 1, 3.0f));
  b.labels = matrix::Zero(4, 1);
  return b;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(batch_rows)

BOOST_AUTO_TEST_CASE(the_ids_are_the_distinct_integers_below_the_vocabulary_sorted) {
  auto b = sample();
  BOOST_TEST(batch_row_ids(b, {0}, 10) == (std::vector<int64_t>{0, 3, 7, 9}));
  BOOST_TEST(batch_row_ids(b, {0}, 11) == (std::vector<int64_t>{0, 3, 7, 9, 10}));
  BOOST_TEST(batch_row_ids(b, {0, 1}, 10) == (std::vector<int64_t>{0, 3, 7, 9}));  // 3 again
  BOOST_TEST(batch_row_ids(b, {5}, 10).empty());  // an input the batch lacks
}

BOOST_AUTO_TEST_CASE(renumbering_points_every_id_at_its_row_and_leaves_the_rest) {
  auto b = sample();
  auto ids = batch_row_ids(b, {0}, 10);
  renumber_rows(b, {0}, ids);
  matrix want(4, 2);
  want << 2, 1,  //
    1, -1,       //
    2.5f, 3,     //
    10, 0;
  BOOST_TEST((b.features[0].array() == want.array()).all(), b.features[0]);
  BOOST_TEST((b.features[1].array() == 3.0f).all());  // not a feed
  // Each renumbered value names the row whose id it was.
  auto before = sample();
  for (Eigen::Index i = 0; i < want.size(); ++i) {
    float v = before.features[0].data()[i];
    if (v >= 0 && v < 10 && v == std::floor(v))
      BOOST_TEST(ids[static_cast<size_t>(b.features[0].data()[i])] == static_cast<int64_t>(v));
  }
}

BOOST_AUTO_TEST_CASE(gradient_positions_get_the_table_ids_back_in_order) {
  model::sparse_rows g;
  g.ids = {0, 2, 3};
  g.rows = matrix::Identity(3, 3);
  BOOST_TEST(restore_row_ids(g, {4, 8, 15, 16}));
  BOOST_TEST(g.ids == (std::vector<int64_t>{4, 15, 16}));
  model::sparse_rows bad;
  bad.ids = {1, 4};
  BOOST_TEST(!restore_row_ids(bad, {4, 8, 15, 16}));
  BOOST_TEST(bad.ids == (std::vector<int64_t>{1, 4}));  // unchanged
}

BOOST_AUTO_TEST_CASE(a_table_is_compact_when_nothing_but_its_embeddings_reads_its_inputs) {
  using namespace model::layers;
  model::graph g;
  auto ids = g.input(2, "ids");
  auto shared = g.input(2, "shared");
  auto dense_in = g.input(2, "dense");
  auto own = g.apply(embedding(20, 3, combiner::sum), ids);
  auto own_again = g.apply(embedding(20, 3, combiner::sum), ids);  // a second table on the same ids
  auto read_twice = g.apply(embedding(20, 3, combiner::sum), shared);
  auto as_numbers = g.apply(dense(3), shared);  // reads the ids as numbers too
  auto out = g.apply(dense(1), g.apply(concatenate(), {own, own_again, read_twice, as_numbers, dense_in}));
  auto m = model::model::functional(g, {ids, shared, dense_in}, out);
  auto compact = [&](const char* name) {
    auto v = m.find_variable(name);
    BOOST_REQUIRE(v >= 0);
    return static_cast<bool>(m.compact_rows()[static_cast<size_t>(v)]);
  };
  BOOST_TEST(!compact("embedding/embeddings"));    // its input feeds embedding_1 too
  BOOST_TEST(!compact("embedding_1/embeddings"));
  BOOST_TEST(!compact("embedding_2/embeddings"));  // its input feeds a dense layer

  model::graph h;
  auto a = h.input(2, "a");
  auto b = h.input(1, "b");
  auto ea = h.apply(embedding(20, 3, combiner::concat), a);
  auto eb = h.apply(embedding(20, 3, combiner::concat), b);
  auto m2 = model::model::functional(h, {a, b}, h.apply(dense(1), h.apply(concatenate(), {ea, eb})));
  for (auto name : {"embedding/embeddings", "embedding_1/embeddings"}) {
    auto v = m2.find_variable(name);
    BOOST_REQUIRE(v >= 0);
    BOOST_TEST(m2.compact_rows()[static_cast<size_t>(v)], name);
  }
}

BOOST_AUTO_TEST_SUITE_END()
