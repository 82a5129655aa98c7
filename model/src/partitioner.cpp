#include <actortrain/model/partitioner.hpp>

#include "optim/call_spec.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

namespace actortrain::model {

namespace {

void check_shape(const char* who, const shape2& shape) {
  if (shape.rows < 1 || shape.cols < 1)
    throw std::invalid_argument(fmt::format("{}: cannot partition an empty shape {}", who,
                                            to_string(shape)));
}

void require(bool ok, const char* who, const char* what, const char* want, int64_t value) {
  if (!ok) throw std::invalid_argument(fmt::format("{}: {} must be {}, got {}", who, what, want, value));
}

int64_t ceil_div(int64_t a, int64_t b) {
  return a / b + (a % b != 0 ? 1 : 0);
}

}  // namespace

// -- fixed_shards ------------------------------------------------------------------------

fixed_shards::fixed_shards(int64_t num_shards) : num_shards_(num_shards) {
  require(num_shards >= 1, "fixed_shards", "num_shards", ">= 1", num_shards);
}

int64_t fixed_shards::num_partitions(const shape2& shape) const {
  check_shape("fixed_shards", shape);
  return std::min(num_shards_, shape.rows);
}

std::string fixed_shards::describe() const {
  return fmt::format("fixed_shards(num_shards={})", num_shards_);
}

partitioner_ptr fixed_shards::clone() const {
  return std::make_unique<fixed_shards>(*this);
}

// -- min_size ----------------------------------------------------------------------------

min_size::min_size(int64_t min_shard_bytes, int64_t max_shards)
  : min_shard_bytes_(min_shard_bytes), max_shards_(max_shards) {
  require(min_shard_bytes >= 1, "min_size", "min_shard_bytes", ">= 1", min_shard_bytes);
  require(max_shards >= 1, "min_size", "max_shards", ">= 1", max_shards);
}

int64_t min_size::num_partitions(const shape2& shape) const {
  check_shape("min_size", shape);
  const int64_t total_bytes = shape.size() * bytes_per_value;
  const int64_t wanted = ceil_div(total_bytes, min_shard_bytes_);
  return std::max<int64_t>(1, std::min({shape.rows, max_shards_, wanted}));
}

std::string min_size::describe() const {
  return fmt::format("min_size(min_shard_bytes={}, max_shards={})", min_shard_bytes_,
                     max_shards_);
}

partitioner_ptr min_size::clone() const {
  return std::make_unique<min_size>(*this);
}

// -- max_size ----------------------------------------------------------------------------

max_size::max_size(int64_t max_shard_bytes, int64_t max_shards)
  : max_shard_bytes_(max_shard_bytes), max_shards_(max_shards) {
  require(max_shard_bytes >= 1, "max_size", "max_shard_bytes", ">= 1", max_shard_bytes);
  require(max_shards >= 0, "max_size", "max_shards", ">= 0 (0 = unbounded)", max_shards);
}

int64_t max_size::num_partitions(const shape2& shape) const {
  check_shape("max_size", shape);
  const int64_t bytes_per_row = shape.cols * bytes_per_value;
  const int64_t rows_per_shard = std::max<int64_t>(1, max_shard_bytes_ / bytes_per_row);
  int64_t n = ceil_div(shape.rows, rows_per_shard);
  if (max_shards_ > 0) n = std::min(n, max_shards_);
  return n;
}

std::string max_size::describe() const {
  return fmt::format("max_size(max_shard_bytes={}, max_shards={})", max_shard_bytes_,
                     max_shards_);
}

partitioner_ptr max_size::clone() const {
  return std::make_unique<max_size>(*this);
}

// -- make_partitioner --------------------------------------------------------------------

partitioner_ptr make_partitioner(const std::string& text) {
  constexpr const char* what = "make_partitioner";
  const auto spec = detail::parse_call_spec(text, what);
  std::vector<std::string> names;
  if (spec.name == "none")
    names = {};
  else if (spec.name == "fixed_shards")
    names = {"num_shards"};
  else if (spec.name == "min_size")
    names = {"min_shard_bytes", "max_shards"};
  else if (spec.name == "max_size")
    names = {"max_shard_bytes", "max_shards"};
  else
    throw std::invalid_argument(fmt::format(
      "{}: unknown partitioner '{}' in '{}' (known: fixed_shards, max_size, min_size, none)",
      what, spec.name, text));
  std::map<std::string, int64_t> args;
  for (const auto& [key, token] : detail::bind_args(spec, names, text, what)) {
    const double v = detail::parse_value(token, key, text, what);
    if (!(std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9.0e15))
      throw std::invalid_argument(fmt::format(
        "{}: bad spec '{}': bad value '{}' for {} (expected an integer)", what, text, token, key));
    args[key] = static_cast<int64_t>(v);
  }
  auto arg = [&](const char* key, int64_t fallback) {
    auto it = args.find(key);
    return it == args.end() ? fallback : it->second;
  };
  try {
    if (spec.name == "none") return nullptr;
    if (spec.name == "fixed_shards") {
      if (!args.count("num_shards"))
        throw std::invalid_argument("fixed_shards needs num_shards");
      return std::make_unique<fixed_shards>(args["num_shards"]);
    }
    if (spec.name == "min_size")
      return std::make_unique<min_size>(arg("min_shard_bytes", 256 << 10), arg("max_shards", 1));
    if (!args.count("max_shard_bytes")) throw std::invalid_argument("max_size needs max_shard_bytes");
    return std::make_unique<max_size>(args["max_shard_bytes"], arg("max_shards", 0));
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("{}: bad spec '{}': {}", what, text, e.what()));
  }
}

// -- split and place ---------------------------------------------------------------------

std::vector<row_range> split_rows(int64_t rows, int64_t num_partitions) {
  if (num_partitions < 1 || num_partitions > rows)
    throw std::invalid_argument(fmt::format(
      "split_rows: num_partitions must be in [1, rows = {}], got {}", rows, num_partitions));
  std::vector<row_range> out;
  out.reserve(static_cast<size_t>(num_partitions));
  const int64_t base = rows / num_partitions;
  const int64_t extra = rows % num_partitions;
  int64_t begin = 0;
  for (int64_t k = 0; k < num_partitions; ++k) {
    const int64_t len = base + (k < extra ? 1 : 0);
    out.push_back({begin, begin + len});
    begin += len;
  }
  return out;
}

placement place(const std::vector<variable_spec>& vars, const partitioner* p, int num_ps) {
  if (num_ps < 1) throw std::invalid_argument(fmt::format("place: num_ps must be >= 1, got {}", num_ps));
  placement out;
  out.num_ps_ = num_ps;
  out.variables_.reserve(vars.size());
  int64_t counter = 0;  // TF's _variable_count: continues across variables
  for (size_t i = 0; i < vars.size(); ++i) {
    const auto& spec = vars[i];
    for (size_t j = 0; j < i; ++j)
      if (vars[j].name == spec.name)
        throw std::invalid_argument(fmt::format("place: variable name '{}' is declared twice "
                                                "(variables {} and {})",
                                                spec.name, j, i));
    if (spec.dynamic) {
      if (spec.shape.cols < 1)
        throw std::invalid_argument(fmt::format("place: dynamic table '{}' has rows of width {}", spec.name,
                                                spec.shape.cols));
      variable_placement vp;
      vp.variable = static_cast<variable_id>(i);
      vp.name = spec.name;
      vp.shape = spec.shape;
      vp.sparse = true;
      vp.dynamic = true;
      for (int k = 0; k < num_ps; ++k) {
        partition part;
        part.variable = vp.variable;
        part.index = k;
        part.ps = k;
        vp.partitions.push_back(part);
      }
      out.variables_.push_back(std::move(vp));
      continue;
    }
    if (spec.shape.rows < 1 || spec.shape.cols < 1)
      throw std::invalid_argument(fmt::format("place: variable '{}' has an empty shape {}",
                                              spec.name, to_string(spec.shape)));
    const int64_t n = p ? p->num_partitions(spec.shape) : 1;
    if (n < 1 || n > spec.shape.rows)
      throw std::logic_error(fmt::format("place: partitioner {} gave {} partitions for '{}' {}",
                                         p->describe(), n, spec.name, to_string(spec.shape)));
    variable_placement vp;
    vp.variable = static_cast<variable_id>(i);
    vp.name = spec.name;
    vp.shape = spec.shape;
    vp.sparse = spec.sparse;
    const auto ranges = split_rows(spec.shape.rows, n);
    vp.partitions.reserve(ranges.size());
    for (size_t k = 0; k < ranges.size(); ++k) {
      partition part;
      part.variable = vp.variable;
      part.index = static_cast<int>(k);
      part.row_begin = ranges[k].begin;
      part.row_end = ranges[k].end;
      part.ps = static_cast<int>(counter++ % num_ps);
      vp.partitions.push_back(part);
    }
    out.variables_.push_back(std::move(vp));
  }
  return out;
}

// -- placement ---------------------------------------------------------------------------

const variable_placement& placement::variable(variable_id id) const {
  if (id < 0 || static_cast<size_t>(id) >= variables_.size())
    throw std::out_of_range(fmt::format("placement: no variable {} (have {})", id, variables_.size()));
  return variables_[static_cast<size_t>(id)];
}

const variable_placement* placement::find(const std::string& name) const {
  for (const auto& v : variables_)
    if (v.name == name) return &v;
  return nullptr;
}

size_t placement::num_partitions() const {
  size_t n = 0;
  for (const auto& v : variables_) n += v.partitions.size();
  return n;
}

std::vector<partition> placement::partitions_on(int ps) const {
  if (ps < 0 || ps >= num_ps_)
    throw std::out_of_range(fmt::format("placement: no ps {} (have {})", ps, num_ps_));
  std::vector<partition> out;
  for (const auto& v : variables_)
    for (const auto& part : v.partitions)
      if (part.ps == ps) out.push_back(part);
  return out;
}

int dynamic_owner(int64_t id, int num_partitions) {
  // splitmix64's finalizer over the id, with a constant of its own (the rows' seeds
  // hash the id differently: dynamic_table::row_seed).
  auto z = static_cast<uint64_t>(id) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<int>(z % static_cast<uint64_t>(num_partitions));
}

row_location placement::locate_row(variable_id id, int64_t row) const {
  const auto& v = variable(id);
  if (v.dynamic) {
    if (row < 0) throw std::out_of_range(fmt::format("placement: id {} of dynamic table '{}' is negative", row, v.name));
    const auto& part = v.partitions[static_cast<size_t>(dynamic_owner(row, static_cast<int>(v.partitions.size())))];
    return {part.index, row, part.ps};
  }
  if (row < 0 || row >= v.shape.rows)
    throw std::out_of_range(fmt::format("placement: row {} outside variable '{}' {}", row, v.name,
                                        to_string(v.shape)));
  // First partition whose end is past the row.
  auto it = std::upper_bound(v.partitions.begin(), v.partitions.end(), row,
                             [](int64_t r, const partition& part) { return r < part.row_end; });
  return {it->index, row - it->row_begin, it->ps};
}

std::vector<row_group> placement::group_rows(variable_id id, const std::vector<int64_t>& ids) const {
  const auto& v = variable(id);
  std::vector<row_group> groups(v.partitions.size());
  for (size_t k = 0; k < groups.size(); ++k) {
    groups[k].partition = static_cast<int>(k);
    groups[k].ps = v.partitions[k].ps;
  }
  for (size_t j = 0; j < ids.size(); ++j) {
    const auto loc = locate_row(id, ids[j]);
    auto& g = groups[static_cast<size_t>(loc.partition)];
    g.local_rows.push_back(loc.local_row);
    g.positions.push_back(j);
  }
  groups.erase(std::remove_if(groups.begin(), groups.end(),
                              [](const row_group& g) { return g.local_rows.empty(); }),
               groups.end());
  return groups;
}

}  // namespace actortrain::model
