#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// One dense partition's staleness compensation (ps/compensation.hpp has the methods and
// their papers), kept by the shard store beside the partition's values. The store calls
// before() and after() around every optimizer apply of the partition, view() for every
// training step's pull, and reset() whenever the values are replaced (init, restore).
// tests/actors/compensation_test.cpp tests it alone.

#include <actortrain/actors/ps/compensation.hpp>
#include <actortrain/model/tensor.hpp>

#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

namespace actortrain {

class compensator {
 public:
  explicit compensator(staleness_compensation how = {}) : how_(how) {}

  /// Before the apply of gradient `g`, computed on version `read_version`, to `w` at
  /// `version`: the gradient to apply (`g`'s data, or a compensated copy's, valid until
  /// the next call) and the learning-rate scale (1 unless staleness_lr).
  const float* before(const model::matrix& w, uint64_t version, uint64_t read_version, const model::matrix& g,
                      double& lr_scale);
  /// lookahead with a horizon above 0: where the apply of `w` (between before() and
  /// after()) writes the extrapolated values, horizon() updates ahead along it
  /// (model::optimizer::apply_dense_ahead); nullptr otherwise (apply_dense).
  float* ahead(const model::matrix& w);
  /// After the apply: `w` is now at version `version`.
  void after(const model::matrix& w, uint64_t version);
  /// What a training step's pull of `w` at `version` sees: `w` itself, or (lookahead,
  /// once an update was seen) the extrapolated values the apply wrote.
  std::shared_ptr<const model::matrix> view(const std::shared_ptr<model::matrix>& w, uint64_t version);
  /// The values were replaced (init or restore): what was kept is forgotten.
  void reset(const model::matrix& w, uint64_t version);

  /// Applies of a gradient older than the kept versions (dc_asgd), applied as they were.
  uint64_t uncompensated() const { return uncompensated_; }
  /// lookahead: how far the next view extrapolates (the k given, or the mean staleness).
  double horizon() const;

 private:
  staleness_compensation how_;
  // lookahead: the mean staleness, the view and the version it is of, the buffer the
  // apply under way writes, and the views' buffers (reused once no reply holds one).
  double mean_lag_ = 0;
  uint64_t lags_seen_ = 0;
  std::shared_ptr<model::matrix> view_, pending_;
  uint64_t view_version_ = 0;
  std::vector<std::shared_ptr<model::matrix>> view_buffers_;
  // dc_asgd: the values of the last versions, oldest first, and the compensated gradient.
  std::deque<std::pair<uint64_t, model::matrix>> kept_;
  model::matrix corrected_;
  uint64_t uncompensated_ = 0;
};

}  // namespace actortrain
