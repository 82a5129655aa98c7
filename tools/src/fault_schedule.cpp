#include "fault_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

namespace actortrain::tools {

namespace {

double seconds_of(const std::string& text, const std::string& item) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || !std::isfinite(v) || v <= 0)
    throw std::invalid_argument(fmt::format("'{}': '{}' is not a number of seconds > 0", item, text));
  return v;
}

}  // namespace

fault_schedule fault_schedule::parse(const std::string& spec, const std::map<std::string, int>& tasks, uint64_t seed,
                                     double horizon) {
  if (spec.empty()) throw std::invalid_argument("empty: give ROLE=SECONDS (every) or ROLE@SECONDS (once), e.g. worker=10,ps=30,chief@60");
  fault_schedule s;
  std::mt19937_64 rng{seed};
  std::set<std::string> seen;
  std::stringstream in{spec};
  for (std::string item; std::getline(in, item, ',');) {
    auto eq = item.find_first_of("=@");
    if (eq == std::string::npos)
      throw std::invalid_argument(fmt::format("'{}': not ROLE=SECONDS (every) or ROLE@SECONDS (once)", item));
    auto role = item.substr(0, eq);
    bool once = item[eq] == '@';
    double t = seconds_of(item.substr(eq + 1), item);
    if (role != "chief" && role != "ps" && role != "worker")
      throw std::invalid_argument(fmt::format("'{}': unknown role '{}' (chief, ps, worker)", item, role));
    auto n = tasks.find(role);
    if (n == tasks.end() || n->second < 1)
      throw std::invalid_argument(fmt::format("'{}': the cluster has no {} task", item, role));
    if (!seen.insert(role).second) throw std::invalid_argument(fmt::format("'{}': role '{}' named twice", item, role));
    std::uniform_int_distribution<int> pick(0, n->second - 1);
    if (once) {
      s.kills_.push_back({t, role, pick(rng)});
      continue;
    }
    if (horizon / t > 100000)
      throw std::invalid_argument(fmt::format("'{}': a kill every {} s is more than 100,000 kills in {} s", item, t, horizon));
    std::uniform_real_distribution<double> jitter(-t / 4, t / 4);
    for (int k = 1; k * t - t / 4 <= horizon; ++k) s.kills_.push_back({k * t + jitter(rng), role, pick(rng)});
  }
  std::stable_sort(s.kills_.begin(), s.kills_.end(),
                   [](const planned_kill& a, const planned_kill& b) { return a.at < b.at; });
  return s;
}

std::vector<planned_kill> fault_schedule::due(double now) {
  std::vector<planned_kill> out;
  while (next_ < kills_.size() && kills_[next_].at <= now) out.push_back(kills_[next_++]);
  return out;
}

double recovery_seconds(const std::vector<recovery_mark>& marks, const std::string& task, double kill_wall) {
  auto colon = task.find(':');
  auto role = task.substr(0, colon);
  int64_t index = colon == std::string::npos ? -1 : std::atoll(task.c_str() + colon + 1);
  bool back = false;
  for (auto& m : marks) {
    if (m.wall < kill_wall) continue;
    bool restarted_chief = m.event == "resumed" || m.event == "run_begin";
    if (role == "worker")
      back = back || (m.event == "worker_joined" && m.worker == index);
    else if (role == "ps")
      back = back || m.event == "ps_restored" || restarted_chief;
    else
      back = back || restarted_chief;
    if (back && m.event == "step" && (role != "worker" || m.worker == index)) return m.wall - kill_wall;
  }
  return NAN;
}

}  // namespace actortrain::tools
