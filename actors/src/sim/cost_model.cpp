#include <actortrain/actors/sim/cost_model.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace actortrain {

namespace {

using json = nlohmann::json;

struct field {
  const char* name;
  double cost_params::*value;
};

constexpr field fields[] = {
  {"step_seconds", &cost_params::step_seconds},
  {"apply_seconds_per_float", &cost_params::apply_seconds_per_float},
  {"message_seconds", &cost_params::message_seconds},
  {"byte_seconds", &cost_params::byte_seconds},
  {"background_seconds", &cost_params::background_seconds},
  {"latency_seconds", &cost_params::latency_seconds},
  {"bandwidth", &cost_params::bandwidth},
};

}  // namespace

cost_params cost_params::parse(const std::string& text, const std::string& where) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw std::invalid_argument(fmt::format("{}: not JSON ({})", where, e.what()));
  }
  if (!j.is_object()) throw std::invalid_argument(fmt::format("{}: not a JSON object", where));
  cost_params p;
  for (auto& [key, v] : j.items()) {
    bool known = false;
    for (auto& f : fields)
      if (key == f.name) {
        known = true;
        if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
          throw std::invalid_argument(fmt::format("{}: {}: {} is not a finite number >= 0", where, key, v.dump()));
        p.*f.value = v.get<double>();
      }
    if (key == "cores") {
      known = true;
      if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 4096)
        throw std::invalid_argument(fmt::format("{}: cores: {} is not a whole number from 1 to 4096", where, v.dump()));
      p.cores = static_cast<int>(v.get<int64_t>());
    }
    if (key == "one_host") {
      known = true;
      if (!v.is_boolean()) throw std::invalid_argument(fmt::format("{}: one_host: {} is not true or false", where, v.dump()));
      p.one_host = v.get<bool>();
    }
    if (key == "comment") known = v.is_string();  // provenance, for people
    if (!known) {
      std::string names;
      for (auto& f : fields) names += std::string(f.name) + ", ";
      throw std::invalid_argument(
        fmt::format("{}: unknown key '{}' ({}cores, one_host, comment)", where, key, names));
    }
  }
  return p;
}

std::string cost_params::to_json() const {
  json j = json::object();
  for (auto& f : fields) j[f.name] = this->*f.value;
  j["cores"] = cores;
  j["one_host"] = one_host;
  return j.dump(2);
}

cost_model::cost_model(cost_params p) : p_(p) {
  if (p_.cores < 1) throw std::invalid_argument("cost_model: cores must be at least 1");
}

std::pair<int, uint32_t> cost_model::process_of(task t) const {
  if (t.r == role::dataset) return {static_cast<int>(role::worker), t.index};
  return {static_cast<int>(t.r), t.index};
}

int cost_model::host_of(task t) const {
  if (p_.one_host) return 0;
  auto key = process_of(t);
  auto i = hosts_.find(key);
  return i == hosts_.end() ? -1 : i->second;
}

cost_model::actor_state& cost_model::state(task t) {
  auto& s = actors_[{static_cast<int>(t.r), t.index}];
  if (!p_.one_host) {
    auto key = process_of(t);
    if (!hosts_.count(key)) hosts_.emplace(key, static_cast<int>(hosts_.size()));
  }
  return s;
}

double cost_model::calendar::earliest(double t, double d) const {
  double start = t;
  auto i = busy.upper_bound(start);
  if (i != busy.begin()) start = std::max(start, std::prev(i)->second);
  for (; i != busy.end(); ++i) {
    if (i->first >= start + d) break;
    start = std::max(start, i->second);
  }
  return start;
}

double cost_model::calendar::free_from(double t) const {
  auto i = busy.upper_bound(t);
  if (i == busy.begin()) return t;
  auto prev = std::prev(i);
  return prev->second > t ? prev->second : t;
}

double cost_model::calendar::next_busy(double t) const {
  auto i = busy.upper_bound(t);
  return i == busy.end() ? std::numeric_limits<double>::infinity() : i->first;
}

cost_model::pieces cost_model::fill(const calendar& a, const calendar* b, double t, double d) {
  pieces out;
  double cur = t, left = d;
  while (left > 0) {
    // The next moment both are free.
    for (;;) {
      double x = a.free_from(cur);
      if (b) x = std::max(x, b->free_from(x));
      if (x == cur) break;
      cur = x;
    }
    double until = a.next_busy(cur);
    if (b) until = std::min(until, b->next_busy(cur));
    // What is left too small to move the clock (rounding) is done.
    if (cur + left <= cur) break;
    double end = std::min(cur + left, until);
    out.emplace_back(cur, end);
    left -= end - cur;
    cur = end;
  }
  if (out.empty()) out.emplace_back(cur, cur);
  return out;
}

void cost_model::calendar::prune(double now) {
  while (!busy.empty() && busy.begin()->second <= now) busy.erase(busy.begin());
}

std::vector<cost_model::calendar>& cost_model::cores_of(int host) {
  if (host < 0) host = 0;
  if (static_cast<size_t>(host) >= cores_.size()) cores_.resize(static_cast<size_t>(host) + 1);
  auto& cores = cores_[static_cast<size_t>(host)];
  if (cores.empty()) cores.resize(static_cast<size_t>(p_.cores));
  return cores;
}

void cost_model::background(int host, double ready, double d, double now) {
  if (d <= 0) return;
  auto& cores = cores_of(host);
  pieces best;
  size_t core = 0;
  for (size_t c = 0; c < cores.size(); ++c) {
    cores[c].prune(now);
    auto p = fill(cores[c], nullptr, ready, d);
    if (best.empty() || p.back().second < best.back().second) {
      best = std::move(p);
      core = c;
    }
  }
  for (auto& [from, to] : best)
    if (to > from) cores[core].busy.emplace(from, to);
}

double cost_model::run(actor_state& actor, int host, double ready, double d, double now) {
  if (d <= 0) return ready;
  auto& cores = cores_of(host);
  actor.cal.prune(now);
  // On the core where it ends first, in the gaps both the actor and the core leave.
  pieces best;
  size_t core = 0;
  for (size_t c = 0; c < cores.size(); ++c) {
    cores[c].prune(now);
    auto p = fill(actor.cal, &cores[c], ready, d);
    if (best.empty() || p.back().second < best.back().second) {
      best = std::move(p);
      core = c;
    }
  }
  for (auto& [from, to] : best)
    if (to > from) {
      actor.cal.busy.emplace(from, to);
      cores[core].busy.emplace(from, to);
    }
  return best.back().second;
}

double cost_model::link(task sender, task receiver, double t, double bytes, double now) {
  if (p_.bandwidth <= 0) return t + p_.latency_seconds;
  double d = bytes / p_.bandwidth;
  auto& from = links_[process_of(sender)];
  auto& to = links_[process_of(receiver)];
  from.out.prune(now);
  to.in.prune(now);
  // The bytes leave on the sender's link and enter on the receiver's at once.
  for (;;) {
    double s = from.out.earliest(t, d);
    double x = to.in.earliest(s, d);
    if (x == s) {
      from.out.reserve(s, d);
      to.in.reserve(s, d);
      return s + d + p_.latency_seconds;
    }
    t = x;
  }
}

double cost_model::deliver(task from, task to, const message_cost& m, double now) {
  auto& a = state(from);
  auto& b = state(to);
  const int ha = host_of(from), hb = host_of(to);
  const bool remote = process_of(from) != process_of(to);
  auto ps_charge = [&](task t, double seconds) {
    if (t.r != role::ps) return;
    if (ps_busy_.size() <= t.index) ps_busy_.resize(t.index + 1, 0.0);
    ps_busy_[t.index] += seconds;
  };
  // The sender: after what its handlers did before (a handler that runs earlier on the
  // simulated clock than the model's sender is free, because its message was not held
  // up, still sends after that), the replies it waits for, its step.
  double t = std::max(now, a.handler_end);
  if (m.after_replies) t = std::max(t, a.replies);
  t = run(a, ha, t, m.before_seconds, now);
  sent_at_ = t;
  double send = remote ? p_.message_seconds + m.request_bytes * p_.byte_seconds : 0.0;
  t = run(a, ha, t, send, now);
  ps_charge(from, send);
  a.handler_end = t;
  const double bg = remote ? p_.background_seconds : 0.0;
  background(ha, t, bg, now);
  ps_charge(from, bg);
  // The way there.
  if (remote) t = link(from, to, t, m.request_bytes, now);
  background(hb, t, bg, now);
  ps_charge(to, bg);
  // The receiver handles it when it has arrived and the receiver is free.
  double handle = p_.message_seconds + (remote ? m.request_bytes * p_.byte_seconds : 0.0) + m.work_seconds;
  t = run(b, hb, t, handle, now);
  ps_charge(to, handle);
  const double delivered = t;
  if (m.reply_bytes > 0) {
    // The reply the requester waits for: sent by the receiver, received by the sender.
    double out = remote ? p_.message_seconds + m.reply_bytes * p_.byte_seconds : 0.0;
    double r = run(b, hb, t, out, now);
    ps_charge(to, out);
    background(hb, r, bg, now);
    ps_charge(to, bg);
    if (remote) r = link(to, from, r, m.reply_bytes, now);
    background(ha, r, bg, now);
    ps_charge(from, bg);
    double in = p_.message_seconds + (remote ? m.reply_bytes * p_.byte_seconds : 0.0);
    r = run(a, ha, r, in, now);
    a.replies = std::max(a.replies, r);
    reply_at_ = r;
  }
  return delivered;
}

}  // namespace actortrain
