#pragma once
// Where a worker's requests that move tensors (pull, pull_rows, push) to a ps shard go:
// to the shard itself (in-process, or over BASP), or to the shard's data-plane stand-in
// while one is connected (net/data_plane.hpp: it enters itself once connected and
// leaves when it ends, so those requests fall back to BASP whenever no data plane is
// up). The data plane owns this decision; the send seam only carries the request where
// it is told (send_seam::request with `via`) while its fault policy sees the shard.
// One table per worker process, shared by its workers and stand-ins; thread-safe.

#include <caf/actor.hpp>
#include <caf/actor_addr.hpp>
#include <caf/actor_cast.hpp>

#include <map>
#include <mutex>

namespace actortrain {

class shard_routes {
 public:
  /// From now on tensor requests to `shard` go to `via`.
  void enter(const caf::actor_addr& shard, caf::actor via) {
    std::lock_guard<std::mutex> lock{mtx_};
    routes_[shard] = std::move(via);
  }
  /// Ends the route to `shard` if it still goes through `via`.
  void leave(const caf::actor_addr& shard, const caf::actor_addr& via) {
    std::lock_guard<std::mutex> lock{mtx_};
    auto i = routes_.find(shard);
    if (i != routes_.end() && i->second.address() == via) routes_.erase(i);
  }
  /// Where a tensor request to `shard` goes now: its stand-in, or `shard` itself.
  template <class Handle>
  caf::actor to(const Handle& shard) const {
    auto dest = caf::actor_cast<caf::actor>(shard);
    std::lock_guard<std::mutex> lock{mtx_};
    auto i = routes_.find(dest.address());
    return i == routes_.end() ? dest : i->second;
  }

 private:
  mutable std::mutex mtx_;
  std::map<caf::actor_addr, caf::actor> routes_;
};

}  // namespace actortrain
