// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// The simulator's built-in job (the planted model, sparse or dense) and the random
// shapes and replay commands of `actortrain soak` (simulator.hpp). No CAF here: the
// simulator itself (simulator.cpp) runs what these describe.
#include <actortrain/actors/sim/simulator.hpp>
#include <actortrain/dataset/all.hpp>
#include <actortrain/model/all.hpp>

#include <fmt/format.h>

namespace actortrain {

// -- the built-in job -----------------------------------------------------------------

namespace {

constexpr int64_t vocab = 24;

// y = x w + 0.25 (+ the planted weight of each example's id with `sparse`).
struct planted_data {
  model::matrix x, ids, y;
  planted_data(int64_t rows, uint64_t seed, bool sparse, int64_t stride = 1) {
    model::rng g{seed, /*stream=*/7};
    x.resize(rows, 4);
    for (Eigen::Index i = 0; i < x.size(); ++i) x.data()[i] = 2 * g.uniform() - 1;
    model::matrix w(4, 1);
    w << 1.0f, -2.0f, 0.5f, 1.5f;
    y = (x * w).array() + 0.25f;
    if (sparse) {
      ids.resize(rows, 1);
      std::vector<float> weight(vocab);
      for (auto& v : weight) v = static_cast<float>(2 * g.uniform() - 1);
      for (Eigen::Index r = 0; r < rows; ++r) {
        auto id = static_cast<int64_t>(static_cast<double>(vocab) * g.uniform() * g.uniform());
        ids(r, 0) = static_cast<float>(id * stride);
        y(r, 0) += weight[static_cast<size_t>(id)];
      }
    }
  }
};

// A dynamic table's data: its ids as 64-bit ids, far past what a float holds.
dataset::dataset keyed(const planted_data& d) {
  dataset::element e;
  e.features = {model::matrix(d.ids.rows(), 0), d.x};
  e.ids = {d.ids.cast<int64_t>().unaryExpr([](int64_t id) { return id * ((int64_t{1} << 33) + 1); })};
  e.labels = d.y;
  return dataset::from_tensor_slices(std::move(e));
}

}  // namespace

job sim_job(const sim_shape& shape, uint64_t seed) {
  if (shape.num_ps < 1 || shape.num_ps > 4)
    throw std::invalid_argument(fmt::format("simulate: num_ps = {} (1 to 4: the model has 4 variables)", shape.num_ps));
  if (shape.num_workers < 1 || shape.num_pipelines < 1 || shape.rows < 1 || shape.batch < 1 || shape.epochs < 1)
    throw std::invalid_argument("simulate: workers, pipelines, rows, batch and epochs must be >= 1");
  job j;
  j.name = "sim";
  const int64_t stride = shape.dynamic ? 7919 : 1;  // a dynamic table's ids: far apart (then past 2^33 below)
  planted_data data{shape.rows, seed, shape.sparse, stride};
  using model::layers::activation;
  if (shape.sparse) {
    model::graph g;
    auto ids = g.input(1, "ids");
    auto dense = g.input(4, "dense");
    // A dynamic table admits ids at their second gradient, evicts rows not updated for
    // 8 steps, or both, by the seed.
    const model::layers::dynamic_rows drawn[] = {{2, 0}, {0, 8}, {2, 8}};
    const auto rows = drawn[seed % 3];
    auto e = g.apply(shape.dynamic ? model::layers::dynamic_embedding(2, model::layers::combiner::sum,
                                                                      model::uniform(-0.05f, 0.05f), rows)
                                   : model::layers::embedding(vocab, 2, model::layers::combiner::sum),
                     ids);
    auto h = g.apply(model::layers::concatenate(), {e, dense});
    auto out = g.apply(model::layers::dense(1), g.apply(model::layers::dense(4, activation::tanh), h));
    j.structure = model::model::functional(g, {ids, dense}, out);
    auto all = dataset::from_tensor_slices({data.ids, data.x}, data.y);
    if (shape.dynamic) all = keyed(data);
    auto batch = shape.batch;
    j.train = [all, batch](const dataset::input_context& ctx) {
      return all.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(batch);
    };
    j.spec.partitioner = std::make_shared<model::fixed_shards>(2);  // the table's rows on two partitions
  } else {
    j.structure = model::model::sequential(4, {model::layers::dense(4, activation::tanh), model::layers::dense(1)});
    auto all = dataset::from_tensor_slices({data.x}, data.y);
    auto batch = shape.batch;
    j.train = [all, batch](const dataset::input_context& ctx) {
      return all.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(batch);
    };
  }
  j.optimizer = model::make_sgd({0.05});
  j.loss = model::mean_squared_error();
  j.fit.epochs = shape.epochs;
  if (shape.validation) {
    planted_data held{48, seed + 1, shape.sparse, stride};
    j.fit.validation = shape.dynamic  ? keyed(held).batch(shape.batch)
                       : shape.sparse ? dataset::from_tensor_slices({held.ids, held.x}, held.y).batch(shape.batch)
                                      : dataset::from_tensor_slices({held.x}, held.y).batch(shape.batch);
  }
  j.spec.num_ps = shape.num_ps;
  j.spec.num_workers = shape.num_workers;
  j.spec.num_dataset_shards = shape.num_pipelines;
  j.spec.steps_per_execution = shape.steps_per_execution;
  j.spec.tasks_in_flight = shape.tasks_in_flight;
  j.spec.pull_ahead = shape.pull_ahead;
  j.spec.speculate_after = shape.speculate_after;
  j.spec.pull_every = shape.pull_every;
  j.spec.local_learning_rate = shape.pull_every > 1 ? 0.05 : 0.0;
  j.spec.push_every = shape.push_every;
  j.spec.checkpoint_shared = shape.checkpoint_shared;
  j.spec.seed = seed;
  j.spec.request_timeout = std::chrono::seconds(5);
  j.spec.consistency = shape.consistency;
  if (shape.callbacks) {
    // Training loss watched in mode max: it stops improving at once, so the run stops
    // after epoch 2 and ends with epoch 1's kept state; and a schedule at every epoch.
    j.callbacks.push_back(std::make_shared<early_stopping>(early_stopping_options{"loss", 1, 0, "max", true}));
    j.callbacks.push_back(learning_rate_schedule(exponential_decay(0.05, 0.7)));
  }
  return j;
}

sim_options sim_options_for(const sim_shape& shape, uint64_t seed) {
  sim_options o;
  o.seed = seed;
  o.faults = shape.faults;
  o.control_faults = shape.control_faults;
  o.ps_crashes = shape.checkpoint_every > 0;
  o.fits = shape.fits;
  o.failing_fit = shape.failing_fit;
  o.corrupt_checkpoint = shape.corrupt_checkpoint;
  o.take_over_after = shape.take_over_after;
  o.checkpoint_every = shape.checkpoint_every;
  o.plant = shape.plant;
  return o;
}

sim_shape random_shape(uint64_t seed, const consistency_mode& consistency) {
  model::rng g{seed, /*stream=*/0x5ba9e};
  auto pick = [&g](uint64_t n) { return static_cast<int>(g.below(n)); };
  auto chance = [&g](double p) { return g.uniform() < p; };
  sim_shape s;
  s.consistency = consistency;
  bool async = consistency.is_async();
  bool sync = consistency.mode() == consistency_mode::kind::sync;
  s.num_ps = 1 + pick(4);
  s.num_workers = 1 + pick(4);
  s.num_pipelines = 1 + pick(4);
  s.epochs = 2 + pick(2);
  s.tasks_in_flight = pick(5);  // 0: the default
  s.sparse = chance(0.3);
  if (async && !s.sparse && chance(0.2)) s.push_every = 2;
  if (async && chance(0.2)) s.pull_every = 2 + pick(2);
  if (!sync && s.pull_every == 1 && chance(0.15)) s.pull_ahead = true;
  if (!sync) {
    static const int spes[] = {1, 1, 1, 2, 4};
    s.steps_per_execution = spes[pick(5)];
    if (s.push_every > 1 && s.steps_per_execution % s.push_every != 0) s.steps_per_execution = 2;
  }
  if (chance(0.15)) s.speculate_after = 2;
  s.checkpoint_shared = chance(0.3);
  s.validation = chance(0.3);
  s.callbacks = chance(0.3);
  static const int64_t every[] = {5, 10, 20};
  s.checkpoint_every = every[pick(3)];
  auto r = g.uniform();
  s.fits = r < 0.5 ? 1 : r < 0.8 ? 2 : 3;
  if (s.fits > 1 && chance(0.5)) s.failing_fit = pick(static_cast<uint64_t>(s.fits - 1));  // never the last
  if (chance(0.4)) s.corrupt_checkpoint = 2 + pick(3);
  if (chance(0.1)) s.take_over_after = 5 + pick(20);
  if (s.sparse) s.dynamic = chance(0.5);  // drawn last: the other draws of a seed stay as they were
  return s;
}

std::string soak_replay(const sim_shape& s, uint64_t seed) {
  return fmt::format("actortrain soak --seeds 1 --first-seed {} --faults {} --workers {} --ps {} --pipelines {} --epochs {} "
                     "--steps-per-execution {} --tasks-in-flight {}{} --speculate {} --pull-every {} --push-every {}{}{}{}{}{} "
                     "--checkpoint-every {} --take-over-after {} --fits {} --failing-fit {} --corrupt-checkpoint {}{} "
                     "--consistency '{}'{} --verbose",
                     seed, s.faults, s.num_workers, s.num_ps, s.num_pipelines, s.epochs, s.steps_per_execution,
                     s.tasks_in_flight, s.pull_ahead ? " --pull-ahead" : "", s.speculate_after, s.pull_every, s.push_every,
                     s.sparse ? " --sparse" : "", s.dynamic ? " --dynamic" : "", s.checkpoint_shared ? " --checkpoint-shared" : "",
                     s.validation ? " --validation" : "", s.callbacks ? " --callbacks" : "", s.checkpoint_every, s.take_over_after, s.fits, s.failing_fit,
                     s.corrupt_checkpoint, s.control_faults ? "" : " --no-control-faults", s.consistency.to_string(),
                     s.plant == planted_defect::none ? std::string{} : " --plant " + to_string(s.plant));
}

sim_result simulate(uint64_t seed, const sim_shape& shape) {
  auto r = simulate(sim_job(shape, seed), sim_options_for(shape, seed));
  r.replay = soak_replay(shape, seed);
  return r;
}

sim_result simulate(uint64_t seed, const sim_shape& shape, std::shared_ptr<fault_plan> plan) {
  auto r = simulate(sim_job(shape, seed), sim_options_for(shape, seed), std::move(plan));
  r.replay = soak_replay(shape, seed);
  return r;
}

}  // namespace actortrain
