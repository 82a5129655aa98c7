// Custom training steps on the trainer (Keras's train_step override): the built-in step
// through the hook changes nothing, clipping changes exactly what it should (read from
// the variables the optimizer moved), a step's extra logs reach the history, and a step
// without a loss is refused by name.

#include <boost/test/unit_test.hpp>

#include <actortrain/model/all.hpp>

#include <cmath>

#include "gradient_check.hpp"

using namespace actortrain::model;
using testing::random_matrix;

namespace {

trainer linear(double lr = 0.1) {
  return trainer{model::sequential(5, {layers::dense(3, layers::activation::tanh), layers::dense(1)}),
                 make_sgd({lr}), mean_squared_error(), 4};
}

struct data {
  matrix x = random_matrix(64, 5, 1);
  matrix y = random_matrix(64, 1, 2) * 10.0f;  // large errors: large gradients
};

fit_options quiet(int epochs, int64_t batch) {
  fit_options o;
  o.epochs = epochs;
  o.batch_size = batch;
  o.shuffle = false;
  o.verbose = 0;
  return o;
}

std::vector<matrix> values(const trainer& t) {
  std::vector<matrix> out;
  for (auto& v : t.structure().variables()) out.push_back(t.variable(v.name));
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(train_step_suite)

BOOST_AUTO_TEST_CASE(the_built_in_step_through_the_hook_is_the_built_in_step) {
  data d;
  auto a = linear(), b = linear();
  b.set_train_step({"default", [](step_context& s) { return default_train_step(s); }});
  a.fit(d.x, d.y, quiet(2, 16));
  b.fit(d.x, d.y, quiet(2, 16));
  auto va = values(a), vb = values(b);
  for (size_t i = 0; i < va.size(); ++i) BOOST_TEST((va[i] - vb[i]).cwiseAbs().maxCoeff() == 0.0f);
}

BOOST_AUTO_TEST_CASE(clipping_in_a_custom_step_scales_the_applied_update_to_the_norm) {
  data d;
  auto plain = linear(), clipped = linear();
  const double max_norm = 0.5;
  clipped.set_train_step({"clip(0.5)", [max_norm](step_context& s) {
    auto l = default_train_step(s);
    clip_by_global_norm(s.gradients(), max_norm);
    return l;
  }});
  auto before = values(plain);
  plain.fit(d.x, d.y, quiet(1, 64));  // one step of SGD: the update is -lr * g
  clipped.fit(d.x, d.y, quiet(1, 64));
  auto vp = values(plain), vc = values(clipped);
  double norm_p = 0, norm_c = 0;
  for (size_t i = 0; i < vp.size(); ++i) {
    norm_p += ((vp[i] - before[i]) / 0.1f).squaredNorm();
    norm_c += ((vc[i] - before[i]) / 0.1f).squaredNorm();
  }
  norm_p = std::sqrt(norm_p);
  norm_c = std::sqrt(norm_c);
  BOOST_TEST(norm_p > 5 * max_norm);  // the test means something: the plain step is far above the clip
  BOOST_TEST(norm_c == max_norm, boost::test_tools::tolerance(1e-4));
  // Same direction: the clipped update is the plain one scaled.
  for (size_t i = 0; i < vp.size(); ++i) {
    matrix scaled = (vp[i] - before[i]) * static_cast<float>(max_norm / norm_p);
    BOOST_TEST(((vc[i] - before[i]) - scaled).cwiseAbs().maxCoeff() < 1e-5f);
  }
}

BOOST_AUTO_TEST_CASE(a_steps_extra_logs_are_averaged_into_the_history) {
  data d;
  auto t = linear();
  t.set_train_step({"with_norm", [](step_context& s) {
    auto l = default_train_step(s);
    l["grad_norm"] = clip_by_global_norm(s.gradients(), 1e9);  // measures, clips nothing
    l["rows"] = static_cast<double>(s.data().rows());
    return l;
  }});
  auto h = t.fit(d.x, d.y, quiet(2, 16));
  BOOST_TEST(h["grad_norm"].size() == 2u);
  BOOST_TEST(h["grad_norm"][0] > 0);
  BOOST_TEST(h["rows"][1] == 16.0);
}

BOOST_AUTO_TEST_CASE(a_step_without_a_loss_is_refused_naming_it) {
  data d;
  auto t = linear();
  t.set_train_step({"forgetful", [](step_context& s) {
    default_train_step(s);
    return logs{{"lost", 1.0}};
  }});
  BOOST_CHECK_EXCEPTION(t.fit(d.x, d.y, quiet(1, 16)), std::invalid_argument, [](const std::invalid_argument& e) {
    return std::string(e.what()).find("train step 'forgetful' returned no \"loss\"") != std::string::npos;
  });
  t.set_train_step({});  // the built-in step again
  BOOST_CHECK_NO_THROW(t.fit(d.x, d.y, quiet(1, 16)));
}

BOOST_AUTO_TEST_CASE(clip_by_global_norm_counts_dense_and_row_gradients) {
  std::vector<variable_spec> specs(2);
  specs[0].name = "w";
  specs[0].shape = {2, 2};
  specs[1].name = "e";
  specs[1].shape = {10, 2};
  specs[1].sparse = true;
  gradient_store g{specs};
  g.dense[0] << 3, 0, 0, 0;
  g.sparse[1].ids = {4};
  g.sparse[1].rows.resize(1, 2);
  g.sparse[1].rows << 0, 4;
  BOOST_TEST(clip_by_global_norm(g, 1.0) == 5.0, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(g.dense[0](0, 0) == 0.6f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(g.sparse[1].rows(0, 1) == 0.8f, boost::test_tools::tolerance(1e-6f));
  BOOST_CHECK_THROW(clip_by_global_norm(g, 0), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()
