#include <actortrain/actors/sim/fault_plan.hpp>
#include <actortrain/model/random.hpp>

#include <algorithm>
#include <optional>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

namespace actortrain {

namespace {

const char* action_name(delivery::kind k) {
  switch (k) {
    case delivery::kind::deliver: return "deliver";
    case delivery::kind::drop: return "drop";
    case delivery::kind::duplicate: return "duplicate";
    case delivery::kind::delay: return "delay";
    case delivery::kind::crash: return "crash";
    case delivery::kind::crash_after: return "crash after";
    case delivery::kind::kill_receiver: return "kill receiver";
  }
  return "unknown";
}

std::string party(actor_role role, int32_t index) {
  if (role == actor_role::any) return "any";
  if (index < 0) return to_string(role);
  return fmt::format("{} {}", to_string(role), index);
}

}  // namespace

std::string to_string(const fault_rule& r) {
  auto what = std::string(action_name(r.what));
  if (r.what == delivery::kind::delay)
    what += fmt::format(" {} ms", std::chrono::duration_cast<std::chrono::milliseconds>(r.delay).count());
  auto range = r.count == 1 ? fmt::format("#{}", r.first) : fmt::format("#{}..#{}", r.first, r.first + r.count - 1);
  return fmt::format("{} {} -> {} {}: {}", r.message.empty() ? "any message" : r.message, party(r.from, r.from_index),
                     party(r.to, r.to_index), range, what);
}

fault_plan::fault_plan(std::vector<fault_rule> rules) : rules_(std::move(rules)), seen_(rules_.size(), 0) {
  for (auto& r : rules_)
    if (r.count == 0 || r.first == 0) throw std::invalid_argument("fault_rule: first and count start at 1: " + to_string(r));
}

void fault_plan::on_spawn(const caf::actor_addr& a, actor_role role, uint32_t index) {
  std::lock_guard<std::mutex> lock{mtx_};
  roles_[a] = who{role, index};
}

bool fault_plan::matches(const fault_rule& r, const who& from, const who& to, const std::string& kind) const {
  auto fits = [](actor_role want, int32_t index, const who& w) {
    if (want == actor_role::any) return true;
    return w.role == want && (index < 0 || static_cast<uint32_t>(index) == w.index);
  };
  return fits(r.from, r.from_index, from) && fits(r.to, r.to_index, to) && (r.message.empty() || r.message == kind);
}

void fault_plan::add(const fault_rule& r) {
  if (r.count == 0 || r.first == 0) throw std::invalid_argument("fault_rule: first and count start at 1: " + to_string(r));
  std::lock_guard<std::mutex> lock{mtx_};
  rules_.push_back(r);
  seen_.push_back(0);
}

void fault_plan::plant_poison(uint32_t pipeline, uint64_t position) {
  std::lock_guard<std::mutex> lock{mtx_};
  poison_.emplace_back(pipeline, position);
}

delivery fault_plan::decide(const message_info& m) {
  std::lock_guard<std::mutex> lock{mtx_};
  auto find = [this](const caf::actor_addr& a) {
    auto i = roles_.find(a);
    return i == roles_.end() ? who{} : i->second;
  };
  auto from = find(m.from), to = find(m.to);
  auto kind = caf::to_string(m.kind);
  for (auto& step : m.steps)
    if (std::find(poison_.begin(), poison_.end(), step) != poison_.end() && to.role == actor_role::worker) {
      log_.push_back(fmt::format("poison record (pipeline {} position {}) kills worker {}", step.first, step.second,
                                 to.index));
      return delivery::kill_receiver();
    }
  // Every rule counts its matches; the first rule in range decides.
  std::optional<size_t> hit;
  for (size_t i = 0; i < rules_.size(); ++i) {
    const auto& r = rules_[i];
    if (!matches(r, from, to, kind)) continue;
    auto n = ++seen_[i];
    if (!hit && n >= r.first && n < r.first + r.count) hit = i;
  }
  if (!hit) return delivery::deliver();
  const auto& r = rules_[*hit];
  log_.push_back(fmt::format("{} {} -> {} #{}: {}", kind, party(from.role, static_cast<int32_t>(from.index)),
                             party(to.role, static_cast<int32_t>(to.index)), seen_[*hit], action_name(r.what)));
  switch (r.what) {
    case delivery::kind::drop: return delivery::drop();
    case delivery::kind::duplicate: return delivery::duplicate();
    case delivery::kind::delay: return delivery::delay_by(r.delay);
    case delivery::kind::crash: return delivery::crash();
    case delivery::kind::crash_after: return delivery::crash_after();
    case delivery::kind::kill_receiver: return delivery::kill_receiver();
    default: return delivery::deliver();
  }
}

std::vector<std::string> fault_plan::injected() const {
  std::lock_guard<std::mutex> lock{mtx_};
  return log_;
}

std::shared_ptr<fault_plan> fault_plan::random(uint64_t seed, int num_workers, int num_ps, int64_t steps,
                                               int faults, bool ps_crashes) {
  random_plan_options o;
  o.num_workers = num_workers;
  o.num_ps = num_ps;
  o.steps = steps;
  o.faults = faults;
  o.ps_crashes = ps_crashes;
  return random(seed, o);
}

std::shared_ptr<fault_plan> fault_plan::random(uint64_t seed, const random_plan_options& o) {
  const int num_workers = std::max(1, o.num_workers), num_ps = std::max(1, o.num_ps), faults = o.faults;
  const int64_t steps = std::max<int64_t>(1, o.steps);
  const bool ps_crashes = o.ps_crashes;
  model::rng g{seed, /*stream=*/0xfa17};
  auto pick = [&g](uint64_t n) { return g.below(n); };
  const uint64_t per_worker = std::max<uint64_t>(1, static_cast<uint64_t>(steps) / std::max(1, num_workers));
  std::vector<fault_rule> rules;
  // At most one rule per kind of control message, so no more consecutive ones are faulted
  // than a request's retries absorb (two of its three attempts).
  std::set<std::string> control_used;
  for (int k = 0; k < faults; ++k) {
    fault_rule r;
    auto w = static_cast<int32_t>(pick(static_cast<uint64_t>(num_workers)));
    auto occurrence = 1 + pick(per_worker);
    // Kinds 0-9 always, then a ps crash, then three kinds of control-message faults.
    uint64_t kinds = 10 + (ps_crashes ? 1 : 0) + (o.control ? 3 : 0);
    auto kind = pick(kinds);
    if (!ps_crashes && kind >= 10) ++kind;  // skip the ps crash
    if (kind >= 11) {
      // The rarer messages weigh more, so that each is faulted in about as many plans.
      static const char* control[] = {"fence", "round",   "snapshot", "init",  "stats", "stats",  "keep",
                                      "keep",  "restore", "restore",  "hyper", "hyper", "gate",  "gate"};
      auto what = control[pick(14)];
      if (!control_used.insert(what).second) continue;  // this kind is faulted already
      bool to_coordinator = std::string(what) == "gate";
      auto from = to_coordinator ? actor_role::any : actor_role::coordinator;
      auto to = to_coordinator ? actor_role::coordinator : actor_role::ps;
      auto first = 1 + pick(4);
      if (kind == 11)  // lost: at most two in a row, so a retry gets through
        r = {delivery::kind::drop, from, -1, to, -1, what, first, 1 + pick(2), {}};
      else if (kind == 12)
        r = {delivery::kind::duplicate, from, -1, to, -1, what, first, 1 + pick(3), {}};
      else  // late: some after their retry
        r = {delivery::kind::delay, from, -1, to, -1, what, first, 1 + pick(2),
             std::chrono::duration_cast<caf::timespan>(o.timeout * (1 + pick(12)) / 8)};
      rules.push_back(r);
      continue;
    }
    switch (kind) {
      case 0:  // crash before pull
        r = {delivery::kind::crash, actor_role::worker, w, actor_role::ps, -1, "pull", occurrence, 1, {}};
        break;
      case 1:  // crash after pull, before any push
        r = {delivery::kind::crash, actor_role::worker, w, actor_role::ps, 0, "push", occurrence, 1, {}};
        break;
      case 2:  // crash after pushing to some shards
        r = {delivery::kind::crash_after, actor_role::worker, w, actor_role::ps, 0, "push", occurrence, 1, {}};
        break;
      case 3:  // crash after pushing to every shard, before reporting
        r = {delivery::kind::crash_after, actor_role::worker, w, actor_role::ps, num_ps - 1, "push", occurrence, 1, {}};
        break;
      case 4: {  // a lost message
        static const char* kinds[] = {"pull", "push", "batch", "step"};
        r = {delivery::kind::drop, actor_role::any, -1, actor_role::any, -1, kinds[pick(4)], 1 + pick(2 * per_worker),
             1 + pick(2), {}};
        break;
      }
      case 5: {  // a duplicated message
        static const char* kinds[] = {"pull", "push", "batch", "step"};
        r = {delivery::kind::duplicate, actor_role::any, -1, actor_role::any, -1, kinds[pick(4)],
             1 + pick(2 * per_worker), 1 + pick(3), {}};
        break;
      }
      case 6: {  // delayed, hence reordered, messages
        static const char* kinds[] = {"pull", "push", "batch"};
        r = {delivery::kind::delay, actor_role::any, -1, actor_role::any, -1, kinds[pick(3)], 1 + pick(2 * per_worker),
             1 + pick(3), std::chrono::milliseconds(1 + pick(50))};
        break;
      }
      case 7:  // a slow worker
        r = {delivery::kind::delay, actor_role::worker, w, actor_role::ps, -1, "push", occurrence, 2 + pick(6),
             std::chrono::milliseconds(100 + pick(400))};
        break;
      case 8: {  // a dataset shard dies as a worker asks it for a batch
        r = {delivery::kind::kill_receiver, actor_role::worker, -1, actor_role::dataset, -1, "batch",
             1 + pick(2 * per_worker), 1, {}};
        break;
      }
      case 9:  // a partitioned worker that comes back
        r = {delivery::kind::drop, actor_role::worker, w, actor_role::any, -1, "", occurrence, 2 + pick(6), {}};
        break;
      default:  // a ps shard dies as a push reaches it (others, to it and to the rest, in flight)
        r = {delivery::kind::kill_receiver, actor_role::worker, -1, actor_role::ps,
             static_cast<int32_t>(pick(static_cast<uint64_t>(num_ps))), "push", 1 + pick(static_cast<uint64_t>(steps)),
             1, {}};
        break;
    }
    rules.push_back(r);
  }
  return std::make_shared<fault_plan>(std::move(rules));
}

}  // namespace actortrain
