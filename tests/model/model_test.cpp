// Sequential and functional models: naming, shared layers, errors, and whole-model
// gradients against central finite differences.

#include <boost/test/unit_test.hpp>

#include <actortrain/model/layers/all.hpp>
#include <actortrain/model/loss.hpp>
#include <actortrain/model/model.hpp>

#include "gradient_check.hpp"

using namespace actortrain::model;
using layers::activation;
using testing::random_matrix;

namespace {

// Checks d(objective)/d(every variable and input) of `m` on `inputs`, objective = loss
// of the output against `labels` (or sum(out .* R) when labels are empty).
testing::gradient_check_result check_model(const model& m, std::vector<matrix> inputs, const matrix& labels,
                                           loss_ptr l, uint64_t seed = 3) {
  auto params = m.initial_parameters(seed);
  executor ex{m};
  const matrix& out0 = ex.forward(params, inputs, false);
  matrix r = random_matrix(out0.rows(), out0.cols(), seed + 1);
  matrix d_out;
  auto objective = [&] {
    const matrix& out = ex.forward(params, inputs, false);
    return l ? l->compute(out, labels, nullptr) : testing::weighted_sum(out, r);
  };
  const matrix& out = ex.forward(params, inputs, false);
  if (l)
    l->compute(out, labels, &d_out);
  else
    d_out = r;
  gradient_store g{m.variables()};
  ex.backward(params, d_out, g);
  auto grads = testing::dense_gradients(g, m.variables());
  std::vector<testing::checked_tensor> ts;
  for (size_t i = 0; i < grads.size(); ++i) ts.push_back({m.variables()[i].name, &params[static_cast<variable_id>(i)], grads[i]});
  return testing::check_gradients(objective, ts);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(model_graph)

BOOST_AUTO_TEST_CASE(sequential_names_layers_and_variables_as_keras_does) {
  auto m = model::sequential(784, {layers::dense(256, activation::relu), layers::dense(128, activation::relu),
                                   layers::dense(10)});
  BOOST_TEST(m.variables().size() == 6u);
  BOOST_TEST(m.variables()[0].name == "dense/kernel");
  BOOST_TEST(m.variables()[1].name == "dense/bias");
  BOOST_TEST(m.variables()[2].name == "dense_1/kernel");
  BOOST_TEST(m.variables()[4].name == "dense_2/kernel");
  BOOST_TEST((m.variables()[0].shape == shape2{784, 256}));
  BOOST_TEST((m.variables()[5].shape == shape2{1, 10}));
  BOOST_TEST(m.num_parameters() == 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
  BOOST_TEST(m.output_width() == 10);
  BOOST_TEST(m.find_variable("dense_1/bias") == 3);
  BOOST_TEST(m.find_variable("nope") == -1);
}

BOOST_AUTO_TEST_CASE(sequential_mlp_gradients_match_finite_differences) {
  auto m = model::sequential(6, {layers::dense(5, activation::tanh), layers::dense(4, activation::sigmoid),
                                 layers::dense(3)});
  matrix labels(4, 1);
  labels << 0, 2, 1, 2;
  auto r = check_model(m, {random_matrix(4, 6, 11)}, labels, softmax_cross_entropy());
  BOOST_TEST(r.passed, r.worst);
  BOOST_TEST(r.checked > 50);
}

BOOST_AUTO_TEST_CASE(functional_model_with_two_inputs_and_a_shared_layer_has_correct_gradients) {
  graph g;
  auto a = g.input(4, "a");
  auto b = g.input(4, "b");
  auto shared = layers::dense(3, activation::tanh);
  auto ha = g.apply(shared, a);
  auto hb = g.apply(shared, b);  // same variables, gradients summed
  auto sum = g.apply(layers::add(), {ha, hb});
  auto cat = g.apply(layers::concatenate(), {sum, ha});
  auto out = g.apply(layers::dense(2), cat);
  auto m = model::functional(g, {a, b}, out);
  BOOST_TEST(m.variables().size() == 4u);  // shared dense: one kernel, one bias
  BOOST_TEST(m.num_inputs() == 2u);
  auto r = check_model(m, {random_matrix(5, 4, 1), random_matrix(5, 4, 2)}, matrix{}, nullptr);
  BOOST_TEST(r.passed, r.worst);
}

BOOST_AUTO_TEST_CASE(a_node_used_twice_by_one_layer_gets_both_gradients) {
  graph g;
  auto x = g.input(3);
  auto h = g.apply(layers::dense(3), x);
  auto twice = g.apply(layers::add(), {h, h});
  auto m = model::functional(g, {x}, g.apply(layers::dense(1), twice));
  auto r = check_model(m, {random_matrix(4, 3, 5)}, matrix{}, nullptr);
  BOOST_TEST(r.passed, r.worst);
}

BOOST_AUTO_TEST_CASE(embedding_and_dense_features_train_together) {
  graph g;
  auto ids = g.input(2, "ids");
  auto dense = g.input(3, "dense");
  auto e = g.apply(layers::embedding(10, 4), ids);
  auto h = g.apply(layers::concatenate(), {e, dense});
  auto m = model::functional(g, {ids, dense}, g.apply(layers::dense(1), h));
  BOOST_TEST(m.variables()[0].sparse);
  matrix id_batch(3, 2);
  id_batch << 1, 7, 7, 0, 9, 1;
  matrix labels(3, 1);
  labels << 1, 0, 1;
  auto r = check_model(m, {id_batch, random_matrix(3, 3, 9)}, labels, binary_cross_entropy());
  BOOST_TEST(r.passed, r.worst);
}

BOOST_AUTO_TEST_CASE(output_depending_on_an_unlisted_input_is_an_error) {
  graph g;
  auto a = g.input(2, "a");
  auto b = g.input(2, "b");
  auto out = g.apply(layers::add(), {a, b});
  try {
    model::functional(g, {a}, out);
    BOOST_FAIL("expected an error");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("'b'") != std::string::npos, e.what());
  }
}

BOOST_AUTO_TEST_CASE(an_unused_input_is_still_fed) {
  graph g;
  auto a = g.input(2, "a");
  auto unused = g.input(7, "unused");
  auto m = model::functional(g, {a, unused}, g.apply(layers::dense(1), a));
  BOOST_TEST(m.num_inputs() == 2u);
  BOOST_TEST(m.input_width(1) == 7);
  executor ex{m};
  auto p = m.initial_parameters(1);
  BOOST_TEST(ex.forward(p, {random_matrix(3, 2, 1), random_matrix(3, 7, 2)}, false).rows() == 3);
}

BOOST_AUTO_TEST_CASE(wrong_input_shapes_are_rejected_with_the_shapes) {
  auto m = model::sequential(4, {layers::dense(2)});
  executor ex{m};
  auto p = m.initial_parameters(1);
  try {
    ex.forward(p, {random_matrix(3, 5, 1)}, false);
    BOOST_FAIL("expected an error");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("[3 x 5]") != std::string::npos, e.what());
  }
  BOOST_CHECK_THROW(ex.forward(p, {}, false), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(a_layer_rejecting_its_input_width_is_named) {
  graph g;
  auto a = g.input(2);
  auto b = g.input(3);
  try {
    model::functional(g, {a, b}, g.apply(layers::add(), {a, b}));
    BOOST_FAIL("expected an error");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("add") != std::string::npos, e.what());
  }
}

BOOST_AUTO_TEST_CASE(initial_parameters_are_a_function_of_the_seed) {
  auto m = model::sequential(8, {layers::dense(4), layers::dense(2)});
  auto p1 = m.initial_parameters(5), p2 = m.initial_parameters(5), p3 = m.initial_parameters(6);
  BOOST_TEST((p1[0] == p2[0]));
  BOOST_TEST((p1[0] != p3[0]));
  BOOST_TEST(p1[1].isZero());  // bias: zeros
}

BOOST_AUTO_TEST_SUITE_END()
