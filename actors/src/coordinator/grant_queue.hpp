#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// The steps an application scheduled in a run of scheduled steps (run_spec::on_demand,
// cluster::schedule), as plain values (tested alone in tests/actors/grant_queue_test.cpp):
// every grant by ticket (1, 2, ...: which step function, which input pipeline or any),
// the tickets not dispatched yet in the order granted, and whether more may come. The
// coordinator actor dispatches from the front; a step that found its pipeline at its
// end goes back to the front; a roll-back to a checkpoint puts back what was open then
// and every ticket granted since. What a ticket's step computed is not kept here: the
// coordinator's events carry it to the application.

#include <cstdint>
#include <deque>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace actortrain {

class grant_queue {
 public:
  struct grant {
    uint32_t step_fn = 0;
    int32_t replica = -1;  ///< an input pipeline, or -1: any
  };

  /// Grants tickets first, first + 1, ... (one per `fns[k]`, `replicas[k]`). Tickets
  /// already granted are skipped (a grant sent again after a take-over); a gap (first
  /// past the next ticket) throws std::invalid_argument, as do vectors of different
  /// lengths, as does a new ticket after an `end`. `end`: no more grants after these.
  void add(uint64_t first, const std::vector<uint32_t>& fns, const std::vector<int32_t>& replicas, bool end) {
    if (fns.size() != replicas.size())
      throw std::invalid_argument("step grants: " + std::to_string(fns.size()) + " step functions for " +
                                  std::to_string(replicas.size()) + " replicas");
    if (closed_ && first + fns.size() > grants_.size() + 1)
      throw std::invalid_argument("step grants: ticket " + std::to_string(grants_.size() + 1) + " after the end");
    if (first == 0 || first > grants_.size() + 1)
      throw std::invalid_argument("step grants: ticket " + std::to_string(first) + " after ticket " +
                                  std::to_string(grants_.size()) + " (a gap)");
    for (size_t k = 0; k < fns.size(); ++k) {
      auto ticket = first + k;
      if (ticket <= grants_.size()) continue;  // known
      grants_.push_back(grant{fns[k], replicas[k]});
      open_.push_back(ticket);
    }
    if (end) closed_ = true;
  }

  /// The next ticket to dispatch.
  std::optional<uint64_t> front() const {
    if (open_.empty()) return std::nullopt;
    return open_.front();
  }
  /// What ticket `t` (from 1) asks for.
  const grant& at(uint64_t t) const { return grants_.at(t - 1); }
  void pop() { open_.pop_front(); }
  /// Ticket `t` was dispatched and found no batch: it goes first again.
  void put_back(uint64_t t) { open_.push_front(t); }

  /// No more grants will come, and every ticket was dispatched.
  bool exhausted() const { return closed_ && open_.empty(); }
  bool closed() const { return closed_; }
  uint64_t granted() const { return grants_.size(); }
  const std::deque<uint64_t>& open() const { return open_; }

  /// Back to a checkpoint's point, where `open` were the open tickets and `granted` the
  /// tickets granted: those, then every ticket granted since, are open again.
  void restore(const std::vector<uint64_t>& open, uint64_t granted) {
    if (granted > grants_.size())
      throw std::runtime_error("the checkpoint's run had granted " + std::to_string(granted) + " scheduled steps, this one " +
                               std::to_string(grants_.size()));
    open_.assign(open.begin(), open.end());
    for (auto t : open_)
      if (t == 0 || t > granted) throw std::runtime_error("the checkpoint holds scheduled step " + std::to_string(t) +
                                                          " that it had not granted");
    for (uint64_t t = granted + 1; t <= grants_.size(); ++t) open_.push_back(t);
  }

  /// A new run: nothing granted.
  void reset() {
    grants_.clear();
    open_.clear();
    closed_ = false;
  }

 private:
  std::vector<grant> grants_;
  std::deque<uint64_t> open_;
  bool closed_ = false;
};

}  // namespace actortrain
