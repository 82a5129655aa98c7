#pragma once
// The names a README or header snippet may use without declaring them, by context
// (tools/snippets.py). Nothing here runs: the snippets are compiled, not executed.
#include <actortrain/dataset/all.hpp>
#include <actortrain/model/all.hpp>

#include <cstdio>
#include <memory>
#include <vector>

#ifdef SNIPPETS_WITH_CAF
#include <caf/all.hpp>

#include <actortrain/actors/all.hpp>
#include <actortrain/actors/cluster/callbacks.hpp>
#include <actortrain/actors/jobs/jobs.hpp>
#include <actortrain/actors/net/process.hpp>
#include <actortrain/actors/sim/simulator.hpp>

#include <boost/test/unit_test.hpp>
#endif

namespace snippet_context {

namespace ds = actortrain::dataset;
namespace md = actortrain::model;

inline ds::dataset some_data() { return ds::from_tensor_slices({md::matrix(8, 784)}, md::matrix(8, 1)); }
inline md::model some_model() { return md::model::sequential(784, {md::layers::dense(10)}); }

#ifdef SNIPPETS_WITH_CAF
inline actortrain::job my_job() { return actortrain::jobs::fashion_mnist(); }
#endif

}  // namespace snippet_context

#define SNIPPET_NONE_ARGS
#define SNIPPET_NONE_PRELUDE

#define SNIPPET_IN_MODEL_ARGS
#define SNIPPET_IN_MODEL_PRELUDE using namespace actortrain::model;

#define SNIPPET_IN_DATASET_ARGS
#define SNIPPET_IN_DATASET_PRELUDE      \
  using namespace actortrain::dataset; \
  std::string images = "train-images-idx3-ubyte.gz", labels = "train-labels-idx1-ubyte.gz"; \
  uint64_t epoch = 0;

#define SNIPPET_APP_ARGS
#define SNIPPET_APP_PRELUDE                                                                  \
  using namespace actortrain;                                                                \
  [[maybe_unused]] ds::dataset train = some_data(), test = some_data(), data = some_data(); \
  [[maybe_unused]] md::model mlp = some_model(), net = some_model();                        \
  [[maybe_unused]] std::vector<md::metric_ptr> metrics;                                      \
  [[maybe_unused]] md::fit_options opts;                                                     \
  [[maybe_unused]] ds::dataset_fn dataset_fn = [](const ds::input_context&) { return some_data(); };

#define SNIPPET_TRAINER_ARGS
#define SNIPPET_TRAINER_PRELUDE \
  SNIPPET_APP_PRELUDE           \
  md::trainer t{some_model(), md::make_adam(), md::softmax_cross_entropy()};

#define SNIPPET_SYSTEM_ARGS
#define SNIPPET_SYSTEM_PRELUDE SNIPPET_APP_PRELUDE

#define SNIPPET_WITH_SYS_ARGS
#define SNIPPET_WITH_SYS_PRELUDE \
  SNIPPET_APP_PRELUDE            \
  caf::actor_system_config cfg;  \
  actortrain::configure(cfg);    \
  caf::actor_system sys{cfg};    \
  [[maybe_unused]] actortrain::cluster_spec spec;

#define SNIPPET_CLUSTER_ARGS
#define SNIPPET_CLUSTER_PRELUDE                                                  \
  SNIPPET_WITH_SYS_PRELUDE                                                       \
  actortrain::cluster c{sys, spec, some_model(), *md::make_adam(), md::softmax_cross_entropy()};

#define SNIPPET_MAIN_ARGS [[maybe_unused]] int argc, [[maybe_unused]] char** argv
#define SNIPPET_MAIN_PRELUDE SNIPPET_APP_PRELUDE

#define SNIPPET_SIM_ARGS
#define SNIPPET_SIM_PRELUDE using namespace actortrain;
