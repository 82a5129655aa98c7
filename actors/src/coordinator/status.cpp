// What the coordinator reports of a running cluster: recent failures and recoveries kept
// from events, the workers' rates and staleness, every shard's counters (state.hpp).
#include "state.hpp"

#include "../core/planted.hpp"

namespace actortrain::coord {

// What the status report keeps of an event.
void note_for_status(coord_state& st, const event& e) {
  constexpr size_t steps_kept = 64, events_kept = 12;
  std::string what;
  auto with_why = [&](std::string s) { return e.text.empty() ? s : s + ": " + e.text; };
  switch (e.kind) {
    case event_kind::step_done: {
      auto& q = st.recent_steps[e.worker];
      q.emplace_back(e.seconds, e.staleness);
      if (q.size() > steps_kept) q.pop_front();
      return;
    }
    case event_kind::checkpoint_done:
      st.checkpoint_step = static_cast<int64_t>(e.count);
      st.checkpoint_dir = e.text;
      st.checkpoint_at = e.seconds;
      return;
    case event_kind::worker_lost: what = with_why(fmt::format("worker {} (generation {}) lost", e.worker, e.generation)); break;
    case event_kind::worker_joined:
      if (e.generation <= 1) return;
      what = fmt::format("worker {} rejoined as generation {}", e.worker, e.generation);
      break;
    case event_kind::steps_requeued: what = fmt::format("{} step(s) of worker {} re-queued", e.count, e.worker); break;
    case event_kind::ps_lost: what = with_why(fmt::format("ps shard {} lost", e.count)); break;
    case event_kind::ps_restored: what = fmt::format("every ps shard restored to the checkpoint of step {}", e.count); break;
    case event_kind::dataset_lost: what = with_why(fmt::format("dataset shard {} lost", e.pipeline)); break;
    case event_kind::dataset_rebuilt: what = fmt::format("dataset shard {} rebuilt", e.pipeline); break;
    case event_kind::resumed: what = fmt::format("resumed from the checkpoint of step {}", e.count); break;
    default: return;
  }
  st.recent_events.emplace_back(e.seconds, std::move(what));
  if (st.recent_events.size() > events_kept) st.recent_events.pop_front();
}

// The status report: asks every shard for its counters (bounded), then answers.
caf::result<status_report> on_report(self_ptr self) {
  auto& st = self->state;
  auto now = std::chrono::duration<double>(std::chrono::steady_clock::now() - st.started).count();
  status_report r;
  r.run = st.run;
  r.training = st.ph != phase::idle;
  r.epoch = st.epoch;
  r.steps_applied = st.applied_run;
  r.uptime = now;
  for (auto& w : st.workers) {
    worker_report wr{w.id, w.generation, w.alive, w.outstanding > 0, w.steps, 0, 0};
    if (auto i = st.recent_steps.find(w.id); i != st.recent_steps.end() && !i->second.empty()) {
      std::vector<std::pair<double, uint64_t>> last;  // within the last 10 s
      for (auto& s : i->second)
        if (now - s.first <= 10) last.push_back(s);
      double sum = 0;
      for (auto& s : last) sum += static_cast<double>(s.second);
      if (!last.empty()) wr.mean_staleness = sum / static_cast<double>(last.size());
      // Steps per second: the steps after the first over their span, or over the
      // time since the first when they are few.
      if (last.size() >= 2 && last.back().first > last.front().first)
        wr.steps_per_second = static_cast<double>(last.size() - 1) / (last.back().first - last.front().first);
    }
    r.workers.push_back(wr);
  }
  r.checkpoint_step = st.checkpoint_step;
  r.checkpoint_dir = st.checkpoint_dir;
  r.checkpoint_age = st.checkpoint_step >= 0 ? now - st.checkpoint_at : 0;
  r.recent.assign(st.recent_events.begin(), st.recent_events.end());
  auto rp = self->make_response_promise<status_report>();
  auto n = st.opts.ps.size();
  if (n == 0) {
    rp.deliver(std::move(r));
    return rp;
  }
  auto report = std::make_shared<status_report>(std::move(r));
  report->shards.resize(n);
  auto left = std::make_shared<size_t>(n);
  auto placement = st.opts.placement;
  auto timeout = std::min<caf::timespan>(st.opts.timeout, std::chrono::seconds(5));
  for (size_t i = 0; i < n; ++i) {
    report->shards[i].shard = static_cast<uint32_t>(i);
    auto done = [report, left, rp]() mutable {
      if (--*left == 0) rp.deliver(std::move(*report));
    };
    st.opts.seam->request(self, st.opts.ps[i], timeout, stats_atom::value)
      .then(
        [report, i, placement, done](ps_stats& s) mutable {
          auto& sr = report->shards[i];
          sr.applied = s.applied;
          sr.base = s.base;
          std::map<std::pair<int32_t, int32_t>, uint64_t> versions;
          for (auto& v : s.versions) versions[{v.key.variable, v.key.index}] = v.version;
          if (placement)
            for (auto& vp : placement->variables())
              for (auto& part : vp.partitions)
                if (static_cast<size_t>(part.ps) == i) {
                  auto k = versions.find({vp.variable, part.index});
                  sr.partitions.push_back(partition_report{vp.name, part.index, part.row_begin,
                                                           part.row_begin + part.rows(), vp.shape.cols,
                                                           k == versions.end() ? 0 : k->second});
                }
          done();
        },
        [report, i, done](caf::error& e) mutable {
          report->shards[i].error = describe(e);
          done();
        });
  }
  return rp;
}

}  // namespace actortrain::coord
