#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// The coordinator's work in hand, as plain values (tested alone in
// tests/actors/step_queue_test.cpp): the tasks each worker holds (in flight, in sending
// order, matched by task id), the tasks of lost workers being fenced out (per worker,
// under the id of the fence round that releases them), the re-queued tasks waiting for a
// worker, and per step the failed attempts and the workers (generations) they failed on.
// The coordinator actor keeps the sending, the fences' requests and the timers; what is
// decided about this work is decided here.
//
// `Task` is the coordinator's step_task (a vector<step_id> `steps` of one pipeline);
// nothing else of it is read here.

#include <actortrain/actors/core/step_id.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

namespace actortrain {

/// A task handed to a worker, remembered until its result arrives.
template <class Task>
struct pending_work {
  Task task;
  bool eval = false;
  uint64_t id = 0;          ///< per dispatch; a speculative copy carries its original's
  bool speculated = false;  ///< a copy runs (or ran) on another worker
  std::chrono::steady_clock::time_point sent;
};

template <class Task>
class step_queue {
 public:
  using pending = pending_work<Task>;
  using worker_generation = std::pair<uint32_t, uint64_t>;

  // -- in flight -------------------------------------------------------------------------

  /// `p` was sent to `worker`.
  void sent(uint32_t worker, pending p) { in_flight_[worker].push_back(std::move(p)); }

  /// Removes and returns task `id` of `worker`. By id, not by step: a late answer for an
  /// end-of-data probe must not settle the next epoch's step at that position.
  std::optional<pending> take(uint32_t worker, uint64_t id) {
    auto it = in_flight_.find(worker);
    if (it == in_flight_.end()) return std::nullopt;
    auto& tasks = it->second;
    for (auto t = tasks.begin(); t != tasks.end(); ++t)
      if (t->id == id) {
        auto out = std::move(*t);
        tasks.erase(t);
        if (tasks.empty()) in_flight_.erase(it);
        return out;
      }
    return std::nullopt;
  }

  /// Removes every other copy of speculated task `id` (its answer, if it comes, is
  /// stale); returns the worker of each copy removed, in worker order.
  std::vector<uint32_t> drop_twins(uint64_t id) {
    std::vector<uint32_t> from;
    for (auto it = in_flight_.begin(); it != in_flight_.end();) {
      auto& tasks = it->second;
      for (auto t = tasks.begin(); t != tasks.end();)
        if (t->id == id) {
          t = tasks.erase(t);
          from.push_back(it->first);
        } else {
          ++t;
        }
      it = tasks.empty() ? in_flight_.erase(it) : std::next(it);
    }
    return from;
  }

  /// True when some worker holds a task `id` (a speculated task's other copy).
  bool has_twin(uint64_t id) const { return find(id) != nullptr; }

  /// The task `id` that `worker` holds, if any.
  const pending* held(uint32_t worker, uint64_t id) const {
    auto it = in_flight_.find(worker);
    if (it == in_flight_.end()) return nullptr;
    for (auto& t : it->second)
      if (t.id == id) return &t;
    return nullptr;
  }

  /// The first copy of task `id` not yet speculated, and its worker (a straggler).
  std::pair<pending*, uint32_t> straggler(uint64_t id) {
    pending* slow = nullptr;
    uint32_t owner = 0;
    for (auto& [w, tasks] : in_flight_)
      for (auto& t : tasks)
        if (t.id == id && !t.speculated) {
          slow = &t;
          owner = w;
        }
    return {slow, owner};
  }

  /// Removes and returns every task `worker` holds (it was lost), in sending order.
  std::vector<pending> take_all(uint32_t worker) {
    std::vector<pending> out;
    if (auto it = in_flight_.find(worker); it != in_flight_.end()) {
      out = std::move(it->second);
      in_flight_.erase(it);
    }
    return out;
  }

  /// Tasks held by all workers.
  size_t in_flight() const {
    size_t n = 0;
    for (auto& [w, tasks] : in_flight_) n += tasks.size();
    return n;
  }
  bool nothing_in_flight() const { return in_flight_.empty(); }

  // -- fencing out a lost worker ---------------------------------------------------------

  /// Holds the training tasks of lost `worker` until every shard acknowledged the fence
  /// that excludes it; returns the id of that fence round. A newer loss of the same worker
  /// starts a newer round: the older one's acknowledgements release nothing.
  uint64_t fence(uint32_t worker, std::vector<Task> tasks) {
    auto& waiting = fencing_[worker];
    for (auto& t : tasks) waiting.push_back(std::move(t));
    return fence_round_[worker] = ++next_fence_round_;
  }

  /// True while `round` is the current fence round of `worker`.
  bool fence_current(uint32_t worker, uint64_t round) const {
    auto r = fence_round_.find(worker);
    return r != fence_round_.end() && r->second == round;
  }

  /// Fence round `round` of `worker` is acknowledged by every shard: its tasks, to be
  /// re-queued (nothing when the round is not current).
  std::optional<std::vector<Task>> release(uint32_t worker, uint64_t round) {
    if (!fence_current(worker, round)) return std::nullopt;
    fence_round_.erase(worker);
    auto it = fencing_.find(worker);
    if (it == fencing_.end()) return std::nullopt;
    auto fenced = std::move(it->second);
    fencing_.erase(it);
    return fenced;
  }

  // -- re-queued -------------------------------------------------------------------------

  /// `t` waits for a worker (before any new step).
  void requeue(Task t) { requeued_.push_back(std::move(t)); }

  /// Removes and returns the first re-queued task, in queue order, that `take` accepts
  /// (`take` sees every task up to the one accepted, once each).
  template <class Accept>
  std::optional<Task> take_requeued(Accept&& take) {
    for (auto i = requeued_.begin(); i != requeued_.end(); ++i)
      if (take(static_cast<const Task&>(*i))) {
        auto t = std::move(*i);
        requeued_.erase(i);
        return t;
      }
    return std::nullopt;
  }

  // -- failures --------------------------------------------------------------------------

  /// Step `s` failed on `worker` (its generation); returns its failed attempts so far.
  int failed(const step_id& s, uint32_t worker, uint64_t generation) {
    failed_on_[s].emplace(worker, generation);
    return ++failures_[s];
  }

  /// True when a step of `t` failed before: it runs alone, so that if it fails again it
  /// is the one to blame.
  bool suspect(const Task& t) const {
    for (auto& s : t.steps)
      if (auto f = failures_.find(s); f != failures_.end() && f->second > 0) return true;
    return false;
  }

  /// True when `t` should not go to `to` now: its first step failed on that worker
  /// generation, and one of `alive` has not failed it (a cut-off worker would fail it
  /// again and again).
  bool avoids(const Task& t, const worker_generation& to, const std::vector<worker_generation>& alive) const {
    auto f = failed_on_.find(t.steps.front());
    if (f == failed_on_.end() || !f->second.count(to)) return false;
    for (auto& w : alive)
      if (!f->second.count(w)) return true;
    return false;
  }

  /// A new run: no step has failed.
  void forget_failures() {
    failures_.clear();
    failed_on_.clear();
  }

  // -- all of it -------------------------------------------------------------------------

  /// Nothing in flight, fenced or re-queued.
  bool idle() const { return in_flight_.empty() && fencing_.empty() && requeued_.empty(); }

  /// Forgets every task sent, queued or being fenced (a restore supersedes them; their
  /// late answers find nothing pending, and pending fence rounds release nothing).
  void forget_work() {
    in_flight_.clear();
    requeued_.clear();
    fencing_.clear();
    fence_round_.clear();
  }

  /// Lowers `positions` (per pipeline, the lowest position not known applied so far) to
  /// the first step of every training task held, fenced or re-queued: none of those is
  /// applied yet. The result is the watermark: below it every step is applied.
  std::vector<uint64_t> watermark(std::vector<uint64_t> positions) const {
    auto lower = [&positions](const Task& t) {
      for (auto& s : t.steps)
        if (s.pipeline < positions.size()) positions[s.pipeline] = std::min(positions[s.pipeline], s.position);
    };
    for (auto& [w, tasks] : in_flight_)
      for (auto& t : tasks)
        if (!t.eval) lower(t.task);
    for (auto& t : requeued_) lower(t);
    for (auto& [w, tasks] : fencing_)
      for (auto& t : tasks) lower(t);
    return positions;
  }

 private:
  const pending* find(uint64_t id) const {
    for (auto& [w, tasks] : in_flight_)
      for (auto& t : tasks)
        if (t.id == id) return &t;
    return nullptr;
  }

  std::map<uint32_t, std::vector<pending>> in_flight_;  // by worker, in sending order
  std::map<uint32_t, std::vector<Task>> fencing_;
  std::map<uint32_t, uint64_t> fence_round_;
  uint64_t next_fence_round_ = 0;
  std::deque<Task> requeued_;
  std::map<step_id, int> failures_;
  std::map<step_id, std::set<worker_generation>> failed_on_;
};

}  // namespace actortrain
