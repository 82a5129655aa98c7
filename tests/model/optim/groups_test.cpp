// Variables with optimizers of their own (model/optim/groups.hpp): a variable is updated
// by its group's optimizer and the rest by the default one, a group's hyperparameters are
// "GROUP/NAME", and groups that do not fit the model are refused naming the variable.
#include <actortrain/model/layers/all.hpp>
#include <actortrain/model/model.hpp>
#include <actortrain/model/optim/all.hpp>

#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

using namespace actortrain::model;

namespace {

model wide_and_deep() {
  graph g;
  auto ids = g.input(2, "ids");
  auto wide = layers::embedding(10, 1, layers::combiner::sum);
  wide->set_name("wide_embedding");
  auto deep = g.apply(layers::dense(1), g.apply(layers::embedding(10, 3), ids));
  return model::functional(g, {ids}, g.apply(layers::add(), {g.apply(wide, ids), deep}));
}

std::string what(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(optim_groups)

BOOST_AUTO_TEST_CASE(each_variable_is_updated_by_its_groups_optimizer) {
  optimizer_set opts{*make_adam({0.01}), {{"wide", {"wide_embedding/"}, make_adagrad({0.5})}}};
  BOOST_TEST(opts.for_variable("wide_embedding/embeddings").name() == "adagrad");
  BOOST_TEST(opts.for_variable("dense/kernel").name() == "adam");
  BOOST_TEST(opts.group_of("wide_embedding/embeddings") == "wide");
  BOOST_TEST(opts.group_of("dense/kernel") == "");
  // The same update as the group's optimizer alone.
  auto alone = make_adagrad({0.5});
  std::vector<float> a{1, 2, 3}, b{1, 2, 3};
  const std::vector<float> g{0.5f, -1, 2};
  auto sa = alone->make_slots(3);
  auto sb = opts.for_variable("wide_embedding/embeddings").make_slots(3);
  alone->apply_dense(a.data(), g.data(), 3, sa);
  opts.for_variable("wide_embedding/embeddings").apply_dense(b.data(), g.data(), 3, sb);
  BOOST_TEST(a == b);
  BOOST_TEST(opts.for_variable("wide_embedding/embeddings").slot_names() == std::vector<std::string>{"accumulator"});
  BOOST_TEST((opts.for_variable("dense/kernel").slot_names() == std::vector<std::string>{"m", "v"}));
}

BOOST_AUTO_TEST_CASE(a_groups_hyperparameters_carry_its_name) {
  optimizer_set opts{*make_adam({0.01}), {{"wide", {"wide_embedding/"}, make_adagrad({0.5})}}};
  opts.set_hyperparam("wide/learning_rate", 0.25);
  opts.set_hyperparam("learning_rate", 0.002);  // the default optimizer's only
  BOOST_TEST(opts.hyperparam("wide/learning_rate") == 0.25);
  BOOST_TEST(opts.hyperparam("learning_rate") == 0.002);
  BOOST_TEST(opts.for_variable("wide_embedding/embeddings").hyperparam("learning_rate") == 0.25);
  bool listed = false;
  for (auto& [k, v] : opts.hyperparams()) listed = listed || (k == "wide/initial_accumulator_value" && v == 0.1);
  BOOST_TEST(listed);
  BOOST_TEST(what([&] { opts.set_hyperparam("deep/learning_rate", 1); }).find("no variable group 'deep'") !=
             std::string::npos);
  BOOST_TEST(what([&] { opts.set_hyperparam("wide/beta_1", 0.5); }).find("beta_1") != std::string::npos);
  BOOST_TEST(opts.hyperparam("wide/learning_rate") == 0.25);  // a refused change changed nothing
  // A copy is independent; groups() hands out the current hyperparameters.
  optimizer_set copy = opts;
  copy.set_hyperparam("wide/learning_rate", 0.75);
  BOOST_TEST(opts.hyperparam("wide/learning_rate") == 0.25);
  BOOST_TEST(opts.groups().at(0).optimizer->hyperparam("learning_rate") == 0.25);
  BOOST_TEST(opts.describe().find(" + wide: adagrad(learning_rate=0.25") != std::string::npos, opts.describe());
}

BOOST_AUTO_TEST_CASE(groups_that_do_not_fit_are_refused_naming_the_problem) {
  auto m = wide_and_deep();
  BOOST_CHECK_NO_THROW(check_groups(m, {{"wide", {"wide_embedding/"}, make_adagrad()}}));
  BOOST_TEST(what([&] { check_groups(m, {{"wide", {"wide/"}, make_adagrad()}}); })
               .find("'wide/' names no variable of the model") != std::string::npos);
  BOOST_TEST(what([&] {
               check_groups(m, {{"a", {"wide_embedding/"}, make_adagrad()},
                                {"b", {"wide_embedding/embeddings"}, make_sgd()}});
             }).find("variable wide_embedding/embeddings is in two groups: 'a' and 'b'") != std::string::npos);
  BOOST_TEST(what([&] { optimizer_set s(*make_adam(), {{"", {"x"}, make_sgd()}}); }).find("letters, digits") !=
             std::string::npos);
  BOOST_TEST(what([&] { optimizer_set s(*make_adam(), {{"w", {"x"}, nullptr}}); }).find("has no optimizer") !=
             std::string::npos);
  BOOST_TEST(what([&] { optimizer_set s(*make_adam(), {{"w", {"x"}, make_sgd()}, {"w", {"y"}, make_sgd()}}); })
               .find("given twice") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
