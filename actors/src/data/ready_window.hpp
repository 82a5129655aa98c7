#pragma once
// The batches a dataset shard prepared ahead of its requests, by position within one
// epoch, and which position to prepare next. CAF-free: the shard actor keeps the
// iterator, the messages and the sends; this decides what is kept and what comes next.
//
// Requests do not arrive in position order: workers pull ahead and several workers read
// one pipeline, so position p + 2 is often asked for before p. A batch prepared for a
// position therefore stays until it is asked for, or until requests have moved `keep`
// positions past it (a step given up, or redone elsewhere, never asks again). Dropping
// every batch behind the newest request instead sent each late request back to the
// pipeline, which seeks (replays) to serve it.
//
// The window prepares positions in order after the newest request, at most `ahead` of
// them waiting, and none past the epoch's end once a batch reports it. It holds at most
// ahead + keep + 1 batches. A request further back than `keep` is served without the
// window, which stays where it is: that is a roll-back replaying from there (read on
// demand until it passes the newest position again: a sequential read, no seek) or a
// worker far behind another (restarting the window there would clear it at each of
// their turns).

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <optional>
#include <utility>

namespace actortrain {

template <class Batch>
class ready_window {
 public:
  ready_window(size_t ahead, size_t keep) : ahead_(ahead), keep_(keep) {}

  /// The batch prepared for `index` of `epoch`, taken out (nothing when it was not
  /// prepared). Counts as a request: another epoch's batches are dropped, and so are
  /// those now more than `keep` positions behind the newest request.
  std::optional<Batch> take(uint64_t epoch, uint64_t index) {
    note_request(epoch, index);
    std::optional<Batch> out;
    if (auto i = ready_.find(index); i != ready_.end()) {
      out = std::move(i->second);
      ready_.erase(i);
    }
    return out;
  }

  /// The position to prepare next, if one: the first not prepared after the newest
  /// request, while fewer than `ahead` wait there and the epoch's end is not reached.
  std::optional<uint64_t> next() const {
    if (!started_ || ahead_ == 0) return std::nullopt;
    if (end_ && next_ > *end_) return std::nullopt;
    const auto waiting = static_cast<size_t>(std::distance(ready_.upper_bound(newest_), ready_.end()));
    if (waiting >= ahead_) return std::nullopt;
    return next_;
  }

  /// The batch prepared for next() (`end`: the epoch has no batch at index, nor after).
  void put(uint64_t epoch, uint64_t index, Batch b, bool end) {
    if (!started_ || epoch != epoch_ || index + keep_ < newest_) return;  // stale
    if (end && (!end_ || index < *end_)) end_ = index;
    ready_.insert_or_assign(index, std::move(b));
    if (index >= next_) next_ = index + 1;
  }

  /// Whether `index` of `epoch` is known to be past the epoch's end (its answer: the end,
  /// without asking the pipeline, which would seek).
  bool past_end(uint64_t epoch, uint64_t index) const { return started_ && epoch == epoch_ && end_ && index > *end_; }

  /// The epoch has no batch at `index` (nor after): found by a request served directly.
  /// Nothing is prepared from there (a seek past the end replays a whole streamed epoch).
  void ends_at(uint64_t epoch, uint64_t index) {
    if (started_ && epoch == epoch_ && (!end_ || index < *end_)) end_ = index;
  }

  /// Forgets every prepared batch (the next request starts afresh).
  void clear() {
    ready_.clear();
    started_ = false;
    end_.reset();
  }

  size_t size() const { return ready_.size(); }
  /// The epoch of the newest request.
  uint64_t epoch() const { return epoch_; }

 private:
  void note_request(uint64_t epoch, uint64_t index) {
    if (!started_ || epoch != epoch_) {
      ready_.clear();
      end_.reset();
      started_ = true;
      epoch_ = epoch;
      newest_ = index;
      next_ = index + 1;
    } else if (index > newest_) {
      newest_ = index;
    }
    if (next_ <= newest_) next_ = newest_ + 1;
    if (newest_ > keep_) ready_.erase(ready_.begin(), ready_.lower_bound(newest_ - keep_));
  }

  size_t ahead_, keep_;
  bool started_ = false;
  uint64_t epoch_ = 0;
  uint64_t newest_ = 0;  // the newest position asked for in epoch_
  uint64_t next_ = 0;    // the first position after every one prepared or asked for
  std::optional<uint64_t> end_;
  std::map<uint64_t, Batch> ready_;
};

}  // namespace actortrain
