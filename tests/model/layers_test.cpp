// Layers: forward values against hand computations, gradients against finite
// differences, shared-layer semantics, dropout masks, embedding sparse gradients, and the
// errors build() and forward() give for inputs that do not fit.

#include <boost/test/unit_test.hpp>

#include "gradient_check.hpp"

#include <actortrain/model/layers/all.hpp>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

using namespace actortrain::model;
using namespace actortrain::model::testing;

namespace {

// One layer applied once, with its own registry, parameters and node state.
struct applied {
  layer_ptr op;
  test_registry reg;
  node_state st;
  parameter_store params;
  int64_t out_width = 0;

  applied(layer_ptr l, const std::vector<int64_t>& widths, uint64_t seed = 3) : op(std::move(l)) {
    out_width = build_layer(*op, reg, widths, st);
    params = parameter_store{reg.specs, seed};
  }

  matrix forward_all(const std::vector<const matrix*>& inputs, bool training = false,
                     uint64_t step_seed = 0, int32_t node_index = 0) {
    matrix out;
    op->forward(forward_context{&params, training, step_seed, node_index}, inputs, out, st);
    return out;
  }
  matrix forward(const matrix& x, bool training = false, uint64_t step_seed = 0) {
    return forward_all({&x}, training, step_seed);
  }
};

// The message of the std::invalid_argument that f throws ("" when it throws nothing).
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

matrix from_rows(std::initializer_list<std::initializer_list<float>> rows) {
  matrix m(static_cast<Eigen::Index>(rows.size()), static_cast<Eigen::Index>(rows.begin()->size()));
  Eigen::Index r = 0;
  for (auto row : rows) {
    Eigen::Index c = 0;
    for (float v : row) m(r, c++) = v;
    ++r;
  }
  return m;
}

// An input whose dense pre-activations X W + b (with parameters seeded by `seed`) are all
// farther than `margin` from 0, so relu has no kink within the finite-difference step.
matrix relu_safe_input(Eigen::Index rows, int64_t in, int64_t units, uint64_t seed, float margin) {
  for (uint64_t s = 100;; ++s) {
    applied a{layers::dense(units, activation::linear), {in}, seed};
    matrix x = random_matrix(rows, in, s);
    if (a.forward(x).array().abs().minCoeff() > margin) return x;
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(model_layers)

// ---- dense -----------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(dense_forward_matches_hand_computation) {
  applied a{layers::dense(2, activation::relu), {3}};
  a.params[a.st.vars[0]] = from_rows({{1, -1}, {2, 0.5f}, {-1, 1}});
  a.params[a.st.vars[1]] = from_rows({{0.5f, -3}});
  const matrix x = from_rows({{1, 2, 3}, {-1, 0, 1}});
  const matrix out = a.forward(x);
  // Row 0: [1+4-3, -1+1+3] + b = [2.5, 0]; row 1: [-1-1, 1+1] + b = [-1.5 -> 0, -1 -> 0].
  BOOST_TEST(out.rows() == 2);
  BOOST_TEST(out.cols() == 2);
  BOOST_TEST(out(0, 0) == 2.5f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(out(0, 1) == 0.0f);
  BOOST_TEST(out(1, 0) == 0.0f);
  BOOST_TEST(out(1, 1) == 0.0f);
}

BOOST_AUTO_TEST_CASE(dense_declares_kernel_and_bias_with_their_shapes) {
  applied a{layers::dense(5), {3}};
  BOOST_TEST(a.out_width == 5);
  BOOST_REQUIRE(a.reg.specs.size() == 2u);
  BOOST_TEST(a.reg.specs[0].name == "dense/kernel");
  BOOST_TEST((a.reg.specs[0].shape == shape2{3, 5}));
  BOOST_TEST(a.reg.specs[1].name == "dense/bias");
  BOOST_TEST((a.reg.specs[1].shape == shape2{1, 5}));
  BOOST_TEST(!a.reg.specs[0].sparse);
  applied b{layers::dense(4, activation::tanh, false), {2}};
  BOOST_TEST(b.reg.specs.size() == 1u);
  BOOST_TEST(b.st.vars.size() == 1u);
}

BOOST_AUTO_TEST_CASE(dense_gradients_match_finite_differences_for_each_activation) {
  for (auto act : {activation::linear, activation::relu, activation::tanh, activation::sigmoid,
                   activation::softmax}) {
    BOOST_TEST_CONTEXT("activation " << to_string(act)) {
      const matrix x = act == activation::relu ? relu_safe_input(5, 4, 3, 11, 0.02f) : random_matrix(5, 4, 21);
      auto l = layers::dense(3, act);
      auto res = check_layer_gradients(*l, {x}, {}, 11);
      BOOST_TEST(res.passed, res.worst);
      BOOST_TEST(res.checked == 12 + 3 + 20);
    }
  }
  auto no_bias = layers::dense(3, activation::tanh, false);
  auto res = check_layer_gradients(*no_bias, {random_matrix(4, 2, 5)});
  BOOST_TEST(res.passed, res.worst);
}

BOOST_AUTO_TEST_CASE(shared_dense_declares_variables_once_and_sums_gradients) {
  auto l = layers::dense(3, activation::tanh);
  test_registry reg;
  node_state s1, s2;
  build_layer(*l, reg, {4}, s1);
  build_layer(*l, reg, {4}, s2);
  BOOST_TEST(reg.specs.size() == 2u);
  BOOST_TEST(s1.vars == s2.vars);
  // A second application with another input width cannot share the kernel.
  node_state s3;
  BOOST_CHECK_THROW(build_layer(*l, reg, {5}, s3), std::invalid_argument);

  parameter_store params{reg.specs, 9};
  matrix x1 = random_matrix(3, 4, 1);
  matrix x2 = random_matrix(2, 4, 2);
  const forward_context fctx{&params, false, 0, 0};
  matrix o1, o2;
  l->forward(fctx, {&x1}, o1, s1);
  l->forward(fctx, {&x2}, o2, s2);
  const matrix r1 = random_matrix(3, 3, 3);
  const matrix r2 = random_matrix(2, 3, 4);

  // Each application alone, then both into one store: the sums must match.
  auto grads_of = [&](bool first, bool second) {
    gradient_store g{reg.specs};
    const backward_context b{&params, &g};
    if (first) l->backward(b, {&x1}, o1, r1, {nullptr}, s1);
    if (second) l->backward(b, {&x2}, o2, r2, {nullptr}, s2);
    return g;
  };
  auto g1 = grads_of(true, false);
  auto g2 = grads_of(false, true);
  auto both = grads_of(true, true);
  for (size_t v = 0; v < 2; ++v)
    BOOST_TEST((both.dense[v] - g1.dense[v] - g2.dense[v]).cwiseAbs().maxCoeff() < 1e-5f);

  // And the sum is the gradient of sum(o1 .* r1) + sum(o2 .* r2).
  node_state p1 = s1, p2 = s2;
  matrix q1, q2;
  auto objective = [&] {
    l->forward(fctx, {&x1}, q1, p1);
    l->forward(fctx, {&x2}, q2, p2);
    return weighted_sum(q1, r1) + weighted_sum(q2, r2);
  };
  auto res = check_gradients(objective, {{"kernel", &params[0], both.dense[0]}, {"bias", &params[1], both.dense[1]}});
  BOOST_TEST(res.passed, res.worst);
}

BOOST_AUTO_TEST_CASE(dense_backward_adds_to_existing_gradients_and_skips_unrequested_inputs) {
  applied a{layers::dense(2), {3}};
  const matrix x = random_matrix(4, 3, 1);
  const matrix out = a.forward(x);
  const matrix d = random_matrix(4, 2, 2);
  gradient_store g{a.reg.specs};
  g.dense[0].setConstant(1.0f);
  g.dense[1].setConstant(-2.0f);
  a.op->backward({&a.params, &g}, {&x}, out, d, {nullptr}, a.st);
  const matrix dw = x.transpose() * d;
  const row_vector db = d.colwise().sum();
  BOOST_TEST((g.dense[0].array() - 1.0f - dw.array()).abs().maxCoeff() < 1e-5f);
  BOOST_TEST((g.dense[1].row(0).array() + 2.0f - db.array()).abs().maxCoeff() < 1e-5f);
}

BOOST_AUTO_TEST_CASE(dense_reuses_its_buffers_across_steps) {
  applied a{layers::dense(8, activation::sigmoid), {5}};
  const matrix x = random_matrix(16, 5, 1);
  const matrix g = random_matrix(16, 8, 2);
  gradient_store grads{a.reg.specs};
  matrix out, dx;
  const forward_context f{&a.params, true, 0, 0};
  auto step = [&] {
    a.op->forward(f, {&x}, out, a.st);
    a.op->backward({&a.params, &grads}, {&x}, out, g, {&dx}, a.st);
  };
  step();
  const float* buffers[] = {out.data(), dx.data(), a.st.scratch[0].data()};
  step();
  BOOST_TEST(out.data() == buffers[0]);
  BOOST_TEST(dx.data() == buffers[1]);
  BOOST_TEST(a.st.scratch[0].data() == buffers[2]);
}

BOOST_AUTO_TEST_CASE(gemm_tuning_caps_the_l1_size_and_keeps_results) {
  applied a{layers::dense(300), {800}};
  const matrix x = random_matrix(64, 800, 1);
  const matrix before = a.forward(x);
  tune_gemm_blocking();
  BOOST_TEST(Eigen::l1CacheSize() <= 32 * 1024);
  const matrix after = a.forward(x);
  BOOST_TEST((after - before).cwiseAbs().maxCoeff() < 1e-4f);
}

BOOST_AUTO_TEST_CASE(dense_build_rejects_input_counts_and_widths_naming_the_layer) {
  auto l = layers::dense(4);
  l->set_name("dense_2");
  test_registry reg;
  node_state st;
  auto two = error_of([&] { build_layer(*l, reg, {3, 5}, st); });
  BOOST_TEST(contains(two, "dense_2"), two);
  BOOST_TEST(contains(two, "3, 5"), two);
  auto none = error_of([&] { build_layer(*l, reg, {}, st); });
  BOOST_TEST(contains(none, "dense_2"), none);
  BOOST_CHECK_THROW(layers::dense(0), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(dense_forward_rejects_a_batch_of_another_width) {
  auto l = layers::dense(4);
  l->set_name("dense_2");
  applied a{l, {3}};
  const matrix x = random_matrix(2, 5, 1);
  auto msg = error_of([&] { a.forward(x); });
  BOOST_TEST(contains(msg, "dense_2"), msg);
  BOOST_TEST(contains(msg, "[2 x 5]"), msg);
  BOOST_TEST(contains(msg, "[3 x 4]"), msg);
}

BOOST_AUTO_TEST_CASE(describe_gives_the_full_configuration) {
  BOOST_TEST(layers::dense(256, activation::relu)->describe() ==
             "dense(256, relu, use_bias=true, kernel=glorot_uniform, bias=zeros)");
  BOOST_TEST(layers::dense(10, activation::linear, false, he_normal())->describe() ==
             "dense(10, linear, use_bias=false, kernel=he_normal)");
  BOOST_TEST(layers::dense(1)->kind() == "dense");
  BOOST_TEST(layers::dropout(0.25f)->describe() == "dropout(0.25)");
  BOOST_TEST(layers::embedding(1000, 8)->describe() == "embedding(1000, 8, concat, init=uniform(-0.05, 0.05))");
  BOOST_TEST(layers::embedding(50, 4, layers::combiner::mean, zeros())->describe() ==
             "embedding(50, 4, mean, init=zeros)");
  BOOST_TEST(layers::relu()->kind() == "relu");
  BOOST_TEST(layers::softmax()->describe() == "softmax");
  BOOST_TEST(layers::concatenate()->kind() == "concatenate");
  BOOST_TEST(layers::add()->kind() == "add");
}

// ---- activations -----------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(activations_match_their_formulas) {
  const matrix x = from_rows({{-2.0f, -0.5f, 0.0f, 1.5f}});
  auto value = [&](layer_ptr l) { return applied{std::move(l), {4}}.forward(x); };
  const matrix r = value(layers::relu());
  const matrix t = value(layers::tanh());
  const matrix s = value(layers::sigmoid());
  for (Eigen::Index c = 0; c < 4; ++c) {
    const float v = x(0, c);
    BOOST_TEST(r(0, c) == std::max(v, 0.0f));
    BOOST_TEST(t(0, c) == std::tanh(v), boost::test_tools::tolerance(1e-5f));
    BOOST_TEST(s(0, c) == 1.0f / (1.0f + std::exp(-v)), boost::test_tools::tolerance(1e-5f));
  }
}

BOOST_AUTO_TEST_CASE(softmax_rows_sum_to_one_and_stay_finite_for_large_logits) {
  const matrix x = from_rows({{1.0f, 2.0f, 3.0f}, {1000.0f, 1000.0f, -1000.0f}});
  const matrix y = applied{layers::softmax(), {3}}.forward(x);
  const double e1 = std::exp(1.0), e2 = std::exp(2.0), e3 = std::exp(3.0);
  BOOST_TEST(y(0, 0) == e1 / (e1 + e2 + e3), boost::test_tools::tolerance(1e-5));
  BOOST_TEST(y(0, 2) == e3 / (e1 + e2 + e3), boost::test_tools::tolerance(1e-5));
  BOOST_TEST(y.allFinite());
  BOOST_TEST(y(1, 0) == 0.5f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(y(1, 2) == 0.0f);
  for (Eigen::Index r = 0; r < 2; ++r) BOOST_TEST(y.row(r).sum() == 1.0f, boost::test_tools::tolerance(1e-5f));
}

BOOST_AUTO_TEST_CASE(activation_gradients_match_finite_differences) {
  // relu away from its kink: |x| >= 0.1 > the step.
  matrix xr = random_matrix(4, 5, 31);
  for (Eigen::Index i = 0; i < xr.size(); ++i) xr.data()[i] += xr.data()[i] >= 0 ? 0.1f : -0.1f;
  auto relu = layers::relu();
  auto res = check_layer_gradients(*relu, {xr});
  BOOST_TEST(res.passed, res.worst);
  BOOST_TEST(res.checked == 20);
  for (auto act : {activation::tanh, activation::sigmoid, activation::softmax}) {
    BOOST_TEST_CONTEXT("activation " << to_string(act)) {
      auto l = layers::activation_layer(act);
      auto r = check_layer_gradients(*l, {random_matrix(4, 5, 32, -3.0f, 3.0f)});
      BOOST_TEST(r.passed, r.worst);
    }
  }
}

BOOST_AUTO_TEST_CASE(activation_layer_rejects_a_batch_of_another_width) {
  auto l = layers::relu();
  l->set_name("relu_3");
  applied a{l, {4}};
  const matrix x = random_matrix(2, 6, 1);
  auto msg = error_of([&] { a.forward(x); });
  BOOST_TEST(contains(msg, "relu_3"), msg);
  BOOST_TEST(contains(msg, "[2 x 6]"), msg);
  test_registry reg;
  node_state st;
  auto two = error_of([&] { build_layer(*l, reg, {4, 4}, st); });
  BOOST_TEST(contains(two, "relu_3"), two);
}

// ---- dropout ---------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(dropout_is_the_identity_at_inference) {
  applied a{layers::dropout(0.5f), {6}};
  const matrix x = random_matrix(5, 6, 1);
  const matrix out = a.forward(x, false, 123);
  BOOST_TEST((out - x).cwiseAbs().maxCoeff() == 0.0f);
  matrix d;
  const matrix g = random_matrix(5, 6, 2);
  a.op->backward({&a.params, nullptr}, {&x}, out, g, {&d}, a.st);
  BOOST_TEST((d - g).cwiseAbs().maxCoeff() == 0.0f);
}

BOOST_AUTO_TEST_CASE(dropout_mask_depends_only_on_step_seed_and_node) {
  applied a{layers::dropout(0.5f), {8}};
  const matrix x = matrix::Ones(16, 8);
  const matrix m1 = a.forward(x, true, 42);
  const matrix m2 = a.forward(x, true, 42);
  const matrix other = a.forward(x, true, 43);
  const matrix other_node = a.forward_all({&x}, true, 42, 1);
  BOOST_TEST((m1 - m2).cwiseAbs().maxCoeff() == 0.0f);
  BOOST_TEST((m1 - other).cwiseAbs().maxCoeff() > 0.0f);
  BOOST_TEST((m1 - other_node).cwiseAbs().maxCoeff() > 0.0f);
  // Element (r, c) is draw(step_seed, node_index, r * cols + c).
  for (Eigen::Index r = 0; r < 16; ++r)
    for (Eigen::Index c = 0; c < 8; ++c) {
      const bool keep = uniform01(draw(42, 0, static_cast<uint64_t>(r * 8 + c))) >= 0.5f;
      BOOST_TEST(m1(r, c) == (keep ? 2.0f : 0.0f));
    }
}

BOOST_AUTO_TEST_CASE(dropout_keeps_the_mean_by_scaling) {
  applied a{layers::dropout(0.3f), {100}};
  const matrix x = matrix::Ones(200, 100);
  const matrix out = a.forward(x, true, 7);
  const double dropped = (out.array() == 0.0f).cast<double>().mean();
  BOOST_TEST(dropped == 0.3, boost::test_tools::tolerance(0.05));
  BOOST_TEST(out.cast<double>().mean() == 1.0, boost::test_tools::tolerance(0.02));
  BOOST_TEST(out.maxCoeff() == 1.0f / 0.7f, boost::test_tools::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(dropout_gradient_matches_finite_differences_in_training) {
  auto l = layers::dropout(0.4f);
  forward_context ctx;
  ctx.training = true;
  ctx.step_seed = 2024;
  auto res = check_layer_gradients(*l, {random_matrix(6, 5, 3)}, ctx);
  BOOST_TEST(res.passed, res.worst);
  BOOST_TEST(res.checked == 30);
}

BOOST_AUTO_TEST_CASE(dropout_rejects_a_rate_outside_zero_one) {
  BOOST_CHECK_THROW(layers::dropout(1.0f), std::invalid_argument);
  BOOST_CHECK_THROW(layers::dropout(-0.1f), std::invalid_argument);
  BOOST_CHECK_THROW(layers::dropout(std::nanf("")), std::invalid_argument);
  auto msg = error_of([] { layers::dropout(1.5f); });
  BOOST_TEST(contains(msg, "1.5"), msg);
  BOOST_CHECK_NO_THROW(layers::dropout(0.0f));
}

// ---- embedding -------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(embedding_looks_up_rows_for_each_combiner) {
  const matrix ids = from_rows({{2, 0}, {1, 1}});
  for (auto c : {layers::combiner::concat, layers::combiner::sum, layers::combiner::mean}) {
    BOOST_TEST_CONTEXT("combiner " << layers::to_string(c)) {
      applied a{layers::embedding(4, 3, c), {2}};
      BOOST_TEST(a.out_width == (c == layers::combiner::concat ? 6 : 3));
      BOOST_TEST(a.reg.specs[0].name == "embedding/embeddings");
      BOOST_TEST(a.reg.specs[0].sparse);
      const matrix& e = a.params[a.st.vars[0]];
      const matrix out = a.forward(ids);
      for (Eigen::Index r = 0; r < 2; ++r) {
        const row_vector e0 = e.row(static_cast<Eigen::Index>(ids(r, 0)));
        const row_vector e1 = e.row(static_cast<Eigen::Index>(ids(r, 1)));
        matrix want;
        if (c == layers::combiner::concat) {
          want.resize(1, 6);
          want << e0, e1;
        } else {
          want = e0 + e1;
          if (c == layers::combiner::mean) want *= 0.5f;
        }
        BOOST_TEST((out.row(r) - want).cwiseAbs().maxCoeff() < 1e-7f);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(embedding_gradients_are_sorted_unique_rows_matching_finite_differences) {
  // Ids repeat within rows and across rows; rows 1, 4 and 6 of the table are never used.
  const matrix ids = from_rows({{3, 0, 3}, {5, 2, 0}, {7, 7, 7}});
  for (auto c : {layers::combiner::concat, layers::combiner::sum, layers::combiner::mean}) {
    BOOST_TEST_CONTEXT("combiner " << layers::to_string(c)) {
      auto l = layers::embedding(8, 4, c);
      auto res = check_layer_gradients(*l, {ids});
      BOOST_TEST(res.passed, res.worst);
      BOOST_TEST(res.checked == 32);  // the whole table: untouched rows must have no gradient

      applied a{layers::embedding(8, 4, c), {3}};
      const matrix out = a.forward(ids);
      const matrix g = random_matrix(out.rows(), out.cols(), 5);
      gradient_store grads{a.reg.specs};
      a.op->backward({&a.params, &grads}, {&ids}, out, g, {nullptr}, a.st);
      const auto& sr = grads.sparse[0];
      BOOST_TEST(sr.ids == (std::vector<int64_t>{0, 2, 3, 5, 7}), boost::test_tools::per_element());
      BOOST_TEST(sr.rows.rows() == 5);
      BOOST_TEST(grads.dense[0].size() == 0);

      // The same rows accumulate_rows gives for the per-occurrence gradients.
      std::vector<int64_t> occ;
      matrix per(9, 4);
      for (Eigen::Index r = 0; r < 3; ++r)
        for (Eigen::Index j = 0; j < 3; ++j) {
          occ.push_back(static_cast<int64_t>(ids(r, j)));
          if (c == layers::combiner::concat)
            per.row(r * 3 + j) = g.row(r).segment(j * 4, 4);
          else
            per.row(r * 3 + j) = g.row(r) * (c == layers::combiner::mean ? 1.0f / 3.0f : 1.0f);
        }
      sparse_rows want;
      accumulate_rows(want, occ, per);
      BOOST_TEST(sr.ids == want.ids, boost::test_tools::per_element());
      BOOST_TEST((sr.rows - want.rows).cwiseAbs().maxCoeff() < 1e-6f);
    }
  }
}

BOOST_AUTO_TEST_CASE(shared_embedding_merges_rows_of_both_applications) {
  auto l = layers::embedding(6, 2, layers::combiner::sum);
  test_registry reg;
  node_state s1, s2;
  build_layer(*l, reg, {2}, s1);
  build_layer(*l, reg, {1}, s2);
  BOOST_TEST(reg.specs.size() == 1u);
  parameter_store params{reg.specs, 1};
  const matrix a = from_rows({{4, 1}});
  const matrix b = from_rows({{1}, {0}});
  matrix oa, ob;
  l->forward({&params}, {&a}, oa, s1);
  l->forward({&params}, {&b}, ob, s2);
  const matrix ga = from_rows({{1, 2}});
  const matrix gb = from_rows({{10, 20}, {100, 200}});
  gradient_store grads{reg.specs};
  l->backward({&params, &grads}, {&a}, oa, ga, {nullptr}, s1);
  l->backward({&params, &grads}, {&b}, ob, gb, {nullptr}, s2);
  const auto& sr = grads.sparse[0];
  BOOST_TEST(sr.ids == (std::vector<int64_t>{0, 1, 4}), boost::test_tools::per_element());
  BOOST_TEST(sr.rows(0, 0) == 100.0f);
  BOOST_TEST(sr.rows(1, 0) == 11.0f);
  BOOST_TEST(sr.rows(1, 1) == 22.0f);
  BOOST_TEST(sr.rows(2, 1) == 2.0f);
}

BOOST_AUTO_TEST_CASE(embedding_rejects_ids_naming_layer_row_column_and_value) {
  auto l = layers::embedding(10, 2);
  l->set_name("embedding_1");
  applied a{l, {2}};
  auto msg_for = [&](float bad) {
    matrix x = from_rows({{1, 2}, {3, 4}});
    x(1, 0) = bad;
    return error_of([&] { a.forward(x); });
  };
  for (float bad : {2.5f, -1.0f, 10.0f, std::nanf("")}) {
    auto msg = msg_for(bad);
    BOOST_TEST_CONTEXT("id " << bad) {
      BOOST_TEST(contains(msg, "embedding_1"), msg);
      BOOST_TEST(contains(msg, "row 1"), msg);
      BOOST_TEST(contains(msg, "column 0"), msg);
      BOOST_TEST(contains(msg, fmt::format("{}", bad)), msg);
    }
  }
  const matrix wide = matrix::Zero(2, 3);
  auto msg = error_of([&] { a.forward(wide); });
  BOOST_TEST(contains(msg, "embedding_1"), msg);
  BOOST_TEST(contains(msg, "[2 x 3]"), msg);
  BOOST_TEST(!l->inputs_differentiable());
  BOOST_CHECK_THROW(layers::embedding(0, 4), std::invalid_argument);
  BOOST_CHECK_THROW(layers::embedding(4, 0), std::invalid_argument);
}

// A worker may give the layer some of the table's rows (its batch's, renumbered): an id
// past them is refused, not read out of bounds.
BOOST_AUTO_TEST_CASE(embedding_given_some_rows_refuses_an_id_past_them) {
  applied a{layers::embedding(10, 2), {2}};
  a.params.adopt(0, std::make_shared<matrix>(from_rows({{1, 2}, {3, 4}, {5, 6}})));
  auto out = a.forward(from_rows({{2, 0}}));
  BOOST_TEST(out(0, 0) == 5.0f);
  BOOST_TEST(out(0, 3) == 2.0f);
  auto msg = error_of([&] { a.forward(from_rows({{1, 3}})); });
  BOOST_TEST(contains(msg, "column 1 is 3, past the 3 rows it was given"), msg);
}

// ---- merge -----------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(concatenate_joins_columns_and_splits_gradients) {
  const matrix a = from_rows({{1, 2}, {3, 4}});
  const matrix b = from_rows({{5}, {6}});
  applied c{layers::concatenate(), {2, 1}};
  BOOST_TEST(c.out_width == 3);
  const matrix out = c.forward_all({&a, &b});
  BOOST_TEST((out - from_rows({{1, 2, 5}, {3, 4, 6}})).cwiseAbs().maxCoeff() == 0.0f);

  auto l = layers::concatenate();
  auto res = check_layer_gradients(*l, {random_matrix(3, 2, 1), random_matrix(3, 4, 2), random_matrix(3, 1, 3)});
  BOOST_TEST(res.passed, res.worst);
  BOOST_TEST(res.checked == 21);

  const matrix short_b = from_rows({{5}});
  auto msg = error_of([&] { c.forward_all({&a, &short_b}); });
  BOOST_TEST(contains(msg, "concatenate"), msg);
  BOOST_TEST(contains(msg, "[1 x 1]"), msg);
}

BOOST_AUTO_TEST_CASE(add_sums_inputs_and_passes_gradients_through) {
  const matrix a = from_rows({{1, 2}, {3, 4}});
  const matrix b = from_rows({{10, 20}, {30, 40}});
  applied s{layers::add(), {2, 2, 2}};
  const matrix out = s.forward_all({&a, &b, &a});
  BOOST_TEST((out - from_rows({{12, 24}, {36, 48}})).cwiseAbs().maxCoeff() == 0.0f);

  auto l = layers::add();
  auto res = check_layer_gradients(*l, {random_matrix(3, 4, 1), random_matrix(3, 4, 2)});
  BOOST_TEST(res.passed, res.worst);
  BOOST_TEST(res.checked == 24);
}

BOOST_AUTO_TEST_CASE(add_build_rejects_unequal_widths_listing_them) {
  auto l = layers::add();
  l->set_name("add_4");
  test_registry reg;
  node_state st;
  auto msg = error_of([&] { build_layer(*l, reg, {3, 5}, st); });
  BOOST_TEST(contains(msg, "add_4"), msg);
  BOOST_TEST(contains(msg, "3, 5"), msg);
  auto one = error_of([&] { build_layer(*l, reg, {3}, st); });
  BOOST_TEST(contains(one, "add_4"), one);
}

// ---- the checker itself ----------------------------------------------------------------

BOOST_AUTO_TEST_CASE(gradient_checker_catches_a_wrong_sign_and_a_missing_factor) {
  // f(x) = sum(x^2 .* w): the gradient is 2 x .* w.
  matrix x = random_matrix(3, 3, 1);
  const matrix w = random_matrix(3, 3, 2);
  auto objective = [&] { return weighted_sum(x.cwiseProduct(x), w); };
  const matrix good = 2.0f * x.cwiseProduct(w);
  BOOST_TEST(check_gradients(objective, {{"x", &x, good}}).passed);
  BOOST_TEST(!check_gradients(objective, {{"x", &x, -good}}).passed);
  BOOST_TEST(!check_gradients(objective, {{"x", &x, 0.5f * good}}).passed);
}

BOOST_AUTO_TEST_SUITE_END()
