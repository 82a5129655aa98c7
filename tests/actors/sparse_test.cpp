// Sparse embedding training on CAF's test coordinator: a functional model with an
// embedding table (split by rows over two ps shards) and a dense tower. Row pulls train
// exactly as whole-table pulls while moving only the batch's rows; synchronous rounds
// with lazy Adam and Adagrad on the rows equal a local trainer on the global batch.

#include <actortrain/actors/cluster/cluster.hpp>
#include <actortrain/actors/cluster/events.hpp>
#include <actortrain/dataset/all.hpp>
#include <actortrain/model/checkpoint/memory_file_system.hpp>
#include <actortrain/model/all.hpp>

#include <fmt/format.h>

#include <optional>
#include <set>

// After the others: CAF's test DSL defines macros (inject, expect) that clash with
// ordinary names.
#include "caf_test.hpp"
#include "sim_cluster.hpp"

using namespace actortrain;
using model::matrix;
namespace ds = actortrain::dataset;

namespace {

constexpr int64_t vocab = 50;

// Three ids and two dense features per example; y = sum of the ids' planted weights +
// x0 - x1. The ids in the data are the planted ones times `stride`: floats, or with
// `int64` 64-bit ids (model::batch::ids).
ds::dataset planted(int64_t n, int64_t stride = 1, bool int64 = false) {
  model::rng g{9};
  matrix ids(n, 3), dense(n, 2), y(n, 1);
  model::id_matrix big(n, 3);
  std::vector<float> weight(vocab);
  for (auto& w : weight) w = static_cast<float>(2 * g.uniform() - 1);
  for (Eigen::Index r = 0; r < n; ++r) {
    float t = 0;
    for (Eigen::Index j = 0; j < 3; ++j) {
      // Skewed ids, as real categorical data: low ids are common.
      auto id = static_cast<int64_t>(static_cast<double>(vocab) * g.uniform() * g.uniform());
      ids(r, j) = static_cast<float>(id * stride);
      big(r, j) = id * stride;
      t += weight[static_cast<size_t>(id)];
    }
    dense(r, 0) = static_cast<float>(2 * g.uniform() - 1);
    dense(r, 1) = static_cast<float>(2 * g.uniform() - 1);
    y(r, 0) = t + dense(r, 0) - dense(r, 1);
  }
  if (!int64) return ds::from_tensor_slices({ids, dense}, y);
  ds::element all;
  all.features = {matrix(n, 0), dense};
  all.ids = {big};
  all.labels = y;
  return ds::from_tensor_slices(std::move(all));
}

// `table` rows (the data's ids stay below `vocab`); with `ids_as_numbers` a dense layer
// reads the ids too, so the worker cannot renumber them (model::compact_rows).
model::model tower(int64_t table = vocab, bool ids_as_numbers = false,
                   std::optional<model::layers::dynamic_rows> dynamic = std::nullopt) {
  using model::layers::activation;
  model::graph g;
  auto ids = g.input(3, "ids");
  auto dense = g.input(2, "dense");
  auto e = dynamic ? g.apply(model::layers::dynamic_embedding(4, model::layers::combiner::sum,
                                                              model::uniform(-0.05f, 0.05f), *dynamic),
                             ids)
                   : g.apply(model::layers::embedding(table, 4, model::layers::combiner::sum), ids);
  auto h = ids_as_numbers ? g.apply(model::layers::concatenate(), {e, dense, g.apply(model::layers::dense(2), ids)})
                          : g.apply(model::layers::concatenate(), {e, dense});
  auto out = g.apply(model::layers::dense(1), g.apply(model::layers::dense(8, activation::tanh), h));
  return model::model::functional(g, {ids, dense}, out);
}

struct fixture : testing::cluster_fixture {
  cluster_spec spec(int workers, std::string mode) {
    cluster_spec s;
    s.num_ps = 2;
    s.num_workers = workers;
    s.simulated = true;
    s.partitioner = std::make_shared<model::fixed_shards>(2);  // the table's rows on both shards
    s.consistency = consistency_mode::parse(mode);
    return s;
  }
  // Two workers in synchronous rounds on `shards` ps shards.
  cluster_spec sync_spec(int shards) {
    auto s = spec(2, "sync");
    s.num_ps = shards;
    return s;
  }
  // Each round's global batch of `global` examples split over the pipelines.
  static ds::dataset_fn global_batches(ds::dataset data, int64_t global) {
    return [data, global](const ds::input_context& ctx) {
      return data.batch(ctx.get_per_replica_batch_size(global)).shard(ctx.num_input_pipelines, ctx.input_pipeline_id);
    };
  }
  // The rows of `ids` of a table keyed by id, read from the shards.
  model::matrix rows_of(cluster& c, const std::string& name, const std::vector<int64_t>& ids) {
    auto f = c.lookup_async(name, ids);
    sched.run();
    return f.get();
  }
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(sparse, fixture)

BOOST_AUTO_TEST_CASE(the_model_pulls_its_table_by_row) {
  auto m = tower();
  auto e = m.find_variable("embedding/embeddings");
  BOOST_REQUIRE(e >= 0);
  BOOST_TEST(m.row_feeds()[static_cast<size_t>(e)] == (std::vector<int32_t>{0}));
  BOOST_TEST(m.row_feeds()[static_cast<size_t>(m.find_variable("dense/kernel"))].empty());
}

BOOST_AUTO_TEST_CASE(row_pulls_train_exactly_as_whole_tables_and_move_only_the_batch_rows) {
  auto data = planted(512);
  auto fn = [data](const ds::input_context& ctx) {
    return data.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(16);
  };
  auto train = [&](bool rows) {
    auto s = spec(1, "async");
    s.pull_rows = rows;
    auto c = std::make_unique<cluster>(sys, s, tower(), *model::make_adam({0.02}), model::mean_squared_error());
    auto r = run(*c, fn, 4);
    BOOST_TEST(r.steps == 4 * 32);
    BOOST_TEST(r.history["loss"].back() < r.history["loss"].front() / 3, "loss " << r.history["loss"].front() << " -> "
                                                                               << r.history["loss"].back());
    uint64_t pulled = 0;
    for (auto& st : shard_stats(*c)) pulled += st.rows_pulled;
    return std::make_pair(variables(*c), pulled);
  };
  auto [by_row, rows_moved] = train(true);
  auto [whole, none] = train(false);
  BOOST_TEST(none == 0u);
  BOOST_TEST(rows_moved > 0u);
  // At most the 48 ids of a batch each step, far fewer than the table every step; the
  // skewed ids repeat within a batch.
  BOOST_TEST(rows_moved <= 4u * 32u * 48u);
  BOOST_TEST(rows_moved < 4u * 32u * vocab * 3 / 4);
  for (size_t v = 0; v < by_row.size(); ++v) {
    const auto& a = by_row[static_cast<model::variable_id>(v)];
    const auto& b = whole[static_cast<model::variable_id>(v)];
    BOOST_TEST((a.array() == b.array()).all(), "variable " << v);  // bit-identical
  }
}

// The worker computes on a table of its batch's rows, whatever the table's size; the
// shards end with the same values, to the bit, as with whole tables pulled every step.
// And a table whose ids another layer reads too is pulled by row into a whole buffer,
// with the same result.
BOOST_AUTO_TEST_CASE(a_worker_holds_only_its_batch_rows_and_trains_as_with_whole_tables) {
  auto data = planted(512);
  auto fn = [data](const ds::input_context& ctx) {
    return data.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(16);
  };
  const int64_t big = int64_t{1} << 17;
  for (bool compact : {true, false}) {
    auto m = tower(big, !compact);
    auto table = m.find_variable("embedding/embeddings");
    BOOST_REQUIRE(table >= 0);
    BOOST_TEST(m.compact_rows()[static_cast<size_t>(table)] == compact);
    auto train = [&](bool rows, std::vector<int64_t>& seen) {
      auto s = spec(1, "async");
      s.pull_rows = rows;
      s.train_step = model::step_function{"watch", [&seen, table](model::step_context& ctx) {
                                            seen.push_back(ctx.parameters()[table].rows());
                                            return model::default_train_step(ctx);
                                          }};
      auto c = std::make_unique<cluster>(sys, s, tower(big, !compact), *model::make_adam({0.02}),
                                         model::mean_squared_error());
      auto r = run(*c, fn, 2);
      BOOST_TEST(r.steps == 2 * 32);
      return variables(*c);
    };
    std::vector<int64_t> by_row_rows, whole_rows;
    auto by_row = train(true, by_row_rows);
    auto whole = train(false, whole_rows);
    BOOST_TEST(by_row_rows.size() == 64u);
    for (auto n : whole_rows) BOOST_TEST(n == big);
    for (auto n : by_row_rows) {
      if (compact) {
        BOOST_TEST(n > 0);
        BOOST_TEST(n <= 48);  // the distinct ids of 16 rows of 3
      } else {
        BOOST_TEST(n == big);
      }
    }
    for (size_t v = 0; v < by_row.size(); ++v) {
      const auto& a = by_row[static_cast<model::variable_id>(v)];
      const auto& b = whole[static_cast<model::variable_id>(v)];
      BOOST_TEST((a.array() == b.array()).all(), "compact " << compact << ", variable " << v);
    }
  }
}

BOOST_AUTO_TEST_CASE(sync_rounds_with_lazy_adam_and_adagrad_rows_equal_the_trainer_on_the_global_batch) {
  const int64_t global = 16, rounds = 20;
  auto data = planted(global * rounds);
  for (std::string opt : {"adam(0.02)", "adagrad(0.1)"}) {
    cluster c{sys, spec(2, "sync"), tower(), *model::make_optimizer(opt), model::mean_squared_error()};
    auto r = run(c, [data, global](const ds::input_context& ctx) {
      return data.batch(ctx.get_per_replica_batch_size(global)).shard(ctx.num_input_pipelines, ctx.input_pipeline_id);
    }, 1);
    BOOST_TEST(r.steps == 2 * rounds);
    model::trainer t{tower(), model::make_optimizer(opt), model::mean_squared_error(), 1};
    for (auto it = data.batch(global).iterate(0); auto b = it->next();) t.train_step(*b);
    close_to_trainer(c, t, opt);
  }
}

// A table keyed by raw ids on the shards (layers::dynamic_embedding): 64-bit ids far
// apart (the planted ones times 2^34 + 65,537, up to 8.4e11, past what a float holds),
// rows created on the shards at their first gradient. Synchronous rounds of 2 workers
// give what a local trainer gives on the global batch, and the same rows, to the bit, on
// 1 shard and on 3.
BOOST_AUTO_TEST_CASE(a_dynamic_table_on_the_shards_trains_as_the_trainer_on_any_number_of_shards) {
  const int64_t global = 16, rounds = 20, stride = (int64_t{1} << 34) + 65537;
  auto data = planted(global * rounds, stride, true);
  const std::string name = "embedding/embeddings";
  std::vector<int64_t> ids;
  for (int64_t id = 0; id < vocab; ++id) ids.push_back(id * stride);
  ids.push_back(int64_t{1} << 50);  // never in the data: its initial values everywhere
  auto fn = global_batches(data, global);
  auto train = [&](int shards) {
    auto s = sync_spec(shards);
    auto c = std::make_unique<cluster>(sys, s, tower(vocab, false, model::layers::dynamic_rows{}),
                                       *model::make_adam({0.02}), model::mean_squared_error());
    auto r = run(*c, fn, 1);
    BOOST_TEST(r.steps == 2 * rounds);
    return c;
  };
  auto one = train(1), three = train(3);
  auto lookup = [&](cluster& c) { return rows_of(c, name, ids); };
  auto rows1 = lookup(*one), rows3 = lookup(*three);
  BOOST_TEST((rows1.array() == rows3.array()).all());
  auto v1 = variables(*one), v3 = variables(*three);
  for (size_t v = 0; v < v1.size(); ++v)
    BOOST_TEST((v1[static_cast<model::variable_id>(v)].array() == v3[static_cast<model::variable_id>(v)].array()).all());
  // The shards hold a row for each id in the data, spread over all three.
  std::set<int64_t> distinct;
  for (auto it = data.iterate(0); auto e = it->next();)
    for (Eigen::Index j = 0; j < 3; ++j) distinct.insert(e->ids[0](0, j));
  BOOST_TEST(*distinct.rbegin() > int64_t{1} << 24);
  uint64_t held = 0;
  for (auto& st : shard_stats(*three)) {
    BOOST_REQUIRE(st.tables.size() == 1u);
    BOOST_TEST(st.tables[0].rows > 0u);
    held += st.tables[0].rows;
  }
  BOOST_TEST(held == distinct.size());
  // The trainer on the global batch.
  model::trainer t{tower(vocab, false, model::layers::dynamic_rows{}), model::make_adam({0.02}),
                   model::mean_squared_error(), 1};
  for (auto it = data.batch(global).iterate(0); auto b = it->next();) t.train_step(*b);
  close_to_trainer(*one, t, "dynamic");
  const auto& table = t.table(name);
  const auto seed = model::variable_seed(1, static_cast<size_t>(t.structure().find_variable(name)));
  for (size_t j = 0; j < ids.size(); ++j) {
    matrix want(1, 4);
    if (!table.find(ids[j], want.data())) {
      model::uniform(-0.05f, 0.05f).fill(want, model::dynamic_table::row_seed(seed, ids[j]));
    }
    auto diff = (rows1.row(static_cast<Eigen::Index>(j)) - want.row(0)).cwiseAbs().maxCoeff();
    BOOST_TEST(diff <= 1e-5f, "id " << ids[j] << " differs by " << diff);
  }
}

// A batch whose id input disagrees with its other inputs on the rows (a map that broke
// it) fails its step with an application error naming the input, at the worker, before
// any row is pulled or any layer reads it; batched, the pipeline refuses to stack it.
BOOST_AUTO_TEST_CASE(a_batch_whose_ids_disagree_on_the_rows_fails_its_step_naming_the_input) {
  auto data = planted(64, (int64_t{1} << 34) + 65537, true).map([](ds::element e) {
    e.ids[0].conservativeResize(e.ids[0].rows() + 1, e.ids[0].cols());
    e.ids[0].row(e.ids[0].rows() - 1).setZero();
    return e;
  });
  cluster c{sys, spec(1, "async"), tower(vocab, false, model::layers::dynamic_rows{}), *model::make_adam({0.02}),
            model::mean_squared_error()};
  model::fit_options o;
  o.verbose = 0;
  auto failure = [&](int64_t batch) -> std::string {
    auto h = c.schedule([data, batch](const ds::input_context&) { return batch > 1 ? data.batch(batch) : data; }, o);
    for (int i = 0; i < 100000 && !c.done(h); ++i) sched.run();
    try {
      c.join(h);
    } catch (const run_failed& e) {
      BOOST_TEST(!e.retryable());
      return e.what();
    }
    return "the run succeeded";
  };
  auto msg = failure(1);
  BOOST_TEST(msg.find("the batch's input 0 has 2 rows of ids beside [1 x 0] floats, its other inputs 1 rows") !=
               std::string::npos,
             msg);
  msg = failure(16);
  BOOST_TEST(msg.find("cannot batch an element with 1 rows whose id input 0 has 2") != std::string::npos, msg);
}

// Admission and eviction on the shards: ids read fewer than 3 times get no row and their
// gradients are dropped; rows not updated for 4 rounds are dropped. The counts are the
// same on 1 shard and on 3, and every id is held or waiting.
BOOST_AUTO_TEST_CASE(admission_and_eviction_on_the_shards_count_the_same_on_any_number_of_shards) {
  const int64_t global = 16, rounds = 20, stride = 65537;
  auto data = planted(global * rounds, stride);
  auto fn = global_batches(data, global);
  auto counts = [&](int shards, model::layers::dynamic_rows rows) {
    auto s = sync_spec(shards);
    cluster c{sys, s, tower(vocab, false, rows), *model::make_adam({0.02}), model::mean_squared_error()};
    auto r = run(c, fn, 1);
    BOOST_TEST(r.steps == 2 * rounds);
    table_stats sum;
    for (auto& st : shard_stats(c)) {
      BOOST_REQUIRE(st.tables.size() == 1u);
      auto& t = st.tables[0];
      sum.rows += t.rows;
      sum.created += t.created;
      sum.evicted += t.evicted;
      sum.waiting += t.waiting;
      sum.unadmitted_reads += t.unadmitted_reads;
      sum.dropped_gradients += t.dropped_gradients;
    }
    return sum;
  };
  auto same = [](const table_stats& a, const table_stats& b) {
    return a.rows == b.rows && a.created == b.created && a.evicted == b.evicted && a.waiting == b.waiting &&
           a.unadmitted_reads == b.unadmitted_reads && a.dropped_gradients == b.dropped_gradients;
  };
  auto plain = counts(1, {});
  BOOST_TEST(plain.waiting == 0u);
  BOOST_TEST(plain.dropped_gradients == 0u);
  BOOST_TEST(plain.evicted == 0u);
  auto admitted1 = counts(1, {3, 0}), admitted3 = counts(3, {3, 0});
  BOOST_TEST(same(admitted1, admitted3));
  BOOST_TEST(admitted1.rows < plain.rows);
  BOOST_TEST(admitted1.waiting > 0u);
  BOOST_TEST(admitted1.rows + admitted1.waiting == plain.rows);
  BOOST_TEST(admitted1.dropped_gradients > 0u);
  auto evicted1 = counts(1, {0, 4}), evicted3 = counts(3, {0, 4});
  BOOST_TEST(same(evicted1, evicted3));
  BOOST_TEST(evicted1.evicted > 0u);
  BOOST_TEST(evicted1.rows < plain.rows);
  BOOST_TEST(evicted1.created == evicted1.rows + evicted1.evicted);
}

// Dynamic tables in checkpoints: a synchronous run of 2 epochs on 2 shards checkpoints
// at each epoch's end. The local trainer restores exactly the rows and waiting ids the
// shards held at the end, and the run resumed from the first epoch's checkpoint on 3
// shards, or on 2, ends where the run without a stop ended, to the bit.
BOOST_AUTO_TEST_CASE(dynamic_tables_are_checkpointed_and_restored_into_other_shard_counts_and_the_trainer) {
  const int64_t global = 16, rounds = 20, stride = 65537;
  auto data = planted(global * rounds, stride);
  const std::string name = "embedding/embeddings";
  std::vector<int64_t> ids;
  for (int64_t id = 0; id < vocab; ++id) ids.push_back(id * stride);
  auto fn = global_batches(data, global);
  auto fs = std::make_shared<model::memory_file_system>();
  auto make = [&](int shards, std::string dir) {
    auto s = sync_spec(shards);
    s.checkpoint_fs = fs;
    s.checkpoint_dir = std::move(dir);
    s.checkpoint_every = 2 * rounds;  // also at the end of the first epoch
    s.checkpoint_keep = 100;
    return std::make_unique<cluster>(sys, s, tower(vocab, false, model::layers::dynamic_rows{6, 0}),
                                     *model::make_adam({0.02}), model::mean_squared_error());
  };
  auto lookup = [&](cluster& c) { return rows_of(c, name, ids); };
  auto first = make(2, "/ck");
  BOOST_TEST(run(*first, fn, 2).steps == 4 * rounds);
  auto at_stop = lookup(*first);
  auto latest = model::latest_checkpoint(*fs, "/ck");
  BOOST_REQUIRE(latest);
  BOOST_TEST(latest->step == 4 * rounds);
  // Incremental checkpoints (checkpoint_full_every): the step-0 one whole, each after
  // an increment over the one before; read_checkpoint gives the rows whole.
  std::vector<std::vector<int64_t>> bases;
  for (auto& ck : model::list_checkpoints(*fs, "/ck")) bases.push_back(ck.bases);
  BOOST_TEST((bases == std::vector<std::vector<int64_t>>{{}, {0}, {2 * rounds}}));
  auto saved = model::read_checkpoint(*fs, latest->path);
  const auto& table = *std::find_if(saved.variables.begin(), saved.variables.end(),
                                    [&](auto& v) { return v.name == name; });
  BOOST_TEST(table.dynamic);
  BOOST_REQUIRE(table.partitions.size() == 2u);
  size_t rows = 0, waiting = 0;
  for (size_t k = 0; k < 2; ++k) {
    for (auto id : table.partitions[k].ids) BOOST_TEST(model::dynamic_owner(id, 2) == static_cast<int>(k));
    rows += table.partitions[k].ids.size();
    waiting += table.partitions[k].waiting.size();
  }
  uint64_t held = 0, waits = 0;
  for (auto& st : shard_stats(*first)) {
    held += st.tables.at(0).rows;
    waits += st.tables.at(0).waiting;
  }
  BOOST_TEST(rows == held);
  BOOST_TEST(waiting == waits);
  BOOST_TEST(waiting > 0u);  // admission after 6 reads: rare ids wait
  // The trainer takes the rows as they are.
  model::trainer t{tower(vocab, false, model::layers::dynamic_rows{6, 0}), model::make_adam({0.02}),
                   model::mean_squared_error(), 1};
  t.restore(saved);
  BOOST_TEST(t.table(name).counts().rows == rows);
  BOOST_TEST(t.table(name).counts().waiting == waiting);
  for (size_t j = 0; j < ids.size(); ++j) {
    matrix row(1, 4);
    if (!t.table(name).find(ids[j], row.data())) continue;
    BOOST_TEST((row.row(0).array() == at_stop.row(static_cast<Eigen::Index>(j)).array()).all(), "id " << ids[j]);
  }
  // Resumed from the end of the first epoch (the newer checkpoints removed) on 3 shards,
  // and on 2: the second epoch ends where the run without the stop ended, to the bit.
  for (auto& ck : model::list_checkpoints(*fs, "/ck"))
    if (ck.step > 2 * rounds) model::remove_checkpoint(*fs, "/ck", ck.path);
  BOOST_REQUIRE(model::latest_checkpoint(*fs, "/ck")->step == 2 * rounds);
  for (int shards : {3, 2}) {
    auto c = make(shards, "");
    model::fit_options o;
    o.epochs = 2;
    o.resume_from = "/ck";
    auto r = run(*c, fn, o, /*keep=*/false);  // the cluster sees its resumed event
    BOOST_TEST(r.resumed_at == 2 * rounds);
    uint64_t applied = 0;
    for (auto& st : shard_stats(*c)) applied += st.applied;
    BOOST_TEST(applied > 0u);
    BOOST_TEST((lookup(*c).array() == at_stop.array()).all(), shards << " shards");
    auto vars = variables(*c), whole = variables(*first);
    for (size_t v = 0; v < vars.size(); ++v)
      BOOST_TEST((vars[static_cast<model::variable_id>(v)].array() == whole[static_cast<model::variable_id>(v)].array()).all());
  }
  // A shared checkpoint (each shard writes its own files): the same rows, read back.
  auto s = spec(2, "sync");
  s.checkpoint_fs = fs;
  s.checkpoint_dir = "/cks";
  s.checkpoint_shared = true;
  cluster shared{sys, s, tower(vocab, false, model::layers::dynamic_rows{6, 0}), *model::make_adam({0.02}),
                 model::mean_squared_error()};
  BOOST_TEST(run(shared, fn, 2).steps == 4 * rounds);
  model::trainer ts{tower(vocab, false, model::layers::dynamic_rows{6, 0}), model::make_adam({0.02}),
                    model::mean_squared_error(), 1};
  BOOST_TEST(model::latest_checkpoint(*fs, "/cks")->bases == std::vector<int64_t>{0});  // an increment over the first
  ts.restore(model::read_checkpoint(*fs, model::latest_checkpoint(*fs, "/cks")->path));
  BOOST_TEST(ts.table(name).counts().rows == rows);
  BOOST_TEST(ts.table(name).counts().waiting == waiting);
  auto end_rows = lookup(shared);
  for (size_t j = 0; j < ids.size(); ++j) {
    matrix row(1, 4);
    if (ts.table(name).find(ids[j], row.data()))
      BOOST_TEST((row.row(0).array() == end_rows.row(static_cast<Eigen::Index>(j)).array()).all(), "id " << ids[j]);
  }
}

BOOST_AUTO_TEST_SUITE_END()
