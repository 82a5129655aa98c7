#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// When a ps shard applies a validated push: at once (asynchronous and bounded-staleness
// training) or held until the coordinator closes its synchronous round. Plugged into the
// shard (ps_shard_options::policy); the shard store (actors/src/ps/shard_store.hpp) calls it.

#include <actortrain/actors/ps/protocol.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace actortrain {

/// When a validated, new push is applied. The ps shard calls on_push for every push that
/// passed validation and is not a duplicate; `apply` applies a push now (the optimizer
/// step on every slice, versions + 1). The shard remembers the step id either way, so a
/// held push's re-run is a duplicate.
class apply_policy {
 public:
  virtual ~apply_policy() = default;
  virtual std::string describe() const = 0;
  virtual push_status on_push(push_request& req, const std::function<void(push_request&)>& apply) = 0;
  /// A round closes (round_request): apply what is held for its steps, and return the
  /// computations used (one per step this shard held a push of).
  virtual std::vector<applied_by> on_round(const round_request&, const std::function<void(push_request&)>&) {
    return {};
  }
  /// Drops everything held (the shard is being restored).
  virtual void clear() {}
  /// Pushes held now.
  virtual size_t held() const { return 0; }
  /// Whether a push may be applied to values other steps moved since it read them: then
  /// the shard's staleness compensation (ps/compensation.hpp) applies; a policy that
  /// applies rounds on the parameters the round read has no staleness to compensate.
  virtual bool applies_stale_gradients() const { return true; }
};

/// Asynchronous training: every push is applied on arrival.
std::unique_ptr<apply_policy> apply_now();

/// Synchronous rounds: pushes are held (acknowledged as push_status::held on receipt)
/// until the coordinator closes their round; then the shard applies once, per partition,
/// the example-weighted mean of the round's gradients: sum_i n_i g_i / N, with n_i the
/// push's example count and N the round's (round_request::example_count), which equals
/// the gradient of the mean loss over the round's global batch. Sparse rows are merged
/// the same way (a row no step touched gets no update). One policy per shard.
std::unique_ptr<apply_policy> hold_for_round();

}  // namespace actortrain
