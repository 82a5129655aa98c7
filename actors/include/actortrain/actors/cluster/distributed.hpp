#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// TensorFlow's distributed-input loop on a cluster: a distributed dataset (the
// pipelines a dataset_fn builds, one per replica = input pipeline), iterated on the
// application thread; run() schedules a registered step on the next batch of every
// replica and waits for their results, one per replica; reduce() sums or averages one
// of their logs. Built on the cluster's run of scheduled steps (cluster::begin_steps),
// so every step is applied exactly once, re-run on the same batch after a failure.
//
// example[cluster]:
//   auto dist = c.distribute_dataset([train](const dataset::input_context& ctx) {
//     return train.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(64);
//   });
//   for (int epoch = 0; epoch < 3; ++epoch) {
//     double total = 0;
//     int batches = 0;
//     for (const auto& x : dist) {
//       // each replica's loss is its batch's mean: their mean is the global batch's
//       total += actortrain::reduce(actortrain::reduce_op::mean, c.run("", x));
//       ++batches;
//     }
//     std::printf("Epoch %d, Loss: %.4f\n", epoch + 1, total / batches);
//   }
//   auto result = c.join(dist.handle());  // the run ends
//
// This header does not include CAF.

#include <actortrain/actors/cluster/cluster.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace actortrain {

/// tf.distribute.ReduceOp.
enum class reduce_op { sum, mean };

/// What run() returns: per replica (input pipeline), what the step returned on its
/// batch, or nullopt where that replica's data had ended in this pass.
struct per_replica {
  std::vector<std::optional<model::logs>> values;
};

/// The sum or mean of log `key` over the replicas that have a value (0 when none has).
/// Throws std::invalid_argument naming the replica whose logs lack `key`.
double reduce(reduce_op op, const per_replica& r, const std::string& key = "loss");

/// One element of a distributed dataset: the next batch of every replica.
struct distributed_element {
  int64_t index = 0;  ///< in its pass, from 0
  uint64_t pass = 0;  ///< from 0
};

/// cluster::distribute_dataset's result. Each begin() is a pass over every replica's
/// data: as long as the replica with the most batches per epoch has (replicas with fewer
/// give nullopt at the end); a second pass starts the pipelines' next epoch.
class distributed_dataset {
 public:
  class iterator {
   public:
    const distributed_element& operator*() const { return e_; }
    iterator& operator++() {
      ++e_.index;
      return *this;
    }
    friend bool operator!=(const iterator& a, const iterator& b) { return a.e_.index != b.e_.index; }
    friend bool operator==(const iterator& a, const iterator& b) { return a.e_.index == b.e_.index; }

   private:
    friend class distributed_dataset;
    explicit iterator(distributed_element e) : e_(e) {}
    distributed_element e_;
  };

  distributed_dataset(cluster& c, cluster::run_handle h, int replicas, int64_t batches_per_epoch)
    : c_(&c), h_(h), replicas_(replicas), batches_(batches_per_epoch) {}

  /// The run of scheduled steps it feeds: cluster::join(handle()) ends it.
  cluster::run_handle handle() const { return h_; }
  int num_replicas() const { return replicas_; }
  /// Batches per pass: the most of any replica (known from the pipelines' cardinality).
  int64_t batches_per_epoch() const { return batches_; }
  /// Starts the next pass (after the first, the pipelines' next epoch).
  iterator begin();
  iterator end() const { return iterator{distributed_element{batches_, passes_ > 0 ? passes_ - 1 : 0}}; }

 private:
  cluster* c_;
  cluster::run_handle h_;
  int replicas_;
  int64_t batches_;
  uint64_t passes_ = 0;
};

}  // namespace actortrain
