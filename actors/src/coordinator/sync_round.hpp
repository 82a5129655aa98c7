#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// What the consistency modes keep of a run, as plain values (tested alone in
// tests/actors/sync_round_test.cpp):
//  - the dispatch order: every training step gets an index when it is first dispatched
//    (a re-run keeps it) until it is applied or found past the data; the
//    bounded-staleness gate looks at the oldest index not applied (dispatch_gate.hpp);
//  - the open synchronous round: its steps, the first answer of each (its pushes held on
//    the shards), whether its manifest is out, and under which attempt (the answers of a
//    superseded close are ignored).
// The coordinator actor sends the manifests and counts the applied steps.
//
// `Result` is the coordinator's step_result (its `loss` and `example_count` are read).

#include <actortrain/actors/core/step_id.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <utility>
#include <vector>

namespace actortrain {

template <class Result>
class sync_round {
 public:
  // -- the dispatch order ----------------------------------------------------------------

  /// Indices handed out in this run.
  uint64_t dispatched() const { return next_index_; }
  /// The lowest index not applied yet (dispatched() when every one is).
  uint64_t oldest_unapplied() const { return unapplied_.empty() ? next_index_ : unapplied_.begin()->first; }

  /// Training step `s` is dispatched for the first time; with rounds (`rounds`) it joins
  /// the open one.
  void dispatch(const step_id& s, bool rounds) {
    index_of_[s] = next_index_;
    unapplied_[next_index_++] = s;
    if (rounds) members_.insert(s);
  }

  /// Step `s` is applied: it leaves the staleness window.
  void settle(const step_id& s) {
    auto i = index_of_.find(s);
    if (i == index_of_.end()) return;
    unapplied_.erase(i->second);
    index_of_.erase(i);
  }

  /// Step `s` was past its pipeline's data: it is neither applied nor in the round.
  void past_the_data(const step_id& s) {
    settle(s);
    members_.erase(s);
  }

  // -- the open round --------------------------------------------------------------------

  uint64_t number() const { return number_; }
  /// The round a restored run continues with (1 for a new run).
  void continue_at(uint64_t number) { number_ = number; }
  size_t members() const { return members_.size(); }
  bool closing() const { return closing_; }
  /// No step in the round and no manifest out.
  bool empty() const { return members_.empty() && !closing_; }

  /// Step `s` was answered, its pushes held on the shards: the first answer of a member
  /// counts. False when `s` is not in the round.
  bool answered(const step_id& s, Result r) {
    if (!members_.count(s)) return false;
    results_.emplace(s, std::move(r));
    return true;
  }

  /// The round may close: every member answered, and it is full (`round_size` steps) or
  /// no more steps can join it (`no_more`: the epoch's steps are all dispatched).
  bool ready(uint64_t round_size, bool no_more) const {
    if (round_size == 0 || closing_ || members_.empty()) return false;
    if (results_.size() < members_.size()) return false;
    return members_.size() >= round_size || no_more;
  }

  /// The manifest of a closing round.
  struct manifest {
    uint64_t attempt = 0;
    uint64_t number = 0;
    std::vector<step_id> steps;
    int64_t example_count = 0;
  };

  /// Closes the round: its manifest, under a new attempt.
  manifest close() {
    closing_ = true;
    manifest m;
    m.attempt = ++attempt_;
    m.number = number_;
    for (auto& [s, r] : results_) {
      m.steps.push_back(s);
      m.example_count += r.example_count;
    }
    return m;
  }

  /// True while answers to the close under `attempt` count.
  bool current(uint64_t attempt) const { return attempt == attempt_; }

  /// An applied round: its number, each step's answer, and the example-weighted mean
  /// loss (what every replica of a synchronous strategy sees).
  struct applied_round {
    uint64_t number = 0;
    std::map<step_id, Result> results;
    double loss = 0;
  };

  /// Every shard applied the round: its steps leave the window, and the next round opens.
  applied_round applied() {
    applied_round a;
    a.results = std::move(results_);
    a.number = number_++;
    results_.clear();
    members_.clear();
    closing_ = false;
    double loss_sum = 0;
    int64_t examples = 0;
    for (auto& [s, r] : a.results) {
      loss_sum += r.loss * static_cast<double>(r.example_count);
      examples += r.example_count;
    }
    a.loss = examples > 0 ? loss_sum / static_cast<double>(examples) : 0.0;
    for (auto& [s, r] : a.results) settle(s);
    return a;
  }

  /// Forgets the dispatch order and the open round (their steps will not be applied); a
  /// close in progress is void.
  void forget() {
    unapplied_.clear();
    index_of_.clear();
    members_.clear();
    results_.clear();
    closing_ = false;
    ++attempt_;
  }

 private:
  uint64_t next_index_ = 0;
  std::map<uint64_t, step_id> unapplied_;
  std::map<step_id, uint64_t> index_of_;
  uint64_t number_ = 1;
  std::set<step_id> members_;
  std::map<step_id, Result> results_;
  bool closing_ = false;
  uint64_t attempt_ = 0;
};

}  // namespace actortrain
