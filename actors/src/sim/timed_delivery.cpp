#include "timed_delivery.hpp"

#include <algorithm>
#include <cmath>

namespace actortrain::detail {

timed_delivery::timed_delivery(cost_params p, std::vector<double> floats_on, double batch_bytes,
                               std::function<double()> now, std::shared_ptr<fault_policy> plan)
    : model_(p), floats_on_(std::move(floats_on)), batch_bytes_(batch_bytes), now_(std::move(now)), plan_(std::move(plan)) {}

void timed_delivery::on_spawn(const caf::actor_addr& a, actor_role role, uint32_t index) {
  if (plan_) plan_->on_spawn(a, role, index);
  std::lock_guard<std::mutex> lock{mtx_};
  switch (role) {
    case actor_role::coordinator: tasks_[a] = {cost_model::role::coordinator, 0}; break;
    case actor_role::worker: tasks_[a] = {cost_model::role::worker, index}; break;
    case actor_role::ps: tasks_[a] = {cost_model::role::ps, index}; break;
    case actor_role::dataset: tasks_[a] = {cost_model::role::dataset, index}; break;
    default: break;
  }
}

delivery timed_delivery::decide(const message_info& m) {
  if (plan_) {
    auto d = plan_->decide(m);
    if (d.what != delivery::kind::deliver) return d;  // a fault: as the plan says
  }
  std::lock_guard<std::mutex> lock{mtx_};
  auto from = tasks_.find(m.from);
  auto to = tasks_.find(m.to);
  if (from == tasks_.end() || to == tasks_.end()) return delivery::deliver();  // the application's own requests
  const auto kind = caf::to_string(m.kind);
  const auto& a = from->second;
  const auto& b = to->second;
  const double now = now_();
  message_cost c;
  constexpr double header = 64;  // a request without tensors
  c.request_bytes = header;
  if (b.r == cost_model::role::ps && b.index < floats_on_.size()) {
    const double floats = floats_on_[b.index];
    if (kind == "pull") {
      c.reply_bytes = 4 * floats;
    } else if (kind == "push") {
      c.request_bytes += 4 * floats;
      if (m.pulls) c.reply_bytes = 4 * floats;  // the next step's parameters ride on the acknowledgement
      c.work_seconds = floats * model_.params().apply_seconds_per_float;
      if (a.r == cost_model::role::worker) {
        // The first push of a step carries the step's computation: the worker computed it
        // when its pulls arrived (inline, at no simulated time), so it leaves after them
        // and after it. The step's other pushes leave after the first (handler_end), not
        // after its reply: a push that asks for values has one, which the next step waits
        // for, not this one's other pushes.
        auto i = computed_at_.find(a.index);
        if (i == computed_at_.end() || i->second != now) {
          computed_at_[a.index] = now;
          c.after_replies = true;
          c.before_seconds = model_.params().step_seconds;
        }
      }
    }
  } else if (b.r == cost_model::role::dataset && kind == "batch") {
    c.reply_bytes = batch_bytes_;
  }
  double at = model_.deliver(a, b, c, now);
  const bool reads = kind == "pull" || (kind == "push" && m.pulls);
  if (reads && c.reply_bytes > 0 && a.r == cost_model::role::worker && b.r == cost_model::role::ps) {
    auto& g = pulls_[a.index];
    if (g.now != now) {
      if (g.now >= 0) pull_times_.push_back(g.end - g.start);
      g = pull_group{now, model_.sent_at(), model_.reply_at()};
    } else {
      g.end = std::max(g.end, model_.reply_at());
    }
  }
  auto ns = static_cast<int64_t>(std::ceil((at - now) * 1e9));
  if (ns <= 0) return delivery::deliver();
  return delivery::delay_by(caf::timespan{ns});
}

std::vector<double> timed_delivery::pull_seconds() const {
  std::lock_guard<std::mutex> lock{mtx_};
  auto out = pull_times_;
  for (auto& [w, g] : pulls_)
    if (g.now >= 0) out.push_back(g.end - g.start);
  return out;
}

std::vector<double> timed_delivery::ps_busy() const {
  std::lock_guard<std::mutex> lock{mtx_};
  return model_.ps_busy();
}

}  // namespace actortrain::detail
