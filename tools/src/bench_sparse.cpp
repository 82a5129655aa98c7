// actortrain bench sparse: embedding traffic in the embedded cluster. A click-through
// style model (--fields ids into one table of --buckets x --dim, concatenated with 4
// dense features, a 32-unit tower, logistic loss, lazy Adam) trains one pass over
// generated data (skewed ids) on 2 workers and 2 ps shards, the table split by rows
// over both, as
//   rows    — workers pull only the rows each batch touches (cluster_spec::pull_rows),
//   whole   — workers pull the whole table every step, as a dense variable is pulled
//             (the baseline; both push only the touched rows' gradients),
//   dynamic — the same ids, each scattered over [0, 2^40), in a table keyed by
//             the id on the shards (layers::dynamic_embedding), rows created at their
//             first gradient,
// interleaved round by round. Throughput is the batch rows served per second: each
// step's distinct ids, once pulled and once pushed (the same count in every variant,
// from the data). Prints per round, medians, the ratios rows/whole and dynamic/rows,
// and what the shards' dynamic tables hold (rows, bytes a row against its floats).

#include "bench.hpp"
#include "flags.hpp"

#include <actortrain/actors/all.hpp>
#include <actortrain/dataset/all.hpp>
#include <actortrain/model/all.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <map>
#include <set>
#include <string_view>

#include <fmt/format.h>

namespace actortrain::tools {

namespace ds = actortrain::dataset;
namespace md = actortrain::model;

namespace {

struct sparse_job {
  ds::dataset data;
  ds::dataset keyed;  // the same examples, each id v as the 64-bit id scattered_id(v)
  int64_t rows_per_pass = 0;  // distinct ids per batch, summed over the pass's batches
  int64_t steps = 0;
};

constexpr int workers = 2;

enum class variant { rows, whole, dynamic };

sparse_job make_job(int64_t n, int fields, int64_t buckets, int64_t batch) {
  md::rng g{5};
  md::matrix ids(n, fields), dense(n, 4), y(n, 1);
  for (Eigen::Index r = 0; r < n; ++r) {
    for (int f = 0; f < fields; ++f)
      ids(r, f) = static_cast<float>(static_cast<int64_t>(static_cast<double>(buckets) * g.uniform() * g.uniform()));
    for (int d = 0; d < 4; ++d) dense(r, d) = static_cast<float>(2 * g.uniform() - 1);
    y(r, 0) = g.uniform() < 0.3 ? 1.0f : 0.0f;
  }
  sparse_job job;
  job.data = ds::from_tensor_slices({ids, dense}, y);
  ds::element keyed;
  keyed.features = {md::matrix(n, 0), dense};
  keyed.ids = {ids.cast<int64_t>().unaryExpr([](int64_t v) { return scattered_id(v); })};
  keyed.labels = y;
  job.keyed = ds::from_tensor_slices(std::move(keyed));
  // The batches the pipelines will serve (no shuffle): pipeline p = shard(2, p).batch(batch).
  for (int p = 0; p < workers; ++p)
    for (auto it = job.data.shard(workers, p).batch(batch).iterate(0); auto b = it->next();) {
      const auto& x = b->features[0];
      std::set<float> distinct(x.data(), x.data() + x.size());
      job.rows_per_pass += static_cast<int64_t>(distinct.size());
      ++job.steps;
    }
  return job;
}

// Seconds for one pass; `report` gets the shards' table lines of a dynamic table.
double run_variant(const sparse_job& job, variant v, int fields, int64_t buckets, int64_t dim, int64_t batch,
                   std::string* report = nullptr) {
  using md::layers::activation;
  caf::actor_system_config cfg;
  configure(cfg);
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system sys{cfg};
  cluster_spec spec;
  spec.num_ps = 2;
  spec.num_workers = workers;
  spec.partitioner = std::make_shared<md::fixed_shards>(2);
  spec.pull_rows = v != variant::whole;
  md::graph g;
  auto ids = g.input(fields, "ids");
  auto dense = g.input(4, "dense");
  auto e = g.apply(v == variant::dynamic ? md::layers::dynamic_embedding(dim) : md::layers::embedding(buckets, dim), ids);
  auto h = g.apply(md::layers::concatenate(), {e, dense});
  auto out = g.apply(md::layers::dense(1), g.apply(md::layers::dense(32, activation::relu), h));
  cluster c{sys, spec, md::model::functional(g, {ids, dense}, out), *md::make_adam({1e-3}), md::binary_cross_entropy()};
  auto data = v == variant::dynamic ? job.keyed : job.data;
  auto fn = [data, batch](const ds::input_context& ctx) {
    return data.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(batch);
  };
  md::fit_options opts;
  opts.verbose = 0;
  auto start = std::chrono::steady_clock::now();
  auto r = c.join(c.schedule(fn, opts));
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (r.steps != job.steps) throw std::runtime_error(fmt::format("bench sparse: {} steps, expected {}", r.steps, job.steps));
  if (report) {
    report->clear();
    for (std::string_view rest = c.ps_report(); !rest.empty();) {
      auto line = rest.substr(0, rest.find('\n'));
      rest.remove_prefix(std::min(rest.size(), line.size() + 1));
      if (line.find(": table ") != std::string_view::npos) *report += "  " + std::string(line) + "\n";
    }
  }
  return secs;
}

}  // namespace

int bench_sparse(int argc, char** argv, int first) {
  int rounds = 3, fields = 8;
  bool no_whole = false, processes = false;
  int64_t examples = 100000, buckets = 262144, dim = 16, batch = 256;
  table_bench_options table;
  std::string ids_text = "1000000,16000000";
  flags f{"actortrain bench sparse",
          "Trains a click-through style model with one embedding table (--buckets x --dim, rows\n"
          "split over 2 ps shards) on 2 workers for one pass over --examples generated examples,\n"
          "pulling only each batch's rows ('rows') and pulling the whole table every step\n"
          "('whole', the dense baseline), interleaved for --rounds rounds. Prints embedding\n"
          "rows served per second (each step's distinct ids, pulled and pushed), steps/s, and\n"
          "the ratio rows/whole; and the same ids scattered over [0, 2^40) in a table keyed by id on the\n"
          "shards ('dynamic'), with what those tables hold.\n"
          "--processes instead puts a table keyed by id of each --ids count (--dim wide) on a real ps\n"
          "shard in a process of its own and pulls (--pull-batch ids a request) and pushes rows from\n"
          "this process over BASP and on the tensor data plane, beside raw TCP moving the same bytes:\n"
          "rows/s, bytes a row on the shard, and the peak resident memory of both processes. 100M ids\n"
          "at dim 16 take about 21 GB with Adam's slots and 9 GB with --table-optimizer sgd."};
  f.add("rounds", rounds, "rounds (each runs both variants)")
    .add("examples", examples, "training examples (one pass)")
    .add("fields", fields, "ids per example")
    .add("buckets", buckets, "rows of the embedding table")
    .add("dim", dim, "embedding width")
    .add("batch", batch, "examples per step")
    .add("no-whole", no_whole, "skip 'whole' (a large table pulled whole every step takes hours)")
    .add("processes", processes, "measure a table keyed by id on a ps shard process instead (see above)")
    .add("ids", ids_text, "--processes: comma-separated numbers of distinct ids, one table each")
    .add("pull-batch", table.batch, "--processes: ids a pull (and a push) carries")
    .add("table-optimizer", table.optimizer, "--processes: the shard's optimizer, adam or sgd");
  if (!f.parse(argc, argv, first)) return 0;
  if (processes) {
    if (dim < 1 || dim > 4096) throw usage_error("--dim must be in [1, 4096]");
    if (table.batch < 1 || table.batch > (int64_t{1} << 22)) throw usage_error("--pull-batch must be in [1, 2^22]");
    if (rounds < 1) throw usage_error("--rounds must be >= 1");
    table.ids = parse_counts(ids_text, "--ids", 1, int64_t{1} << 31, 1, "a count of ids in [1, 2^31]", "no counts given");
    if (table.optimizer != "adam" && table.optimizer != "sgd")
      throw usage_error(fmt::format("--table-optimizer: '{}' is not adam or sgd", table.optimizer));
    table.dim = static_cast<int>(dim);
    table.rounds = rounds;
    return bench_table_across_processes(argv[0], table);
  }
  if (rounds < 1 || fields < 1 || examples < 1 || dim < 1 || batch < 1)
    throw usage_error("--rounds, --fields, --examples, --dim and --batch must be >= 1");
  if (buckets < 1 || buckets > (int64_t{1} << 24)) throw usage_error("--buckets must be in [1, 2^24]");
  auto job = make_job(examples, fields, buckets, batch);
  fmt::print("bench sparse: table {} x {} ({:.1f} MB) on 2 ps shards, {} ids per example, batch {}, {} steps, "
             "{:.0f} distinct rows per step\n",
             buckets, dim, static_cast<double>(buckets * dim * 4) / 1e6, fields, batch, job.steps,
             static_cast<double>(job.rows_per_pass) / static_cast<double>(job.steps));
  std::map<std::string, std::vector<double>> rate, steps;
  const std::pair<std::string, variant> variants[] = {
    {"rows", variant::rows}, {"whole", variant::whole}, {"dynamic", variant::dynamic}};
  std::string tables;
  for (int r = 1; r <= rounds; ++r)
    for (const auto& [v, which] : variants) {
      if (no_whole && which == variant::whole) continue;
      double secs = run_variant(job, which, fields, buckets, dim, batch, which == variant::dynamic ? &tables : nullptr);
      double rows_per_s = 2.0 * static_cast<double>(job.rows_per_pass) / secs;
      rate[v].push_back(rows_per_s);
      steps[v].push_back(static_cast<double>(job.steps) / secs);
      fmt::print("round {} {:<7} {:>10.0f} rows/s  {:>7.0f} steps/s\n", r, v, rows_per_s, steps[v].back());
      std::fflush(stdout);
    }
  fmt::print("\nmedian over {} rounds:\n", rounds);
  for (const auto& [v, which] : variants)
    if (!rate[v].empty()) fmt::print("  {:<7} {:>10.0f} rows/s  {:>7.0f} steps/s\n", v, median(rate[v]), median(steps[v]));
  if (!no_whole) fmt::print("  rows/whole = {:.2f}\n", median(rate["rows"]) / median(rate["whole"]));
  fmt::print("  dynamic/rows = {:.2f}\n", median(rate["dynamic"]) / median(rate["rows"]));
  fmt::print("the shards' dynamic tables (the fixed table holds {} rows, {:.0f} bytes a row with Adam's slots):\n{}",
             buckets, static_cast<double>(dim * 3 * 4), tables);
  return 0;
}

}  // namespace actortrain::tools
