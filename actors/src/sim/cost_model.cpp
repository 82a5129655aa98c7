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
  {"background_byte_seconds", &cost_params::background_byte_seconds},
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
    if (key == "streamed") {
      known = true;
      if (!v.is_boolean()) throw std::invalid_argument(fmt::format("{}: streamed: {} is not true or false", where, v.dump()));
      p.streamed = v.get<bool>();
    }
    if (key == "comment") known = v.is_string();  // provenance, for people
    if (!known) {
      std::string names;
      for (auto& f : fields) names += std::string(f.name) + ", ";
      throw std::invalid_argument(
        fmt::format("{}: unknown key '{}' ({}cores, one_host, streamed, comment)", where, key, names));
    }
  }
  return p;
}

std::string cost_params::to_json() const {
  json j = json::object();
  for (auto& f : fields) j[f.name] = this->*f.value;
  j["cores"] = cores;
  j["one_host"] = one_host;
  j["streamed"] = streamed;
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

void cost_model::calendar::extend(double start, double end) {
  auto i = busy.upper_bound(start);
  if (i != busy.begin()) {
    auto prev = std::prev(i);
    if (prev->second == start) {
      prev->second = end;
      return;
    }
  }
  busy.emplace_hint(i, start, end);
}

double cost_model::calendar::next_busy(double t) const {
  auto i = busy.upper_bound(t);
  return i == busy.end() ? std::numeric_limits<double>::infinity() : i->first;
}

void cost_model::calendar::prune(double now) {
  while (!busy.empty() && busy.begin()->second <= now) busy.erase(busy.begin());
}

std::map<double, cost_model::load>::iterator cost_model::host_load::split(double t) {
  auto i = at.lower_bound(t);
  if (i != at.end() && i->first == t) return i;
  load before = i == at.begin() ? load{} : std::prev(i)->second;
  return at.emplace_hint(i, t, before);
}

void cost_model::host_load::prune(double now) {
  auto i = at.upper_bound(now);
  if (i == at.begin()) return;
  at.erase(at.begin(), std::prev(i));  // keep the piece `now` falls in
}

cost_model::host_load& cost_model::host(int h) {
  if (h < 0) h = 0;
  if (static_cast<size_t>(h) >= hosts_load_.size()) hosts_load_.resize(static_cast<size_t>(h) + 1);
  return hosts_load_[static_cast<size_t>(h)];
}

void cost_model::background(int h, double ready, double d, double now) { run(nullptr, h, ready, d, now, true); }

double cost_model::run(actor_state* actor, int h, double ready, double d, double now, bool repay) {
  if (actor) {
    d += actor->lag;  // what work timed after its last took from it
    actor->lag = 0;
  }
  if (d <= 0) return ready;
  auto& hl = host(h);
  hl.prune(now);
  if (actor) actor->cal.prune(now);
  const double cores = p_.cores;
  double cur = ready, left = d;
  while (left > 0) {
    if (actor)  // the actor does one thing at a time: the next moment it is free
      for (double x = actor->cal.free_from(cur); x != cur; x = actor->cal.free_from(cur)) cur = x;
    double until = actor ? actor->cal.next_busy(cur) : std::numeric_limits<double>::infinity();
    auto it = hl.split(cur);
    if (auto next = std::next(it); next != hl.at.end()) until = std::min(until, next->first);
    // A fair share of the cores beside the work already there, or what they leave free
    // if that is more.
    const double busy = it->second.cores;
    const double rate = std::min(1.0, std::max(cores - busy, cores / (it->second.jobs + 1)));
    double end = cur + left / rate;
    if (end <= cur) break;  // what is left is too small to move the clock (rounding)
    bool done = end <= until;
    if (!done) end = until;
    hl.split(end);
    auto& here = it->second;
    // The work already there was timed and is not slowed now: what this takes beyond
    // the cores, each of them owes in proportion to its rate and does after.
    const double over = std::max(0.0, busy + rate - std::max(busy, cores)) * (end - cur);
    if (over > 0 && busy > 0)
      for (auto& [who, r] : here.who) (who ? who->lag : hl.debt) += over * r / busy;
    here.cores += rate;
    ++here.jobs;
    here.who.emplace_back(actor, rate);
    if (actor) actor->cal.extend(cur, end);
    left = done ? 0 : left - rate * (end - cur);
    cur = end;
  }
  // What work of no actor owes (later work slowed it): done after this, as work of no
  // actor; what that owes in turn is done after the next.
  if (repay && hl.debt > 0) {
    double owed = hl.debt;
    hl.debt = 0;
    run(nullptr, h, cur, owed, now, false);
  }
  return cur;
}

std::pair<double, double> cost_model::link(task sender, task receiver, double start, double written, double bytes,
                                           double now) {
  if (!p_.streamed) start = written;  // the whole message is in memory before it goes
  if (p_.bandwidth <= 0) return {start + p_.latency_seconds, written + p_.latency_seconds};
  double d = bytes / p_.bandwidth;
  auto& from = links_[process_of(sender)];
  auto& to = links_[process_of(receiver)];
  from.out.prune(now);
  to.in.prune(now);
  // The bytes leave on the sender's link and enter on the receiver's at once.
  for (double t = start;;) {
    double s = from.out.earliest(t, d);
    double x = to.in.earliest(s, d);
    if (x == s) {
      from.out.reserve(s, d);
      to.in.reserve(s, d);
      return {s + p_.latency_seconds, std::max(s + d, written) + p_.latency_seconds};
    }
    t = x;
  }
}

double cost_model::receive(actor_state& b, int host, std::pair<double, double> arrives, double bytes, double work,
                           double now) {
  const double per_byte = bytes * p_.byte_seconds;
  if (bytes <= 0 || !p_.streamed) return run(&b, host, arrives.second, p_.message_seconds + per_byte + work, now);
  // The bytes' own CPU from the moment the first is in, and the message's handling once
  // the last is.
  const double read = run(&b, host, std::max(now, arrives.first), per_byte, now);
  return run(&b, host, std::max(read, arrives.second), p_.message_seconds + work, now);
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
  t = run(&a, ha, t, m.before_seconds, now);
  sent_at_ = t;
  const double writing = t;  // its first bytes may leave from here on
  double send = remote ? p_.message_seconds + m.request_bytes * p_.byte_seconds : 0.0;
  t = run(&a, ha, t, send, now);
  ps_charge(from, send);
  a.handler_end = t;
  const double bg = remote ? p_.background_seconds + m.request_bytes * p_.background_byte_seconds : 0.0;
  background(ha, t, bg, now);
  ps_charge(from, bg);
  // The way there.
  const auto arrives = remote ? link(from, to, writing, t, m.request_bytes, now) : std::make_pair(t, t);
  background(hb, arrives.second, bg, now);
  ps_charge(to, bg);
  // The receiver handles it when it has arrived and the receiver is free.
  t = receive(b, hb, arrives, remote ? m.request_bytes : 0.0, m.work_seconds, now);
  ps_charge(to, p_.message_seconds + (remote ? m.request_bytes * p_.byte_seconds : 0.0) + m.work_seconds);
  const double delivered = t;
  if (m.reply_bytes > 0) {
    // The reply the requester waits for: sent by the receiver, received by the sender.
    double out = remote ? p_.message_seconds + m.reply_bytes * p_.byte_seconds : 0.0;
    double r = run(&b, hb, t, out, now);
    ps_charge(to, out);
    const double rbg = remote ? p_.background_seconds + m.reply_bytes * p_.background_byte_seconds : 0.0;
    background(hb, r, rbg, now);
    ps_charge(to, rbg);
    const auto back = remote ? link(to, from, t, r, m.reply_bytes, now) : std::make_pair(r, r);
    background(ha, back.second, rbg, now);
    ps_charge(from, rbg);
    r = receive(a, ha, back, remote ? m.reply_bytes : 0.0, 0.0, now);
    a.replies = std::max(a.replies, r);
    reply_at_ = r;
  }
  return delivered;
}

}  // namespace actortrain
