// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
#include <actortrain/actors/ps/ledger.hpp>
#include <actortrain/dataset/digest.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>

namespace actortrain {

uint64_t ledger_mix(uint64_t position, uint64_t digest) {
  // splitmix64 of the digest keyed by the position: a batch at another position counts
  // differently, so a batch served one position late changes the sum.
  uint64_t z = digest ^ (position * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// -- step_ledger ----------------------------------------------------------------------

step_ledger::step_ledger(const ledger_data& d) {
  for (auto& s : d.segments) {
    auto& m = runs_[{s.run, s.pipeline}];
    m[s.begin] = seg{s.end, s.checksum};
  }
  violations_ = d.violations;
}

bool step_ledger::record(uint64_t run, uint32_t pipeline, uint64_t position, uint64_t digest) {
  auto& m = runs_[{run, pipeline}];
  auto next = m.upper_bound(position);
  if (next != m.begin()) {
    auto prev = std::prev(next);
    if (prev->second.end > position) {
      violations_.push_back(ledger_violation{run, pipeline, position, digest});
      return false;
    }
  }
  auto mixed = ledger_mix(position, digest);
  // Join the segment that ends here, else start one; then swallow the one that begins
  // right after.
  std::map<uint64_t, seg>::iterator at;
  if (next != m.begin() && std::prev(next)->second.end == position) {
    at = std::prev(next);
    at->second.end = position + 1;
    at->second.checksum += mixed;
  } else {
    at = m.emplace_hint(next, position, seg{position + 1, mixed});
  }
  if (next != m.end() && next->first == at->second.end) {
    at->second.end = next->second.end;
    at->second.checksum += next->second.checksum;
    m.erase(next);
  }
  return true;
}

bool step_ledger::holds(uint64_t run, uint32_t pipeline, uint64_t position) const {
  auto r = runs_.find({run, pipeline});
  if (r == runs_.end()) return false;
  auto next = r->second.upper_bound(position);
  return next != r->second.begin() && std::prev(next)->second.end > position;
}

uint64_t step_ledger::steps(uint64_t run) const {
  uint64_t n = 0;
  for (auto& [key, m] : runs_)
    if (key.first == run)
      for (auto& [begin, s] : m) n += s.end - begin;
  return n;
}

uint64_t step_ledger::total() const {
  uint64_t n = 0;
  for (auto& [key, m] : runs_)
    for (auto& [begin, s] : m) n += s.end - begin;
  return n;
}

size_t step_ledger::segments() const {
  size_t n = 0;
  for (auto& [key, m] : runs_) n += m.size();
  return n;
}

void step_ledger::keep_violations(const std::vector<ledger_violation>& other) {
  for (auto& v : other) {
    bool have = false;
    for (auto& w : violations_)
      have = have || (w.run == v.run && w.pipeline == v.pipeline && w.position == v.position && w.digest == v.digest);
    if (!have) violations_.push_back(v);
  }
}

ledger_data step_ledger::data() const {
  ledger_data d;
  for (auto& [key, m] : runs_)
    for (auto& [begin, s] : m) d.segments.push_back(ledger_segment{key.first, key.second, begin, s.end, s.checksum});
  d.violations = violations_;
  return d;
}

// -- JSON -----------------------------------------------------------------------------

namespace {

uint64_t unsigned_at(const nlohmann::json& a, size_t i, const std::string& where) {
  if (!a.is_array() || i >= a.size() || !a[i].is_number_unsigned())
    throw std::invalid_argument(fmt::format("ledger: {}: field {} is not an unsigned integer", where, i));
  return a[i].get<uint64_t>();
}

}  // namespace

nlohmann::json to_json(const ledger_data& d) {
  auto segs = nlohmann::json::array();
  for (auto& s : d.segments) segs.push_back({s.run, s.pipeline, s.begin, s.end, s.checksum});
  auto viol = nlohmann::json::array();
  for (auto& v : d.violations) viol.push_back({v.run, v.pipeline, v.position, v.digest});
  return nlohmann::json{{"segments", segs}, {"violations", viol}};
}

ledger_data ledger_from_json(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("segments") || !j["segments"].is_array() || !j.contains("violations") ||
      !j["violations"].is_array())
    throw std::invalid_argument("ledger: expected an object with arrays \"segments\" and \"violations\"");
  ledger_data d;
  const auto& segs = j["segments"];
  for (size_t i = 0; i < segs.size(); ++i) {
    auto where = fmt::format("segment {}", i);
    if (!segs[i].is_array() || segs[i].size() != 5)
      throw std::invalid_argument(fmt::format("ledger: {} is not [run, pipeline, begin, end, checksum]", where));
    ledger_segment s;
    s.run = unsigned_at(segs[i], 0, where);
    auto p = unsigned_at(segs[i], 1, where);
    if (p > UINT32_MAX) throw std::invalid_argument(fmt::format("ledger: {}: pipeline {} is out of range", where, p));
    s.pipeline = static_cast<uint32_t>(p);
    s.begin = unsigned_at(segs[i], 2, where);
    s.end = unsigned_at(segs[i], 3, where);
    s.checksum = unsigned_at(segs[i], 4, where);
    if (s.begin >= s.end)
      throw std::invalid_argument(fmt::format("ledger: {}: begin {} is not below end {}", where, s.begin, s.end));
    if (!d.segments.empty()) {
      auto& b = d.segments.back();
      bool ordered = std::make_tuple(b.run, b.pipeline, b.begin) < std::make_tuple(s.run, s.pipeline, s.begin);
      if (!ordered || (b.run == s.run && b.pipeline == s.pipeline && b.end > s.begin))
        throw std::invalid_argument(fmt::format("ledger: {} overlaps or precedes the one before it", where));
    }
    d.segments.push_back(s);
  }
  const auto& viol = j["violations"];
  for (size_t i = 0; i < viol.size(); ++i) {
    auto where = fmt::format("violation {}", i);
    if (!viol[i].is_array() || viol[i].size() != 4)
      throw std::invalid_argument(fmt::format("ledger: {} is not [run, pipeline, position, digest]", where));
    auto p = unsigned_at(viol[i], 1, where);
    if (p > UINT32_MAX) throw std::invalid_argument(fmt::format("ledger: {}: pipeline {} is out of range", where, p));
    d.violations.push_back(ledger_violation{unsigned_at(viol[i], 0, where), static_cast<uint32_t>(p),
                                            unsigned_at(viol[i], 2, where), unsigned_at(viol[i], 3, where)});
  }
  return d;
}

std::set<uint64_t> ledger_runs(const std::vector<partition_ledger>& ls) {
  std::set<uint64_t> runs;
  for (auto& l : ls)
    for (auto& s : l.ledger.segments) runs.insert(s.run);
  return runs;
}

uint64_t steps_on_every_partition(const std::vector<partition_ledger>& ls, uint64_t run) {
  uint64_t fewest = UINT64_MAX;
  for (auto& l : ls) fewest = std::min(fewest, step_ledger{l.ledger}.steps(run));
  return ls.empty() ? 0 : fewest;
}

size_t applied_twice(const std::vector<partition_ledger>& ls) {
  size_t n = 0;
  for (auto& l : ls) n += l.ledger.violations.size();
  return n;
}

nlohmann::json ledgers_to_json(const std::vector<partition_ledger>& ls) {
  auto parts = nlohmann::json::array();
  for (auto& l : ls)
    parts.push_back({{"shard", l.shard},
                     {"variable", l.variable},
                     {"row_begin", l.row_begin},
                     {"row_end", l.row_end},
                     {"ledger", to_json(l.ledger)}});
  return nlohmann::json{{"format", "actortrain.ledgers"}, {"partitions", parts}};
}

std::vector<partition_ledger> ledgers_from_json(const nlohmann::json& j) {
  if (!j.is_object() || j.value("format", std::string{}) != "actortrain.ledgers")
    throw std::invalid_argument("ledgers: not an actortrain.ledgers document (\"format\" is missing or other)");
  if (!j.contains("partitions") || !j["partitions"].is_array())
    throw std::invalid_argument("ledgers: \"partitions\" is missing or not an array");
  std::vector<partition_ledger> out;
  size_t i = 0;
  for (auto& p : j["partitions"]) {
    try {
      partition_ledger l;
      l.shard = p.at("shard").get<uint32_t>();
      l.variable = p.at("variable").get<std::string>();
      l.row_begin = p.at("row_begin").get<int64_t>();
      l.row_end = p.at("row_end").get<int64_t>();
      if (l.row_begin < 0 || l.row_end <= l.row_begin)
        throw std::invalid_argument(fmt::format("rows [{}, {}) are not a range", l.row_begin, l.row_end));
      l.ledger = ledger_from_json(p.at("ledger"));
      out.push_back(std::move(l));
    } catch (const nlohmann::json::exception& e) {
      throw std::invalid_argument(fmt::format("ledgers: partition {}: {}", i, e.what()));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(fmt::format("ledgers: partition {}: {}", i, e.what()));
    }
    ++i;
  }
  return out;
}

// -- the checker ----------------------------------------------------------------------

namespace {

// The batches pipeline `p` of a run defines, by position, made on demand: positions
// count on across epochs (epoch e's batches follow epoch e-1's), except with
// steps_per_epoch, where every position is a batch of epoch 0's stream (as the
// coordinator asks its dataset shards for them).
class expected_pipeline {
 public:
  expected_pipeline(dataset::dataset data, int epochs, bool per_epoch_streams)
    : data_(std::move(data)), epochs_(per_epoch_streams ? epochs : 1) {}

  // The digest of the batch at `position`, or nothing past the data.
  std::optional<uint64_t> at(uint64_t position) {
    while (digests_.size() <= position && !ended_) extend();
    if (position < digests_.size()) return digests_[position];
    return std::nullopt;
  }
  // Positions there are (walks the whole data).
  uint64_t size() {
    while (!ended_) extend();
    return digests_.size();
  }

 private:
  void extend() {
    if (!it_) {
      if (epoch_ >= epochs_) {
        ended_ = true;
        return;
      }
      it_ = data_.iterate(static_cast<uint64_t>(epoch_), 0);
    }
    if (auto e = it_->next()) {
      digests_.push_back(dataset::element_digest(*e));
      return;
    }
    it_.reset();
    ++epoch_;
  }

  dataset::dataset data_;
  int epochs_;
  int epoch_ = 0;
  std::unique_ptr<dataset::iterator> it_;
  std::vector<uint64_t> digests_;
  bool ended_ = false;
};

std::string name_of(const partition_ledger& l) {
  if (l.shard == no_shard) return fmt::format("{}[{}:{})", l.variable, l.row_begin, l.row_end);
  return fmt::format("ps {} {}[{}:{})", l.shard, l.variable, l.row_begin, l.row_end);
}

// Positions as sorted, merged intervals [begin, end).
using intervals = std::vector<std::pair<uint64_t, uint64_t>>;

std::string describe(const intervals& iv, size_t most = 4) {
  std::string s;
  for (size_t i = 0; i < iv.size() && i < most; ++i)
    s += fmt::format("{}{}", i ? ", " : "",
                     iv[i].second - iv[i].first == 1 ? fmt::format("{}", iv[i].first)
                                                     : fmt::format("{}..{}", iv[i].first, iv[i].second - 1));
  if (iv.size() > most) s += fmt::format(" and {} more", iv.size() - most);
  return s;
}

// a minus b (both sorted and merged).
intervals minus(const intervals& a, const intervals& b) {
  intervals out;
  size_t j = 0;
  for (auto [lo, hi] : a) {
    while (j < b.size() && b[j].second <= lo) ++j;
    size_t k = j;
    while (lo < hi) {
      if (k >= b.size() || b[k].first >= hi) {
        out.emplace_back(lo, hi);
        break;
      }
      if (b[k].first > lo) out.emplace_back(lo, b[k].first);
      lo = std::max(lo, b[k].second);
      ++k;
    }
  }
  return out;
}

}  // namespace

ledger_verdict check_ledgers(const std::vector<partition_ledger>& ledgers, const std::vector<ledger_run>& runs,
                             bool other_runs) {
  ledger_verdict v;
  if (ledgers.empty()) {
    v.violations.push_back("no ledgers: no ps partition reported what it applied");
    return v;
  }
  std::map<uint64_t, const ledger_run*> by_id;
  for (auto& r : runs) {
    if (!r.fn) throw std::invalid_argument(fmt::format("check_ledgers: run {} has no dataset_fn", r.run));
    if (r.num_pipelines < 1 || r.epochs < 0 || r.steps_per_epoch < 0 || r.replicas_in_sync < 1)
      throw std::invalid_argument(fmt::format("check_ledgers: run {}: bad shape", r.run));
    if (!by_id.emplace(r.run, &r).second)
      throw std::invalid_argument(fmt::format("check_ledgers: run {} is named twice", r.run));
  }
  for (auto& l : ledgers) {
    for (auto& x : l.ledger.violations)
      v.violations.push_back(fmt::format("{}: step ({}, {}, {}) applied again although its state held it", name_of(l),
                                         x.run, x.pipeline, x.position));
    if (!other_runs) {
      std::set<uint64_t> foreign;
      for (auto& s : l.ledger.segments)
        if (!by_id.count(s.run)) foreign.insert(s.run);
      for (auto r : foreign)
        v.violations.push_back(fmt::format("{}: holds {} step(s) of run {}, which is not a run of this job", name_of(l),
                                           step_ledger(l.ledger).steps(r), r));
    }
  }
  for (auto& r : runs) {
    std::vector<std::unique_ptr<expected_pipeline>> pipes;
    for (int p = 0; p < r.num_pipelines; ++p)
      pipes.push_back(std::make_unique<expected_pipeline>(
        r.fn(dataset::input_context{r.num_pipelines, p, r.replicas_in_sync}), r.epochs, r.steps_per_epoch == 0));
    // Per partition, the positions it applied, per pipeline.
    std::vector<std::vector<intervals>> applied(ledgers.size(), std::vector<intervals>(static_cast<size_t>(r.num_pipelines)));
    uint64_t fewest = UINT64_MAX;
    for (size_t k = 0; k < ledgers.size(); ++k) {
      const auto& l = ledgers[k];
      uint64_t here = 0;
      for (auto& s : l.ledger.segments) {
        if (s.run != r.run) continue;
        if (s.pipeline >= static_cast<uint32_t>(r.num_pipelines)) {
          v.violations.push_back(fmt::format("{}: run {}: {} step(s) of pipeline {}, but the run has {} pipeline(s)",
                                             name_of(l), r.run, s.end - s.begin, s.pipeline, r.num_pipelines));
          continue;
        }
        auto& pipe = *pipes[s.pipeline];
        uint64_t sum = 0, beyond = s.end;
        for (uint64_t pos = s.begin; pos < s.end; ++pos) {
          auto d = pipe.at(pos);
          if (!d) {
            beyond = pos;
            break;
          }
          sum += ledger_mix(pos, *d);
        }
        if (beyond < s.end)
          v.violations.push_back(fmt::format(
            "{}: run {} pipeline {}: position(s) {}..{} applied, but the data defines no batch past position {}",
            name_of(l), r.run, s.pipeline, beyond, s.end - 1, beyond == 0 ? 0 : beyond - 1));
        else if (sum != s.checksum)
          v.violations.push_back(fmt::format(
            "{}: run {} pipeline {}: positions {}..{} were applied with batches other than the ones the data defines there",
            name_of(l), r.run, s.pipeline, s.begin, s.end - 1));
        applied[k][s.pipeline].emplace_back(s.begin, s.end);
        here += s.end - s.begin;
      }
      fewest = std::min(fewest, here);
    }
    v.steps[r.run] = fewest == UINT64_MAX ? 0 : fewest;
    if (!r.complete) continue;
    // Complete: every partition applied exactly the positions the run's epochs define.
    std::vector<intervals> want(static_cast<size_t>(r.num_pipelines));
    if (r.steps_per_epoch == 0) {
      for (int p = 0; p < r.num_pipelines; ++p) {
        auto n = pipes[static_cast<size_t>(p)]->size();
        if (n > 0) want[static_cast<size_t>(p)].emplace_back(0, n);
      }
    } else {
      // Each pipeline a prefix of its stream; together epochs x steps_per_epoch, or all of
      // every pipeline when the data ran out first. Taken from the first partition, which
      // every other must then equal.
      uint64_t total = 0;
      bool all_out = true;
      for (int p = 0; p < r.num_pipelines; ++p) {
        auto& iv = applied[0][static_cast<size_t>(p)];
        uint64_t n = iv.empty() ? 0 : iv.back().second;
        if (!iv.empty()) want[static_cast<size_t>(p)].emplace_back(0, n);
        total += n;
        all_out = all_out && !pipes[static_cast<size_t>(p)]->at(n);
      }
      auto budget = static_cast<uint64_t>(r.epochs) * static_cast<uint64_t>(r.steps_per_epoch);
      if (total != budget && !(total < budget && all_out))
        v.violations.push_back(fmt::format("{}: run {}: {} step(s) applied, but {} epoch(s) of {} steps make {}",
                                           name_of(ledgers[0]), r.run, total, r.epochs, r.steps_per_epoch, budget));
    }
    for (size_t k = 0; k < ledgers.size(); ++k)
      for (int p = 0; p < r.num_pipelines; ++p) {
        auto& have = applied[k][static_cast<size_t>(p)];
        auto& need = want[static_cast<size_t>(p)];
        auto missing = minus(need, have), extra = minus(have, need);
        if (!missing.empty())
          v.violations.push_back(fmt::format("{}: run {} pipeline {}: position(s) {} never applied", name_of(ledgers[k]),
                                             r.run, p, describe(missing)));
        if (!extra.empty() && r.steps_per_epoch > 0)
          v.violations.push_back(fmt::format("{}: run {} pipeline {}: position(s) {} applied beyond the run's steps",
                                             name_of(ledgers[k]), r.run, p, describe(extra)));
      }
  }
  return v;
}

std::vector<std::string> check_coverage(const std::vector<partition_ledger>& ledgers,
                                        const std::vector<ledger_variable>& variables) {
  std::vector<std::string> out;
  std::map<std::string, std::vector<const partition_ledger*>> by_variable;
  for (auto& l : ledgers) by_variable[l.variable].push_back(&l);
  for (auto& var : variables) {
    auto it = by_variable.find(var.name);
    if (it == by_variable.end()) {
      out.push_back(fmt::format("variable {}: no ledger of any of its partitions", var.name));
      continue;
    }
    auto parts = it->second;
    by_variable.erase(it);
    std::sort(parts.begin(), parts.end(),
              [](auto* a, auto* b) { return std::tie(a->row_begin, a->row_end) < std::tie(b->row_begin, b->row_end); });
    int64_t covered = 0;
    for (auto* p : parts) {
      if (p->row_begin > covered)
        out.push_back(fmt::format("variable {}: no ledger of rows [{}:{})", var.name, covered, p->row_begin));
      else if (p->row_begin < covered)
        out.push_back(fmt::format("variable {}: {} overlaps rows another ledger covers (up to {})", var.name, name_of(*p),
                                  covered));
      covered = std::max(covered, p->row_end);
    }
    if (covered < var.rows)
      out.push_back(fmt::format("variable {}: no ledger of rows [{}:{})", var.name, covered, var.rows));
    else if (covered > var.rows)
      out.push_back(fmt::format("variable {}: ledgers cover {} rows, but it has {}", var.name, covered, var.rows));
  }
  for (auto& [name, parts] : by_variable)
    out.push_back(fmt::format("{}: the model has no variable {}", name_of(*parts.front()), name));
  return out;
}

}  // namespace actortrain
