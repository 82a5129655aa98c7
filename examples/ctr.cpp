// ctr — click-through prediction with sparse embeddings on an embedded cluster.
//
// The registered ctr job (actortrain::jobs::ctr) generates its data with a planted
// ground truth, so the best achievable scores are known: four skewed categorical fields
// hashed into one shared table of --buckets rows, four dense features, a logistic model
// with the embeddings and a small dense tower. The table's rows are split over the ps
// shards; workers pull only the rows a batch touches and push only their gradients, and
// the shards apply lazy Adam (or Adagrad) to those rows. Per epoch it prints the test
// AUC and log loss beside the optimum: those of the true probabilities.
//
//   build/examples/ctr                                  # 2 ps, 2 workers, async
//   build/examples/ctr --consistency sync --epochs 3
//   build/examples/ctr --optimizer "adagrad(0.05)" --buckets 16384
//   build/examples/ctr --wide "adagrad(0.05)" --clip-norm 5    # wide and deep
//   build/examples/ctr --dynamic --admit-after 2              # tables keyed by the raw id
//
// With --wide the model is wide and deep: a weight per bucket (the wide, linear part)
// added to the deep tower's logit. The shards update the wide part with its own
// optimizer (cluster_spec::variable_groups) and the rest with --optimizer, as
// TensorFlow's DNNLinearCombined models do; --clip-norm makes the workers run a custom
// training step that clips the gradients to that global norm first.
//
// With --dynamic the tables are keyed by the raw id (layers::dynamic_embedding): every
// category value has an id and a row of its own, which its shard creates when the id is
// first read for training; the run ends with what the shards' tables hold (rows, bytes a
// row) and what admission (--admit-after) and eviction (--evict-after) did.

#include <actortrain/actors/all.hpp>
#include <actortrain/actors/jobs/jobs.hpp>
#include <actortrain/model/optim/make_optimizer.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <string_view>

using actortrain::cli::range;

int main(int argc, char** argv) {
  return actortrain::cli::run_main("ctr", [&] {
    actortrain::jobs::ctr_options o;
    int ps = 2, workers = 2, verbose = 2, threads = 2;
    double clip_norm = 0;
    actortrain::consistency_mode consistency;
    std::shared_ptr<const actortrain::model::partitioner> partitioner = actortrain::model::make_partitioner("fixed_shards(2)");
    actortrain::cli::flags f{"ctr",
                             "Trains a click-through model with embeddings on generated data whose best AUC and log "
                             "loss are known, on an embedded parameter-server cluster, and prints both per epoch."};
    f.add("ps", ps, "parameter-server shards", range<int>{1, 64})
      .add("workers", workers, "workers (each with its own input pipeline)", range<int>{1, 256})
      .add_parsed("partitioner", "fixed_shards(2)", "how variables are split over the shards (\"none\": whole)",
                  [&](const std::string& v) { partitioner = actortrain::model::make_partitioner(v); })
      .add_parsed("consistency", "async", "async, bounded_staleness(s) or sync",
                  [&](const std::string& v) { consistency = actortrain::consistency_mode::parse(v); })
      .add("clip-norm", clip_norm,
           "a custom training step: the built-in one, then the gradients clipped to this global L2 norm (0: off)",
           range<double>{0, 1e12})
      .add("threads", threads, "CAF scheduler threads", range<int>{1, 256})
      .add("verbose", verbose, "0 silent, 1 progress bar, 2 one line per epoch", range<int>{0, 2});
    actortrain::jobs::add_flags(f, o);  // the job's own: --epochs, --rows, --dynamic, --id-bits, ...
    if (!f.parse(argc, argv)) return 0;
    if (!f.positional().empty()) throw actortrain::cli::usage_error("unexpected argument '" + f.positional()[0] + "'");

    actortrain::job j;
    try {
      j = actortrain::jobs::ctr(o);
    } catch (const std::invalid_argument& e) {  // --id-bits without --dynamic, and the like
      throw actortrain::cli::usage_error(e.what());
    }
    auto best = actortrain::jobs::ctr_best(o);
    j.spec.num_ps = ps;
    j.spec.num_workers = workers;
    j.spec.partitioner = partitioner;
    j.spec.consistency = consistency;
    j.fit.verbose = verbose;
    if (clip_norm > 0) j.spec.train_step = actortrain::model::clipped_step(clip_norm);

    caf::actor_system_config cfg;
    actortrain::configure(cfg);
    cfg.set("scheduler.max-threads", threads);
    caf::actor_system sys{cfg};
    actortrain::cluster c{sys, j};
    auto r = c.join(c.schedule(j.train, j.fit));
    const auto& hist = r.history;
    fmt::print("\n{} ps, {} workers, {}, {} x {}, {}{}{}: {} steps, staleness mean {:.2f} max {}\n", ps, workers,
               consistency.to_string(), o.dynamic ? "a table keyed by id" : fmt::format("{} buckets", o.buckets), o.dim,
               o.optimizer,
               o.wide_optimizer.empty() ? "" : ", wide part " + o.wide_optimizer,
               clip_norm > 0 ? fmt::format(", clipped to {}", clip_norm) : "", r.steps, r.mean_staleness,
               r.max_staleness);
    if (best.shared_buckets >= 0)
      fmt::print("{} of {} category values share a bucket; the optimum is the true probabilities' score\n",
                 best.shared_buckets, best.values);
    else
      fmt::print("{} category values{}; the optimum is the true probabilities' score\n", best.values,
                 o.id_bits > 0 ? fmt::format(", ids hashed into 2^{}", o.id_bits) : "");
    // What the shards' dynamic tables hold, and what admission and eviction did.
    if (o.dynamic)
      for (std::string_view rest = c.ps_report(); !rest.empty();) {
        auto line = rest.substr(0, rest.find('\n'));
        rest.remove_prefix(std::min(rest.size(), line.size() + 1));
        if (line.find(": table ") != std::string_view::npos) fmt::print("{}\n", line);
      }
    fmt::print("epoch  test AUC  (optimum)  test log loss  (optimum)\n");
    for (size_t k = 0; k < hist.epochs(); ++k)
      fmt::print("{:>5}  {:.4f}    ({:.4f})   {:.4f}         ({:.4f})\n", k + 1, hist["val_auc"][k], best.auc,
                 hist["val_loss"][k], best.log_loss);
    return 0;
  });
}
