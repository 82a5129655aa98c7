#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// Staleness compensation on the ps shards (cluster_spec::compensation): what a shard does
// about a gradient computed on parameters that other steps have moved since. The
// staleness tau of a gradient is measured per partition, in versions: the partition's
// version when the push is applied minus the version the worker read. With W workers
// computing at once, tau is about W - 1 (one more with pull_ahead).
//
// As a typed value, like consistency_mode: text becomes one only where it enters (a
// flag, a cluster file) through parse, which names what is wrong.
//
//  - none: the gradient is applied as it is (TensorFlow's ParameterServerStrategy).
//  - lookahead(k): a worker's pull is answered with the partition extrapolated k
//    updates ahead along the last applied update, w + k (w - w_previous), so that its
//    gradient is computed near where it will be applied. k = 0 ("lookahead") takes the
//    partition's mean staleness, measured as it trains. The idea of computing at an
//    estimate of the future parameters is DANA's (Hakimi, Barkai, Gabel and Schuster,
//    "Taming Momentum in a Distributed Asynchronous Environment", 2019); this form needs
//    no knowledge of the optimizer, only the last update. Training metrics are computed
//    on the extrapolated values; evaluation and reads of the variables see the real ones
//    (or, with an averaging optimizer, their average: model/optim/optimizer.hpp).
//  - staleness_lr: the learning rate of a gradient tau versions old is divided by tau
//    (tau >= 1), as in Zhang, Gupta, Lian and Liu, "Staleness-aware Async-SGD for
//    Distributed Deep Learning", IJCAI 2016.
//  - dc_asgd(lambda): delay-compensated ASGD (Zheng, Meng, Wang, Chen, Yu, Ma and Liu,
//    "Asynchronous Stochastic Gradient Descent with Delay Compensation", ICML 2017): the
//    gradient becomes g + lambda g*g*(w_now - w_read), element-wise, a first-order Taylor
//    correction with g*g standing for the Hessian's diagonal. The shard keeps the values
//    of its last 16 versions (the current one included) to know w_read, so a gradient up
//    to 15 versions late is compensated; an older one is applied as it is (and counted
//    per partition: ps_stats::uncompensated).
//
// All three act on dense partitions; rows of row-pulled (sparse) variables are applied
// as they are. Synchronous training has no staleness and ignores the setting. None
// changes what is applied exactly once: the ledgers, de-duplication and checkpoints are
// the same, and the kept versions are not part of a checkpoint (after a restore the
// compensation starts again from the restored values).
//
// Measured on Fashion-MNIST (docs/benchmarks.md, "Staleness compensation").

#include <cstdint>
#include <string>

namespace actortrain {

class staleness_compensation {
 public:
  enum class kind { none, lookahead, staleness_lr, dc_asgd };

  static staleness_compensation none() { return {kind::none, 0}; }
  /// k updates ahead (0 < k <= 8); 0: the partition's measured mean staleness (capped
  /// at 8). With pull_every > 1 the measured staleness includes the reused steps' lag.
  static staleness_compensation lookahead(double k = 0) { return {kind::lookahead, k}; }
  static staleness_compensation staleness_lr() { return {kind::staleness_lr, 0}; }
  static staleness_compensation dc_asgd(double lambda) { return {kind::dc_asgd, lambda}; }

  /// "none", "lookahead" (measured k), "lookahead(k)" (0 < k <= 8), "staleness_lr" or
  /// "dc_asgd(lambda)" (0 < lambda <= 1e6). Throws std::invalid_argument naming the
  /// text and what is allowed.
  static staleness_compensation parse(const std::string& text);

  staleness_compensation() = default;  ///< none
  kind mode() const { return kind_; }
  /// lookahead's k (0: measured) or dc_asgd's lambda; 0 otherwise.
  double parameter() const { return parameter_; }
  /// The text parse reads back.
  std::string to_string() const;

  friend bool operator==(const staleness_compensation& a, const staleness_compensation& b) {
    return a.kind_ == b.kind_ && a.parameter_ == b.parameter_;
  }
  friend bool operator!=(const staleness_compensation& a, const staleness_compensation& b) { return !(a == b); }

 private:
  staleness_compensation(kind k, double p) : kind_(k), parameter_(p) {}
  kind kind_ = kind::none;
  double parameter_ = 0;
};

}  // namespace actortrain
