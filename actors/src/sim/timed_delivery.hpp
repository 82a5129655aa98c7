#pragma once
// The send seam's side of the simulator's cost model (sim/cost_model.hpp): a fault
// policy that asks the plan (if any) first and delays every message it delivers by what
// the model charges, on the test coordinator's clock. Internal to the simulator.

#include <actortrain/actors/core/send_seam.hpp>
#include <actortrain/actors/sim/cost_model.hpp>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace actortrain::detail {

class timed_delivery final : public fault_policy {
 public:
  /// `floats_on[p]`: the floats of the dense partitions on ps shard p (what a pull
  /// brings and a push carries); `batch_bytes`: a training batch; `now`: simulated
  /// seconds.
  timed_delivery(cost_params p, std::vector<double> floats_on, double batch_bytes, std::function<double()> now,
                 std::shared_ptr<fault_policy> plan);

  delivery decide(const message_info& m) override;
  void on_spawn(const caf::actor_addr& a, actor_role role, uint32_t index) override;

  /// CPU seconds each ps shard was busy.
  std::vector<double> ps_busy() const;
  /// The time each of a worker's steps' pulls took, from the first leaving to the last
  /// reply received (what a worker's metrics call `pull`), in the order they ended.
  std::vector<double> pull_seconds() const;

 private:
  cost_model model_;
  std::vector<double> floats_on_;
  double batch_bytes_;
  std::function<double()> now_;
  std::shared_ptr<fault_policy> plan_;
  std::map<caf::actor_addr, cost_model::task> tasks_;
  std::map<uint32_t, double> computed_at_;  // per worker: when its last step computed
  struct pull_group {
    double now = -1, start = 0, end = 0;
  };
  std::map<uint32_t, pull_group> pulls_;  // per worker: its step's pulls so far
  std::vector<double> pull_times_;
  mutable std::mutex mtx_;
};

}  // namespace actortrain::detail
