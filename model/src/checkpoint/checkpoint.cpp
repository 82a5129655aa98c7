#include <actortrain/model/checkpoint/checkpoint.hpp>
#include <actortrain/model/checkpoint/npy.hpp>

#include "crc32.hpp"
#include "../optim/join.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <set>
#include <unordered_map>
#include <stdexcept>

#include <fmt/format.h>

namespace actortrain::model {

using nlohmann::json;

namespace {

constexpr const char* format_name = "actortrain.checkpoint";
constexpr const char* manifest_name = "manifest.json";
constexpr const char* manifest_tmp_name = "manifest.json.tmp";
constexpr const char* dir_prefix = "ckpt-";

std::string file_stem(const std::string& variable) {
  std::string stem = variable;
  std::replace(stem.begin(), stem.end(), '/', '.');
  return stem;
}

/// Why `ranges` do not tile [0, rows) in order, or "" if they do.
std::string coverage_error(int64_t rows, const std::vector<row_range>& ranges) {
  if (ranges.empty()) return "it has no partitions";
  int64_t next = 0;
  for (size_t k = 0; k < ranges.size(); ++k) {
    const auto& r = ranges[k];
    if (r.end <= r.begin)
      return fmt::format("partition {} has the empty or reversed row range [{}, {})", k, r.begin,
                         r.end);
    if (r.begin < next)
      return fmt::format("partition {} starts at row {} but partition {} ends at row {} "
                         "(overlapping rows)",
                         k, r.begin, k - 1, next);
    if (r.begin > next)
      return fmt::format("rows [{}, {}) are in no partition (gap before partition {})", next,
                         r.begin, k);
    next = r.end;
  }
  if (next < rows) return fmt::format("rows [{}, {}) are in no partition", next, rows);
  if (next > rows)
    return fmt::format("partitions end at row {} but the variable has {} rows", next, rows);
  return {};
}

std::vector<row_range> ranges_of(const variable_data& v) {
  std::vector<row_range> out;
  out.reserve(v.partitions.size());
  for (const auto& p : v.partitions) out.push_back({p.row_begin, p.row_end});
  return out;
}

// What a variable's partitions must tile: its rows, or a dynamic table's partitions.
int64_t tiled_rows(bool dynamic, const shape2& shape, size_t partitions) {
  return dynamic ? static_cast<int64_t>(partitions) : shape.rows;
}

// A dynamic table's files of partition k besides values and slots.
constexpr const char* table_files[] = {"ids", "last_update", "waiting"};

std::string table_file_name(const std::string& variable, size_t k, const std::string& what) {
  return fmt::format("{}.part{}.{}.npy", file_stem(variable), k, what);
}

// Why a variable's shape is not one it can have, or "".
std::string shape_error(bool dynamic, const shape2& shape) {
  if (dynamic) return shape.rows == 0 && shape.cols >= 1 ? "" : "a dynamic table must be [0, cols]";
  return shape.rows >= 1 && shape.cols >= 1 ? "" : "the shape is empty";
}

bool safe_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find('/') == std::string::npos && name.find('\0') == std::string::npos;
}

/// Checks everything write_checkpoint needs before it touches the disk.
void validate_for_write(const checkpoint_data& data) {
  auto bad = [](const std::string& what) {
    throw std::invalid_argument(fmt::format("write_checkpoint: {}", what));
  };
  if (data.step < 0) bad(fmt::format("negative step {}", data.step));
  for (const auto& [name, value] : data.hyperparams)
    if (!std::isfinite(value)) bad(fmt::format("hyperparameter {} is not finite ({})", name, value));
  try {
    (void)data.extra.dump();
  } catch (const json::exception& e) {
    bad(fmt::format("extra is not serializable: {}", e.what()));
  }
  std::set<std::string> names;
  std::set<std::string> files{manifest_name, manifest_tmp_name};
  for (const auto& v : data.variables) {
    if (v.name.empty() || v.name.find('\0') != std::string::npos)
      bad(fmt::format("bad variable name '{}'", v.name));
    if (!names.insert(v.name).second) bad(fmt::format("variable '{}' appears twice", v.name));
    if (auto err = shape_error(v.dynamic, v.shape); !err.empty())
      bad(fmt::format("variable '{}' has the shape {}: {}", v.name, to_string(v.shape), err));
    if (auto err = coverage_error(tiled_rows(v.dynamic, v.shape, v.partitions.size()), ranges_of(v)); !err.empty())
      bad(fmt::format("variable '{}' {}: {}", v.name, to_string(v.shape), err));
    for (size_t k = 0; k < v.partitions.size(); ++k) {
      const auto& p = v.partitions[k];
      const shape2 want{v.dynamic ? static_cast<int64_t>(p.ids.size()) : p.row_end - p.row_begin, v.shape.cols};
      if (v.dynamic && p.last_update.size() != p.ids.size())
        bad(fmt::format("variable '{}' partition {}: {} last updates for {} ids", v.name, k, p.last_update.size(),
                        p.ids.size()));
      if (p.values.rows() != want.rows || p.values.cols() != want.cols)
        bad(fmt::format("variable '{}' partition {}: values are {}, rows [{}, {}) need {}", v.name,
                        k, shape_string(p.values), p.row_begin, p.row_end, to_string(want)));
      if (p.iterations < 0)
        bad(fmt::format("variable '{}' partition {}: negative iterations {}", v.name, k,
                        p.iterations));
      if (p.base >= 0 && (!v.dynamic || p.base >= data.step))
        bad(fmt::format("variable '{}' partition {}: an increment over step {} in a checkpoint of step {}{}", v.name,
                        k, p.base, data.step, v.dynamic ? "" : " (only dynamic tables have increments)"));
      if (!files.insert(partition_file_name(v.name, k)).second)
        bad(fmt::format("variable '{}': file name {} clashes with another variable's", v.name,
                        partition_file_name(v.name, k)));
      for (const auto& [slot, m] : p.slots) {
        if (!safe_file_name(slot)) bad(fmt::format("variable '{}': bad slot name '{}'", v.name, slot));
        if (m.rows() != want.rows || m.cols() != want.cols)
          bad(fmt::format("variable '{}' partition {}: slot '{}' is {}, expected {}", v.name, k, slot,
                          shape_string(m), to_string(want)));
        if (!files.insert(slot_file_name(v.name, k, slot)).second)
          bad(fmt::format("variable '{}': file name {} clashes with another file", v.name,
                          slot_file_name(v.name, k, slot)));
      }
    }
  }
}

/// Writes one array and fsyncs it; returns its manifest record. Throws checkpoint_error.
file_record write_array(file_system& fs, const std::string& dir, const std::string& name, const matrix& m) {
  const std::string header = npy_header(shape2{m.rows(), m.cols()});
  const std::string_view data(reinterpret_cast<const char*>(m.data()),
                              static_cast<size_t>(m.size()) * sizeof(float));
  const std::string path = join_path(dir, name);
  if (auto st = fs.write_file(path, {header, data}); !st.ok()) throw checkpoint_error(st.message());
  if (auto st = fs.sync_file(path); !st.ok()) throw checkpoint_error(st.message());
  const uint32_t crc = detail::crc32_update(detail::crc32_update(0, header), data);
  return file_record{name, header.size() + data.size(), crc};
}

json to_json(const file_record& f) { return json{{"name", f.name}, {"bytes", f.bytes}, {"crc32", f.crc32}}; }

// Checks what commit_checkpoint needs of the records before it touches the disk.
void validate_records(const checkpoint_record& r) {
  auto bad = [](const std::string& what) { throw std::invalid_argument(fmt::format("commit_checkpoint: {}", what)); };
  if (r.step < 0) bad(fmt::format("negative step {}", r.step));
  for (const auto& [name, value] : r.hyperparams)
    if (!std::isfinite(value)) bad(fmt::format("hyperparameter {} is not finite ({})", name, value));
  std::set<std::string> names;
  for (const auto& v : r.variables) {
    if (v.name.empty() || v.name.find('\0') != std::string::npos) bad(fmt::format("bad variable name '{}'", v.name));
    if (!names.insert(v.name).second) bad(fmt::format("variable '{}' appears twice", v.name));
    if (auto err = shape_error(v.dynamic, v.shape); !err.empty())
      bad(fmt::format("variable '{}' has the shape {}: {}", v.name, to_string(v.shape), err));
    std::vector<row_range> ranges;
    for (const auto& p : v.partitions) ranges.push_back({p.row_begin, p.row_end});
    if (auto err = coverage_error(tiled_rows(v.dynamic, v.shape, v.partitions.size()), ranges); !err.empty())
      bad(fmt::format("variable '{}' {}: {}", v.name, to_string(v.shape), err));
    for (size_t k = 0; k < v.partitions.size(); ++k) {
      const auto& p = v.partitions[k];
      if (p.values.name != partition_file_name(v.name, k))
        bad(fmt::format("variable '{}' partition {}: file {} where the layout has {}", v.name, k, p.values.name,
                        partition_file_name(v.name, k)));
      for (const auto& [slot, f] : p.slots)
        if (f.name != slot_file_name(v.name, k, slot))
          bad(fmt::format("variable '{}' partition {}: slot file {} where the layout has {}", v.name, k, f.name,
                          slot_file_name(v.name, k, slot)));
      if (p.base >= 0 && (!v.dynamic || p.base >= r.step))
        bad(fmt::format("variable '{}' partition {}: an increment over step {} in a checkpoint of step {}{}", v.name,
                        k, p.base, r.step, v.dynamic ? "" : " (only dynamic tables have increments)"));
      const size_t files = v.dynamic ? std::size(table_files) + (p.base >= 0 ? 1 : 0) : 0;
      if (p.tables.size() != files || (p.base >= 0 && !p.tables.count("removed")))
        bad(fmt::format("variable '{}' partition {}: {} table files for a {} variable", v.name, k, p.tables.size(),
                        v.dynamic ? (p.base >= 0 ? "dynamic table's increment of a" : "dynamic") : "fixed"));
      for (const auto& [what, f] : p.tables)
        if (f.name != table_file_name(v.name, k, what))
          bad(fmt::format("variable '{}' partition {}: file {} where the layout has {}", v.name, k, f.name,
                          table_file_name(v.name, k, what)));
    }
  }
}

// Writes the manifest of the records into `dir` (arrays written) and commits it.
void write_manifest(file_system& fs, const std::string& root, const std::string& dir, const checkpoint_record& r,
                    const std::map<int64_t, uint32_t>& base_ids) {
  json variables = json::array();
  bool incremental = false;  // version 2; a whole checkpoint stays readable by version 1
  for (const auto& v : r.variables) {
    json parts = json::array();
    for (size_t k = 0; k < v.partitions.size(); ++k) {
      const auto& p = v.partitions[k];
      json slots = json::object();
      for (const auto& [slot, f] : p.slots) slots[slot] = to_json(f);
      json part{{"index", k},
                {"row_begin", p.row_begin},
                {"row_end", p.row_end},
                {"iterations", p.iterations},
                {"file", to_json(p.values)},
                {"slots", std::move(slots)}};
      for (const auto& [what, f] : p.tables) part[what] = to_json(f);
      if (p.base >= 0) {
        part["base"] = p.base;
        part["base_crc32"] = base_ids.at(p.base);
        incremental = true;
      }
      parts.push_back(std::move(part));
    }
    json var{{"name", v.name}, {"shape", json::array({v.shape.rows, v.shape.cols})}, {"partitions", std::move(parts)}};
    if (v.dynamic) var["dynamic"] = true;
    variables.push_back(std::move(var));
  }
  json hyper = json::object();
  for (const auto& [name, value] : r.hyperparams) hyper[name] = value;
  const json manifest{{"format", format_name},
                      {"format_version", incremental ? checkpoint_format_version : 1},
                      {"step", r.step},
                      {"optimizer", json{{"describe", r.optimizer}, {"hyperparameters", hyper}}},
                      {"variables", std::move(variables)},
                      {"extra", r.extra}};
  // The arrays' directory entries must be durable before the commit record is.
  if (auto st = fs.sync_dir(dir); !st.ok()) throw checkpoint_error(st.message());
  const std::string tmp = join_path(dir, manifest_tmp_name);
  if (auto st = fs.write_file(tmp, manifest.dump(2) + "\n"); !st.ok()) throw checkpoint_error(st.message());
  if (auto st = fs.sync_file(tmp); !st.ok()) throw checkpoint_error(st.message());
  if (auto st = fs.rename(tmp, join_path(dir, manifest_name)); !st.ok()) throw checkpoint_error(st.message());
  // The checkpoint directory's own entry in root.
  if (auto st = fs.sync_dir(root); !st.ok()) throw checkpoint_error(st.message());
}

// Removes the partial directory and rethrows with what happened.
[[noreturn]] void abandon(file_system& fs, const std::string& dir, const char* what, const std::exception& e) {
  const auto cleanup = fs.remove_all(dir);
  throw checkpoint_error(fmt::format("{} {} failed: {}{}", what, dir, e.what(),
                                     cleanup.ok() ? std::string(" (partial directory removed)")
                                                  : "; removing the partial directory also failed: " + cleanup.message()));
}

// -- manifest reading --------------------------------------------------------------------

/// Field access with errors that name the manifest and the JSON path.
class manifest_reader {
 public:
  explicit manifest_reader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void bad(const std::string& where, const std::string& what) const {
    throw checkpoint_error(fmt::format("{}: {}{}{}", file_, where, where.empty() ? "" : ": ", what));
  }

  const json& field(const json& obj, const char* key, const std::string& where) const {
    if (!obj.is_object()) bad(where, "expected an object");
    auto it = obj.find(key);
    if (it == obj.end()) bad(where, fmt::format("missing field '{}'", key));
    return *it;
  }

  int64_t integer(const json& obj, const char* key, const std::string& where, int64_t min) const {
    const json& j = field(obj, key, where);
    const std::string at = where.empty() ? key : where + "." + key;
    if (!j.is_number_integer()) bad(at, fmt::format("expected an integer, got {}", j.dump()));
    if (j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      bad(at, fmt::format("{} is too large", j.dump()));
    const auto v = j.get<int64_t>();
    if (v < min) bad(at, fmt::format("{} is below {}", v, min));
    return v;
  }

  std::string string(const json& obj, const char* key, const std::string& where) const {
    const json& j = field(obj, key, where);
    if (!j.is_string())
      bad(where.empty() ? key : where + "." + key, fmt::format("expected a string, got {}", j.dump()));
    return j.get<std::string>();
  }

  const json& array(const json& obj, const char* key, const std::string& where) const {
    const json& j = field(obj, key, where);
    if (!j.is_array()) bad(where.empty() ? key : where + "." + key, "expected an array");
    return j;
  }

  const std::string& file() const { return file_; }

 private:
  std::string file_;
};

/// Parses a manifest and checks the header fields; throws checkpoint_error.
json parse_manifest(file_system& fs, const std::string& dir) {
  const std::string path = join_path(dir, manifest_name);
  std::string text;
  if (auto st = fs.read_file(path, text); !st.ok()) {
    if (st.is_not_found())
      throw checkpoint_error(fmt::format("{}: not a committed checkpoint (no {})", dir, manifest_name));
    throw checkpoint_error(st.message());
  }
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw checkpoint_error(fmt::format("{}: invalid JSON: {}", path, e.what()));
  }
  manifest_reader r(path);
  if (!j.is_object()) r.bad("", "expected a JSON object");
  if (r.string(j, "format", "") != format_name)
    r.bad("format", fmt::format("expected \"{}\", got {}", format_name, j["format"].dump()));
  const auto version = r.integer(j, "format_version", "", 1);
  if (version > checkpoint_format_version)
    r.bad("format_version", fmt::format("version {} is newer than this reader ({})", version,
                                        checkpoint_format_version));
  r.integer(j, "step", "", 0);
  return j;
}

/// The step of a directory name "ckpt-<digits>", if it is one.
std::optional<int64_t> step_of_dir_name(const std::string& name) {
  const std::string prefix = dir_prefix;
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  const std::string digits = name.substr(prefix.size());
  if (digits.size() > 18) return std::nullopt;
  int64_t v = 0;
  for (char c : digits) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

// What an increment records of its base, and checks when it is read: the CRC-32 of the
// base manifest's "variables" (which hold every array's CRC), so a base replaced by
// another state of the same step (a run rolled back past it that checkpoints that step
// again) is told apart.
uint32_t manifest_identity(const json& manifest) {
  auto v = manifest.find("variables");
  return detail::crc32_update(0, v == manifest.end() ? std::string("null") : v->dump());
}

// The steps a manifest's increments build on (its partitions' "base"), sorted, unique.
std::vector<int64_t> bases_of(const json& manifest) {
  std::set<int64_t> out;
  auto vars = manifest.find("variables");
  if (vars == manifest.end() || !vars->is_array()) return {};
  for (const auto& v : *vars) {
    if (!v.is_object() || !v.contains("partitions") || !v["partitions"].is_array()) continue;
    for (const auto& p : v["partitions"])
      if (p.is_object() && p.contains("base") && p["base"].is_number_integer()) out.insert(p["base"].get<int64_t>());
  }
  return {out.begin(), out.end()};
}

// Whether dir holds a committed checkpoint of `step`; `bases` takes what it builds on.
bool is_committed(file_system& fs, const std::string& dir, int64_t step, std::vector<int64_t>* bases = nullptr) {
  try {
    auto j = parse_manifest(fs, dir);
    if (j.at("step").get<int64_t>() != step) return false;
    if (bases) *bases = bases_of(j);
    return true;
  } catch (const checkpoint_error&) {
    return false;
  }
}

/// Every ckpt-<digits> directory under root with its step and commit state, by step.
struct dir_entry {
  int64_t step;
  std::string path;
  bool committed;
  std::vector<int64_t> bases;
};

std::vector<dir_entry> scan(file_system& fs, const std::string& root) {
  std::vector<std::string> names;
  if (auto st = fs.list_dir(root, names); !st.ok()) {
    if (st.is_not_found()) return {};
    throw checkpoint_error(st.message());
  }
  std::vector<dir_entry> out;
  for (const auto& name : names) {
    const auto step = step_of_dir_name(name);
    if (!step) continue;
    const std::string path = join_path(root, name);
    std::vector<int64_t> bases;
    const bool committed = is_committed(fs, path, *step, &bases);
    out.push_back({*step, path, committed, std::move(bases)});
  }
  std::sort(out.begin(), out.end(), [](const dir_entry& a, const dir_entry& b) {
    return a.step != b.step ? a.step < b.step : a.path < b.path;
  });
  return out;
}

/// The bytes of a file recorded in the manifest, checked against its name, size and CRC;
/// `path` takes its path.
std::string read_recorded(file_system& fs, const std::string& dir, const manifest_reader& r, const json& record,
                          const std::string& where, std::string& path) {
  const std::string name = r.string(record, "name", where);
  if (!safe_file_name(name)) r.bad(where, fmt::format("unsafe file name '{}'", name));
  const auto bytes = r.integer(record, "bytes", where, 0);
  const auto crc = r.integer(record, "crc32", where, 0);
  path = join_path(dir, name);
  std::string content;
  if (auto st = fs.read_file(path, content); !st.ok()) {
    if (st.is_not_found())
      throw checkpoint_error(fmt::format("{}: missing (listed in {} at {})", path, r.file(), where));
    throw checkpoint_error(st.message());
  }
  if (static_cast<int64_t>(content.size()) != bytes)
    throw checkpoint_error(fmt::format("{}: {} bytes, the manifest says {}", path, content.size(), bytes));
  const uint32_t have_crc = detail::crc32_update(0, content);
  if (have_crc != static_cast<uint32_t>(crc))
    throw checkpoint_error(fmt::format("{}: CRC-32 {:08x} does not match the manifest's {:08x} "
                                       "(corrupt file)",
                                       path, have_crc, static_cast<uint32_t>(crc)));
  return content;
}

/// Reads one array recorded in the manifest, checking name, size, CRC and shape.
matrix read_array(file_system& fs, const std::string& dir, const manifest_reader& r,
                  const json& record, const std::string& where, const shape2& want) {
  std::string path;
  matrix m = decode_npy(read_recorded(fs, dir, r, record, where, path), path);
  if (m.rows() != want.rows || m.cols() != want.cols)
    throw checkpoint_error(fmt::format("{}: shape {} but the manifest's rows need {}", path,
                                       shape_string(m), to_string(want)));
  return m;
}

/// Reads an int64 array recorded in the manifest (a dynamic table's ids), checking name,
/// size, CRC and shape: `rows` (any when negative) x `cols`.
std::vector<int64_t> read_ids_array(file_system& fs, const std::string& dir, const manifest_reader& r,
                                    const json& record, const std::string& where, int64_t rows, int64_t cols,
                                    int64_t* older_cols = nullptr) {
  std::string path;
  int64_t have_cols = 0;
  auto out = decode_npy_ids(read_recorded(fs, dir, r, record, where, path), path, have_cols);
  const auto have_rows = have_cols > 0 ? static_cast<int64_t>(out.size()) / have_cols : 0;
  // `older_cols`: the columns an older writer wrote instead (the count read back there).
  const bool older = older_cols && have_cols == *older_cols;
  if ((have_cols != cols && !older) || (rows >= 0 && have_rows != rows))
    throw checkpoint_error(fmt::format("{}: shape ({}, {}) where ({}, {}) is needed", path, have_rows, have_cols,
                                       rows >= 0 ? std::to_string(rows) : "n", cols));
  if (older_cols) *older_cols = have_cols;
  return out;
}

void remove_committed(file_system& fs, const std::string& dir) {
  // Uncommit first: a crash after this leaves an uncommitted leftover, never a listed
  // checkpoint with missing arrays.
  if (auto st = fs.remove_all(join_path(dir, manifest_name)); !st.ok()) throw checkpoint_error(st.message());
  if (auto st = fs.sync_dir(dir); !st.ok()) throw checkpoint_error(st.message());
  if (auto st = fs.remove_all(dir); !st.ok()) throw checkpoint_error(st.message());
}

}  // namespace

// -- names -------------------------------------------------------------------------------

std::string checkpoint_dir_name(int64_t step) {
  return fmt::format("{}{:012d}", dir_prefix, step);
}

std::string partition_file_name(const std::string& variable, size_t k) {
  return fmt::format("{}.part{}.npy", file_stem(variable), k);
}

std::string slot_file_name(const std::string& variable, size_t k, const std::string& slot) {
  return fmt::format("{}.part{}.slot-{}.npy", file_stem(variable), k, slot);
}

// -- write -------------------------------------------------------------------------------

std::string begin_checkpoint(file_system& fs, const std::string& root, int64_t step) {
  if (step < 0) throw std::invalid_argument(fmt::format("begin_checkpoint: negative step {}", step));
  const std::string dir = join_path(root, checkpoint_dir_name(step));
  if (auto st = fs.create_dirs(root); !st.ok()) throw checkpoint_error(fmt::format("{}: {}", dir, st.message()));
  if (fs.exists(dir)) {
    if (is_committed(fs, dir, step))
      throw checkpoint_error(fmt::format("{}: a committed checkpoint of step {} already exists", dir, step));
    if (auto st = fs.remove_all(dir); !st.ok())
      throw checkpoint_error(fmt::format("{}: removing the uncommitted leftover: {}", dir, st.message()));
  }
  if (auto st = fs.create_dir(dir); !st.ok()) throw checkpoint_error(fmt::format("{}: {}", dir, st.message()));
  return dir;
}

namespace {

// Writes int64 values (rows x cols, row-major) as a '<i8' .npy and fsyncs it.
file_record write_ids_array(file_system& fs, const std::string& dir, const std::string& name, const int64_t* data,
                            int64_t rows, int64_t cols) {
  const std::string header = npy_ids_header(rows, cols);
  const std::string_view bytes(reinterpret_cast<const char*>(data), static_cast<size_t>(rows * cols) * sizeof(int64_t));
  const std::string path = join_path(dir, name);
  if (auto st = fs.write_file(path, {header, bytes}); !st.ok()) throw checkpoint_error(st.message());
  if (auto st = fs.sync_file(path); !st.ok()) throw checkpoint_error(st.message());
  return file_record{name, header.size() + bytes.size(), detail::crc32_update(detail::crc32_update(0, header), bytes)};
}

}  // namespace

partition_record write_partition_arrays(file_system& fs, const std::string& dir, const std::string& variable, size_t k,
                                        const partition_data& p, bool dynamic) {
  auto bad = [&](const std::string& what) {
    throw std::invalid_argument(fmt::format("write_partition_arrays: variable '{}' partition {}: {}", variable, k, what));
  };
  if (p.iterations < 0) bad(fmt::format("negative iterations {}", p.iterations));
  if (p.base >= 0 && !dynamic) bad(fmt::format("an increment over step {} of a fixed variable", p.base));
  if (!p.removed.empty() && p.base < 0) bad("removed ids in a whole partition");
  if (dynamic) {
    if (static_cast<int64_t>(p.ids.size()) != p.values.rows() || p.last_update.size() != p.ids.size())
      bad(fmt::format("values are {} for {} ids and {} last updates", shape_string(p.values), p.ids.size(),
                      p.last_update.size()));
  } else if (p.row_end - p.row_begin != p.values.rows()) {
    bad(fmt::format("values are {} for rows [{}, {})", shape_string(p.values), p.row_begin, p.row_end));
  }
  for (const auto& [slot, m] : p.slots) {
    if (!safe_file_name(slot)) bad(fmt::format("bad slot name '{}'", slot));
    if (m.rows() != p.values.rows() || m.cols() != p.values.cols())
      bad(fmt::format("slot '{}' is {}, the values {}", slot, shape_string(m), shape_string(p.values)));
  }
  partition_record r;
  r.row_begin = p.row_begin;
  r.row_end = p.row_end;
  r.iterations = p.iterations;
  r.base = p.base;
  r.values = write_array(fs, dir, partition_file_name(variable, k), p.values);
  for (const auto& [slot, m] : p.slots) r.slots[slot] = write_array(fs, dir, slot_file_name(variable, k, slot), m);
  if (dynamic) {
    const auto n = static_cast<int64_t>(p.ids.size());
    r.tables["ids"] = write_ids_array(fs, dir, table_file_name(variable, k, "ids"), p.ids.data(), n, 1);
    r.tables["last_update"] =
      write_ids_array(fs, dir, table_file_name(variable, k, "last_update"), p.last_update.data(), n, 1);
    std::vector<int64_t> waiting;
    for (const auto& w : p.waiting) {
      waiting.push_back(w.id);
      waiting.push_back(static_cast<int64_t>(w.count));
      waiting.push_back(w.last);
    }
    r.tables["waiting"] = write_ids_array(fs, dir, table_file_name(variable, k, "waiting"), waiting.data(),
                                          static_cast<int64_t>(p.waiting.size()), 3);
    if (p.base >= 0)
      r.tables["removed"] = write_ids_array(fs, dir, table_file_name(variable, k, "removed"), p.removed.data(),
                                            static_cast<int64_t>(p.removed.size()), 1);
  }
  return r;
}

namespace {

// Every base an increment names is a committed checkpoint in root whose variable is a
// dynamic table of as many partitions; returns each base's identity (manifest_identity).
// `vars`: variable_records or variable_datas (a name, partitions with a base each).
// Throws checkpoint_error naming both.
template <class Variables>
std::map<int64_t, uint32_t> check_bases(file_system& fs, const std::string& root, int64_t step, const Variables& vars) {
  std::map<int64_t, json> manifests;
  for (const auto& v : vars)
    for (size_t k = 0; k < v.partitions.size(); ++k) {
      const auto b = v.partitions[k].base;
      if (b < 0) continue;
      auto fail = [&](const std::string& why) {
        throw checkpoint_error(fmt::format("step {}: variable '{}' partition {} is an increment over the checkpoint of "
                                           "step {}, which {}",
                                           step, v.name, k, b, why));
      };
      auto it = manifests.find(b);
      if (it == manifests.end()) {
        const auto dir = join_path(root, checkpoint_dir_name(b));
        try {
          it = manifests.emplace(b, parse_manifest(fs, dir)).first;
        } catch (const checkpoint_error& e) {
          fail(fmt::format("cannot be read ({})", e.what()));
        }
      }
      // The base's manifest parsed, but its fields are checked here one by one: a
      // malformed one is refused, never read past.
      const json* found = nullptr;
      auto vars = it->second.find("variables");
      if (vars != it->second.end() && vars->is_array())
        for (const auto& bv : *vars) {
          if (!bv.is_object()) continue;
          auto name = bv.find("name");
          if (name != bv.end() && name->is_string() && *name == json(v.name)) found = &bv;
        }
      if (!found) fail("has no such variable");
      auto dyn = found->find("dynamic");
      if (dyn == found->end() || !dyn->is_boolean() || *dyn != json(true)) fail("holds it as a fixed variable");
      auto parts = found->find("partitions");
      const size_t have = parts != found->end() && parts->is_array() ? parts->size() : 0;
      if (have != v.partitions.size())
        fail(fmt::format("holds it in {} partitions, not {}", have, v.partitions.size()));
    }
  std::map<int64_t, uint32_t> ids;
  for (const auto& [b, m] : manifests) ids[b] = manifest_identity(m);
  return ids;
}

}  // namespace

std::string commit_checkpoint(file_system& fs, const std::string& root, const checkpoint_record& r) {
  const std::string dir = join_path(root, checkpoint_dir_name(std::max<int64_t>(0, r.step)));
  try {
    validate_records(r);
    const auto base_ids = check_bases(fs, root, r.step, r.variables);
    for (const auto& v : r.variables)
      for (const auto& p : v.partitions) {
        if (!fs.exists(join_path(dir, p.values.name)))
          throw checkpoint_error(fmt::format("{} is missing (variable '{}')", p.values.name, v.name));
        for (const auto& [slot, f] : p.slots)
          if (!fs.exists(join_path(dir, f.name)))
            throw checkpoint_error(fmt::format("{} is missing (variable '{}', slot {})", f.name, v.name, slot));
        for (const auto& [what, f] : p.tables)
          if (!fs.exists(join_path(dir, f.name)))
            throw checkpoint_error(fmt::format("{} is missing (variable '{}', its {})", f.name, v.name, what));
      }
    write_manifest(fs, root, dir, r, base_ids);
  } catch (const std::exception& e) {
    abandon(fs, dir, "commit_checkpoint", e);
  }
  return dir;
}

std::string write_checkpoint(file_system& fs, const std::string& root, const checkpoint_data& data) {
  validate_for_write(data);
  std::map<int64_t, uint32_t> base_ids;
  try {
    base_ids = check_bases(fs, root, data.step, data.variables);
  } catch (const checkpoint_error& e) {
    throw checkpoint_error(fmt::format("write_checkpoint {}: {}", join_path(root, checkpoint_dir_name(data.step)), e.what()));
  }
  std::string dir;
  try {
    dir = begin_checkpoint(fs, root, data.step);
  } catch (const checkpoint_error& e) {
    throw checkpoint_error(fmt::format("write_checkpoint {}", e.what()));
  }
  try {
    checkpoint_record r;
    r.step = data.step;
    r.optimizer = data.optimizer;
    r.hyperparams = data.hyperparams;
    r.extra = data.extra;
    for (const auto& v : data.variables) {
      variable_record vr{v.name, v.shape, {}, v.dynamic};
      for (size_t k = 0; k < v.partitions.size(); ++k)
        vr.partitions.push_back(write_partition_arrays(fs, dir, v.name, k, v.partitions[k], v.dynamic));
      r.variables.push_back(std::move(vr));
    }
    write_manifest(fs, root, dir, r, base_ids);
  } catch (const checkpoint_error& e) {
    abandon(fs, dir, "write_checkpoint", e);
  }
  return dir;
}

// -- list and prune ----------------------------------------------------------------------

std::vector<checkpoint_info> list_checkpoints(file_system& fs, const std::string& root) {
  std::vector<checkpoint_info> out;
  for (const auto& e : scan(fs, root))
    if (e.committed) out.push_back({e.step, e.path, e.bases});
  return out;
}

std::optional<checkpoint_info> latest_checkpoint(file_system& fs, const std::string& root) {
  auto all = list_checkpoints(fs, root);
  if (all.empty()) return std::nullopt;
  return all.back();
}

std::vector<std::string> prune_checkpoints(file_system& fs, const std::string& root, size_t keep) {
  if (keep < 1)
    throw std::invalid_argument("prune_checkpoints: keep must be >= 1, got 0 (it would delete "
                                "every checkpoint)");
  const auto entries = scan(fs, root);
  size_t committed = 0;
  int64_t newest = -1;
  for (const auto& e : entries)
    if (e.committed) {
      ++committed;
      newest = std::max(newest, e.step);
    }
  // The newest `keep`, and every checkpoint they build on (newest first: a base is older).
  std::set<int64_t> kept;
  size_t left = keep;
  for (auto e = entries.rbegin(); e != entries.rend(); ++e) {
    if (!e->committed) continue;
    if (left > 0) {
      --left;
      kept.insert(e->step);
    }
    if (kept.count(e->step)) kept.insert(e->bases.begin(), e->bases.end());
  }
  std::vector<std::string> removed;
  for (const auto& e : entries) {  // by step: oldest first
    if (e.committed) {
      if (kept.count(e.step)) continue;
      remove_committed(fs, e.path);
    } else {
      if (e.step >= newest) continue;  // may be a write in progress
      if (auto st = fs.remove_all(e.path); !st.ok()) throw checkpoint_error(st.message());
    }
    removed.push_back(e.path);
  }
  if (!removed.empty())
    if (auto st = fs.sync_dir(root); !st.ok()) throw checkpoint_error(st.message());
  return removed;
}

// -- read --------------------------------------------------------------------------------

nlohmann::json read_manifest(file_system& fs, const std::string& dir) {
  return parse_manifest(fs, dir);
}

void update_checkpoint_extra(file_system& fs, const std::string& dir, const nlohmann::json& extra) {
  json manifest = parse_manifest(fs, dir);
  manifest["extra"] = extra;
  // The commit record's own protocol: a new file, synced, renamed over the old one.
  const std::string tmp = join_path(dir, manifest_tmp_name);
  if (auto st = fs.write_file(tmp, manifest.dump(2) + "\n"); !st.ok()) throw checkpoint_error(st.message());
  if (auto st = fs.sync_file(tmp); !st.ok()) throw checkpoint_error(st.message());
  if (auto st = fs.rename(tmp, join_path(dir, manifest_name)); !st.ok()) throw checkpoint_error(st.message());
}

void remove_checkpoint(file_system& fs, const std::string& root, const std::string& dir) {
  // Uncommitted first (its manifest gone and that made durable), then deleted, as prune
  // does: a crash in between leaves an uncommitted directory, never a listed broken one.
  if (auto st = fs.remove_all(join_path(dir, manifest_name)); !st.ok()) throw checkpoint_error(st.message());
  if (auto st = fs.sync_dir(dir); !st.ok()) throw checkpoint_error(st.message());
  if (auto st = fs.remove_all(dir); !st.ok()) throw checkpoint_error(st.message());
  if (auto st = fs.sync_dir(root); !st.ok()) throw checkpoint_error(st.message());
}

namespace {

// A checkpoint directory as its manifest lists it: increments not resolved; only the
// variables in `only` (all without it) have their arrays read.
checkpoint_data read_one(file_system& fs, const std::string& dir, const std::set<std::string>* only) {
  const json j = parse_manifest(fs, dir);
  const manifest_reader r(join_path(dir, manifest_name));
  checkpoint_data out;
  out.step = r.integer(j, "step", "", 0);

  const json& opt = r.field(j, "optimizer", "");
  out.optimizer = r.string(opt, "describe", "optimizer");
  const json& hyper = r.field(opt, "hyperparameters", "optimizer");
  if (!hyper.is_object()) r.bad("optimizer.hyperparameters", "expected an object");
  for (const auto& [name, value] : hyper.items()) {
    if (!value.is_number())
      r.bad("optimizer.hyperparameters." + name, fmt::format("expected a number, got {}", value.dump()));
    out.hyperparams.emplace_back(name, value.get<double>());
  }
  out.extra = r.field(j, "extra", "");

  std::set<std::string> names;
  const json& vars = r.array(j, "variables", "");
  for (size_t i = 0; i < vars.size(); ++i) {
    const std::string where = fmt::format("variables[{}]", i);
    const json& vj = vars[i];
    variable_data v;
    v.name = r.string(vj, "name", where);
    if (v.name.empty()) r.bad(where, "empty variable name");
    if (!names.insert(v.name).second) r.bad(where, fmt::format("variable '{}' appears twice", v.name));
    if (auto d = vj.find("dynamic"); d != vj.end()) {
      if (!d->is_boolean()) r.bad(where + ".dynamic", fmt::format("expected true or false, got {}", d->dump()));
      v.dynamic = d->get<bool>();
    }
    const json& shape = r.array(vj, "shape", where);
    if (shape.size() != 2 || !shape[0].is_number_integer() || !shape[1].is_number_integer() ||
        !shape_error(v.dynamic, {shape[0].get<int64_t>(), shape[1].get<int64_t>()}).empty())
      r.bad(where + ".shape", fmt::format("expected {}, got {}",
                                          v.dynamic ? "[0, cols] (a dynamic table)" : "[rows, cols] of positive integers",
                                          shape.dump()));
    v.shape = {shape[0].get<int64_t>(), shape[1].get<int64_t>()};
    if (only && !only->count(v.name)) continue;

    const json& parts = r.array(vj, "partitions", where);
    std::vector<row_range> ranges;
    for (size_t k = 0; k < parts.size(); ++k) {
      const std::string pw = fmt::format("{}.partitions[{}]", where, k);
      const auto index = r.integer(parts[k], "index", pw, 0);
      if (index != static_cast<int64_t>(k)) r.bad(pw, fmt::format("index {} out of order (expected {})", index, k));
      ranges.push_back({r.integer(parts[k], "row_begin", pw, 0), r.integer(parts[k], "row_end", pw, 0)});
    }
    if (auto err = coverage_error(tiled_rows(v.dynamic, v.shape, parts.size()), ranges); !err.empty())
      r.bad(where, fmt::format("variable '{}' {}: {}", v.name, to_string(v.shape), err));

    std::vector<std::string> slot_names;
    for (size_t k = 0; k < parts.size(); ++k) {
      const std::string pw = fmt::format("{}.partitions[{}]", where, k);
      const json& pj = parts[k];
      partition_data p;
      p.row_begin = ranges[k].begin;
      p.row_end = ranges[k].end;
      p.iterations = r.integer(pj, "iterations", pw, 0);
      if (pj.contains("base")) {
        if (!v.dynamic) r.bad(pw + ".base", "only a dynamic table's partition is an increment");
        p.base = r.integer(pj, "base", pw, 0);
        if (p.base >= out.step)
          r.bad(pw + ".base", fmt::format("an increment over step {} in the checkpoint of step {}", p.base, out.step));
        p.removed = read_ids_array(fs, dir, r, r.field(pj, "removed", pw), pw + ".removed", -1, 1);
      }
      if (v.dynamic) {
        p.ids = read_ids_array(fs, dir, r, r.field(pj, "ids", pw), pw + ".ids", -1, 1);
        const auto n = static_cast<int64_t>(p.ids.size());
        p.last_update = read_ids_array(fs, dir, r, r.field(pj, "last_update", pw), pw + ".last_update", n, 1);
        // (id, count, last step); a checkpoint of the first version with tables wrote
        // (id, count): their last step is taken as the partition's step count.
        int64_t cols = 2;
        auto waiting = read_ids_array(fs, dir, r, r.field(pj, "waiting", pw), pw + ".waiting", -1, 3, &cols);
        const auto c = static_cast<size_t>(cols);
        std::vector<int64_t> all = p.ids;
        for (size_t w = 0; w + c <= waiting.size(); w += c) {
          waiting_id id{waiting[w], 0, cols == 3 ? waiting[w + 2] : p.iterations};
          if (waiting[w + 1] < 0) r.bad(pw + ".waiting", fmt::format("id {} has {} gradients", id.id, waiting[w + 1]));
          if (id.last < 0 || id.last > p.iterations)
            r.bad(pw + ".waiting", fmt::format("id {} had its last gradient at step {}, past the partition's {}", id.id,
                                               id.last, p.iterations));
          id.count = static_cast<uint64_t>(waiting[w + 1]);
          p.waiting.push_back(id);
          all.push_back(id.id);
        }
        // Every id of partition k of n is one that dynamic_owner gives k, once (an
        // increment's removed ids are the partition's too).
        for (auto id : p.removed)
          if (id < 0 || dynamic_owner(id, static_cast<int>(parts.size())) != static_cast<int>(k))
            r.bad(pw + ".removed", fmt::format("id {} is not one partition {} of {} holds", id, k, parts.size()));
        for (auto id : all)
          if (id < 0 || dynamic_owner(id, static_cast<int>(parts.size())) != static_cast<int>(k))
            r.bad(pw, fmt::format("id {} is not one partition {} of {} holds", id, k, parts.size()));
        std::sort(all.begin(), all.end());
        if (auto d = std::adjacent_find(all.begin(), all.end()); d != all.end())
          r.bad(pw, fmt::format("id {} appears twice", *d));
      }
      const shape2 want{v.dynamic ? static_cast<int64_t>(p.ids.size()) : p.row_end - p.row_begin, v.shape.cols};
      p.values = read_array(fs, dir, r, r.field(pj, "file", pw), pw + ".file", want);
      const json& slots = r.field(pj, "slots", pw);
      if (!slots.is_object()) r.bad(pw + ".slots", "expected an object");
      std::vector<std::string> these;
      for (const auto& [slot, record] : slots.items()) {
        these.push_back(slot);
        p.slots[slot] = read_array(fs, dir, r, record, pw + ".slots." + slot, want);
      }
      if (k == 0)
        slot_names = these;
      else if (these != slot_names)
        r.bad(pw + ".slots", fmt::format("slots [{}] differ from partition 0's [{}]", detail::join(these),
                                         detail::join(slot_names)));
      v.partitions.push_back(std::move(p));
    }
    out.variables.push_back(std::move(v));
  }
  return out;
}

// The directory that holds checkpoint directory `dir`.
std::string parent_of(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const auto slash = dir.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : dir.substr(0, slash);
}

// Puts the increments `incs` (oldest first, each over the one before) over the whole
// partition `base` in one pass: apply_increment of each in turn, by id.
void apply_increments(partition_data& base, const std::vector<const partition_data*>& incs) {
  auto bad = [](const std::string& what) { throw std::invalid_argument("apply_increment: " + what); };
  if (base.base >= 0) bad("the base is an increment itself");
  const auto cols = base.values.cols();
  const auto nb = static_cast<int64_t>(base.ids.size());
  if (base.values.rows() != nb || base.last_update.size() != base.ids.size())
    bad(fmt::format("a base of {} ids for values {}", nb, shape_string(base.values)));
  for (const auto& [name, m] : base.slots)
    if (m.rows() != nb || m.cols() != cols) bad(fmt::format("the base's slot '{}' is {} for values {}", name,
                                                            shape_string(m), shape_string(base.values)));
  for (const auto* inc : incs) {
    const auto ni = static_cast<int64_t>(inc->ids.size());
    if (inc->base < 0) bad("a whole partition is not an increment");
    if (inc->values.rows() != ni || inc->last_update.size() != inc->ids.size())
      bad(fmt::format("{} ids for values {} over {} ids for values {}", ni, shape_string(inc->values), nb,
                      shape_string(base.values)));
    if (inc->values.cols() != cols) bad(fmt::format("rows of width {} over rows of width {}", inc->values.cols(), cols));
    if (inc->slots.size() != base.slots.size()) bad(fmt::format("{} slots over {}", inc->slots.size(), base.slots.size()));
    for (const auto& [name, m] : inc->slots) {
      auto it = base.slots.find(name);
      if (it == base.slots.end()) bad(fmt::format("slot '{}' is not the base's", name));
      if (m.rows() != ni || m.cols() != cols) bad(fmt::format("slot '{}' is {} over {}", name, shape_string(m), shape_string(it->second)));
    }
  }
  if (incs.empty()) return;
  // The base's rows by id (sorted, searched once per id of an increment).
  std::vector<std::pair<int64_t, int64_t>> by_id(static_cast<size_t>(nb));
  for (int64_t j = 0; j < nb; ++j) by_id[static_cast<size_t>(j)] = {base.ids[static_cast<size_t>(j)], j};
  std::sort(by_id.begin(), by_id.end());
  auto base_row = [&](int64_t id) -> int64_t {
    auto it = std::lower_bound(by_id.begin(), by_id.end(), std::pair<int64_t, int64_t>{id, INT64_MIN});
    return it != by_id.end() && it->first == id ? it->second : -1;
  };
  // What the increments, in order, made of each id they name: dropped, or row r of
  // increment i (the newest wins). Ids they do not name keep the base's row.
  struct source {
    int level = -1;  // -1: dropped (in named), the base (in src)
    int64_t row = 0;
    bool listed = false;  // in `order`
  };
  std::unordered_map<int64_t, source> named;
  std::vector<int64_t> order;  // ids not in the base, in the order they first got a row
  for (size_t i = 0; i < incs.size(); ++i) {
    const auto& inc = *incs[i];
    for (auto id : inc.removed) named[id].level = -1;
    for (size_t r = 0; r < inc.ids.size(); ++r) {
      auto& s = named[inc.ids[r]];
      if (!s.listed && base_row(inc.ids[r]) < 0) {
        order.push_back(inc.ids[r]);
        s.listed = true;
      }
      s.level = static_cast<int>(i);
      s.row = static_cast<int64_t>(r);
    }
    for (const auto& w : inc.waiting) {
      auto it = named.find(w.id);
      if (it != named.end() ? it->second.level >= 0 : base_row(w.id) >= 0)
        bad(fmt::format("id {} is waiting for admission and has a row", w.id));
    }
  }
  // (level: -1 the base, else the increment; row) of each row of the result: the base's
  // order, then the ids that joined (one dropped and back again keeps its first place).
  std::vector<source> src;
  src.reserve(static_cast<size_t>(nb) + order.size());
  for (int64_t j = 0; j < nb; ++j) {
    auto it = named.find(base.ids[static_cast<size_t>(j)]);
    if (it == named.end())
      src.push_back(source{-1, j, false});
    else if (it->second.level >= 0)
      src.push_back(it->second);
  }
  for (auto id : order)
    if (const auto& s = named.at(id); s.level >= 0) src.push_back(s);
  const auto n = static_cast<Eigen::Index>(src.size());
  auto gather = [&](const matrix& b, auto pick) {
    matrix out(n, cols);
    for (Eigen::Index r = 0; r < n; ++r) {
      const auto& s = src[static_cast<size_t>(r)];
      out.row(r) = (s.level < 0 ? b : pick(*incs[static_cast<size_t>(s.level)])).row(s.row);
    }
    return out;
  };
  partition_data out;
  out.row_begin = base.row_begin;
  out.row_end = base.row_end;
  out.iterations = incs.back()->iterations;
  out.values = gather(base.values, [](const partition_data& p) -> const matrix& { return p.values; });
  for (const auto& [name, m] : base.slots)
    out.slots[name] = gather(m, [&name = name](const partition_data& p) -> const matrix& { return p.slots.at(name); });
  out.ids.reserve(src.size());
  out.last_update.reserve(src.size());
  for (const auto& s : src) {
    const auto& p = s.level < 0 ? base : *incs[static_cast<size_t>(s.level)];
    out.ids.push_back(p.ids[static_cast<size_t>(s.row)]);
    out.last_update.push_back(p.last_update[static_cast<size_t>(s.row)]);
  }
  out.waiting = incs.back()->waiting;
  base = std::move(out);
}

// A checkpoint as read, each increment of a dynamic table's partition with the chain it
// builds on: chains[(variable, k)] is partition k's whole base, then every increment up
// to this checkpoint's (oldest first; the last is data's own partition, moved there).
struct read_chains {
  checkpoint_data data;
  std::map<std::pair<std::string, size_t>, std::vector<partition_data>> chains;
};

// read_one, with every increment's chain back to a whole checkpoint read from the bases'
// directories beside dir (each base checked to be the one the increment was taken over).
read_chains read_with_chains(file_system& fs, const std::string& dir, const std::set<std::string>* only,
                             int& reads_left) {
  if (--reads_left < 0)
    throw checkpoint_error(fmt::format("{}: its increments name more bases than a chain of checkpoints can", dir));
  read_chains out;
  out.data = read_one(fs, dir, only);
  auto& data = out.data;
  std::map<int64_t, std::set<std::string>> needed;  // base step -> its variables
  for (const auto& v : data.variables)
    for (const auto& p : v.partitions)
      if (p.base >= 0) needed[p.base].insert(v.name);
  if (needed.empty()) return out;
  // The identity each increment recorded of its base (read_one checked the rest).
  std::map<int64_t, uint32_t> recorded;
  {
    // read_one checked the variables it read; those `only` left out are checked here.
    const json m = parse_manifest(fs, dir);
    const manifest_reader r(join_path(dir, manifest_name));
    const json& vars = r.array(m, "variables", "");
    for (size_t i = 0; i < vars.size(); ++i) {
      const std::string where = fmt::format("variables[{}]", i);
      const json& parts = r.array(vars[i], "partitions", where);
      for (size_t k = 0; k < parts.size(); ++k) {
        const std::string pw = fmt::format("{}.partitions[{}]", where, k);
        if (!parts[k].is_object() || !parts[k].contains("base")) continue;
        const auto b = r.integer(parts[k], "base", pw, 0);
        const auto id = static_cast<uint32_t>(r.integer(parts[k], "base_crc32", pw, 0));
        if (auto [it, fresh] = recorded.emplace(b, id); !fresh && it->second != id)
          r.bad(pw, fmt::format("another identity recorded for the checkpoint of step {}", b));
      }
    }
  }
  for (auto& entry : needed) {
    const int64_t b = entry.first;
    const auto& names = entry.second;
    const auto base_dir = join_path(parent_of(dir), checkpoint_dir_name(b));
    auto fail = [&](const std::string& why) {
      throw checkpoint_error(fmt::format("{}: an increment over the checkpoint of step {} ({}): {}", dir, b, base_dir, why));
    };
    read_chains base;
    uint32_t have = 0;
    try {
      have = manifest_identity(parse_manifest(fs, base_dir));
    } catch (const checkpoint_error& e) {
      fail(e.what());
    }
    if (have != recorded.at(b))
      fail(fmt::format("it is not the one the increment was taken over (its manifest's variables have CRC-32 "
                       "{:08x}, the increment recorded {:08x}): replaced since",
                       have, recorded.at(b)));
    try {
      base = read_with_chains(fs, base_dir, &names, reads_left);
    } catch (const checkpoint_error& e) {
      fail(e.what());
    }
    if (base.data.step != b) fail(fmt::format("it is of step {}", base.data.step));
    for (auto& v : data.variables) {
      if (!names.count(v.name)) continue;
      auto bv = std::find_if(base.data.variables.begin(), base.data.variables.end(),
                             [&](auto& x) { return x.name == v.name; });
      if (bv == base.data.variables.end()) fail(fmt::format("it has no variable '{}'", v.name));
      if (!bv->dynamic || bv->partitions.size() != v.partitions.size())
        fail(fmt::format("it holds '{}' {}", v.name,
                         bv->dynamic ? fmt::format("in {} partitions, not {}", bv->partitions.size(), v.partitions.size())
                                     : std::string("as a fixed variable")));
      for (size_t k = 0; k < v.partitions.size(); ++k) {
        auto& p = v.partitions[k];
        if (p.base != b) continue;
        // The base's chain (or its whole partition), then this increment.
        std::vector<partition_data> chain;
        if (auto c = base.chains.find({v.name, k}); c != base.chains.end())
          chain = std::move(c->second);
        else
          chain.push_back(std::move(bv->partitions[k]));
        chain.push_back(std::move(p));
        out.chains[{v.name, k}] = std::move(chain);
      }
    }
  }
  return out;
}

// read_one with every increment put over its base's partition: each chain merged once
// (merging level by level cost the whole table once a level).
checkpoint_data read_resolved(file_system& fs, const std::string& dir, int& reads_left) {
  auto read = read_with_chains(fs, dir, nullptr, reads_left);
  for (auto& v : read.data.variables)
    for (size_t k = 0; k < v.partitions.size(); ++k) {
      auto c = read.chains.find({v.name, k});
      if (c == read.chains.end()) continue;
      auto& chain = c->second;
      auto whole = std::move(chain.front());
      const auto row_begin = chain.back().row_begin, row_end = chain.back().row_end;
      std::vector<const partition_data*> incs;
      for (size_t i = 1; i < chain.size(); ++i) incs.push_back(&chain[i]);
      try {
        apply_increments(whole, incs);
      } catch (const std::invalid_argument& e) {
        throw checkpoint_error(fmt::format("{}: variable '{}' partition {}: {}", dir, v.name, k, e.what()));
      }
      whole.row_begin = row_begin;
      whole.row_end = row_end;
      v.partitions[k] = std::move(whole);
    }
  return std::move(read.data);
}

}  // namespace

checkpoint_data read_checkpoint(file_system& fs, const std::string& dir) {
  // A chain is as long as the increments between whole checkpoints; a directory whose
  // increments name bases that name more bases, over and over, is refused.
  int reads_left = 10000;
  return read_resolved(fs, dir, reads_left);
}

void apply_increment(partition_data& base, const partition_data& inc) {
  if (inc.base < 0) throw std::invalid_argument("apply_increment: a whole partition is not an increment");
  apply_increments(base, {&inc});
}

// -- assemble and repartition ------------------------------------------------------------

namespace {

/// Copies each partition's `pick(p)` matrix into the whole; throws checkpoint_error.
template <class Pick>
matrix assemble(const variable_data& v, const char* what, Pick pick) {
  if (v.dynamic)
    throw checkpoint_error(fmt::format("{} '{}' is a dynamic table: its rows are keyed by id, not a matrix", what, v.name));
  if (auto err = coverage_error(v.shape.rows, ranges_of(v)); !err.empty())
    throw checkpoint_error(fmt::format("{} '{}' {}: {}", what, v.name, to_string(v.shape), err));
  matrix whole(v.shape.rows, v.shape.cols);
  for (size_t k = 0; k < v.partitions.size(); ++k) {
    const auto& p = v.partitions[k];
    const matrix& m = pick(p, k);
    if (m.rows() != p.row_end - p.row_begin || m.cols() != v.shape.cols)
      throw checkpoint_error(fmt::format("{} '{}' partition {}: {} for rows [{}, {}) of {}", what,
                                         v.name, k, shape_string(m), p.row_begin, p.row_end,
                                         to_string(v.shape)));
    whole.middleRows(p.row_begin, p.row_end - p.row_begin) = m;
  }
  return whole;
}

}  // namespace

matrix assemble_variable(const variable_data& v) {
  return assemble(v, "variable", [](const partition_data& p, size_t) -> const matrix& { return p.values; });
}

matrix assemble_slot(const variable_data& v, const std::string& slot) {
  return assemble(v, "variable", [&](const partition_data& p, size_t k) -> const matrix& {
    auto it = p.slots.find(slot);
    if (it == p.slots.end())
      throw checkpoint_error(fmt::format("variable '{}' partition {} has no slot '{}'", v.name, k, slot));
    return it->second;
  });
}

namespace {

// A dynamic table's rows and waiting ids dealt to `n` partitions by model::dynamic_owner.
variable_data deal_rows(const variable_data& v, size_t n) {
  variable_data out;
  out.name = v.name;
  out.shape = v.shape;
  out.dynamic = true;
  out.partitions.resize(n);
  int64_t iterations = 0;
  std::vector<std::string> slot_names;
  if (!v.partitions.empty())
    for (const auto& [slot, m] : v.partitions.front().slots) slot_names.push_back(slot);
  // Rows per target partition first, then copied once.
  std::vector<std::vector<std::pair<size_t, Eigen::Index>>> rows(n);
  for (size_t k = 0; k < v.partitions.size(); ++k) {
    const auto& p = v.partitions[k];
    iterations = std::max(iterations, p.iterations);
    if (static_cast<int64_t>(p.ids.size()) != p.values.rows() || p.last_update.size() != p.ids.size())
      throw checkpoint_error(fmt::format("dynamic table '{}' partition {}: {} ids, {} last updates for values {}", v.name,
                                         k, p.ids.size(), p.last_update.size(), shape_string(p.values)));
    for (size_t j = 0; j < p.ids.size(); ++j)
      rows[static_cast<size_t>(dynamic_owner(p.ids[j], static_cast<int>(n)))].emplace_back(k, static_cast<Eigen::Index>(j));
    for (const auto& w : p.waiting)
      out.partitions[static_cast<size_t>(dynamic_owner(w.id, static_cast<int>(n)))].waiting.push_back(w);
  }
  for (size_t t = 0; t < n; ++t) {
    auto& q = out.partitions[t];
    q.row_begin = static_cast<int64_t>(t);
    q.row_end = static_cast<int64_t>(t) + 1;
    q.iterations = iterations;
    const auto m = static_cast<Eigen::Index>(rows[t].size());
    q.values.resize(m, v.shape.cols);
    for (const auto& s : slot_names) q.slots[s].resize(m, v.shape.cols);
    for (Eigen::Index j = 0; j < m; ++j) {
      const auto [k, r] = rows[t][static_cast<size_t>(j)];
      const auto& p = v.partitions[k];
      q.ids.push_back(p.ids[static_cast<size_t>(r)]);
      q.last_update.push_back(p.last_update[static_cast<size_t>(r)]);
      q.values.row(j) = p.values.row(r);
      for (const auto& s : slot_names) {
        auto it = p.slots.find(s);
        if (it == p.slots.end() || it->second.rows() != p.values.rows())
          throw checkpoint_error(fmt::format("dynamic table '{}' partition {} has no slot '{}' of its rows", v.name, k, s));
        q.slots[s].row(j) = it->second.row(r);
      }
    }
  }
  return out;
}

}  // namespace

variable_data repartition(const variable_data& v, const std::vector<row_range>& ranges) {
  if (v.dynamic) {
    if (auto err = coverage_error(static_cast<int64_t>(ranges.size()), ranges); !err.empty())
      throw std::invalid_argument(fmt::format("repartition dynamic table '{}': target ranges: {}", v.name, err));
    return deal_rows(v, ranges.size());
  }
  if (auto err = coverage_error(v.shape.rows, ranges); !err.empty())
    throw std::invalid_argument(fmt::format("repartition '{}' {}: target ranges: {}", v.name,
                                            to_string(v.shape), err));
  const matrix values = assemble_variable(v);
  std::map<std::string, matrix> slots;
  if (!v.partitions.empty())
    for (const auto& [slot, ignored] : v.partitions.front().slots) slots[slot] = assemble_slot(v, slot);
  variable_data out;
  out.name = v.name;
  out.shape = v.shape;
  out.partitions.reserve(ranges.size());
  for (const auto& r : ranges) {
    partition_data p;
    p.row_begin = r.begin;
    p.row_end = r.end;
    p.values = values.middleRows(r.begin, r.rows());
    for (const auto& [slot, whole] : slots) p.slots[slot] = whole.middleRows(r.begin, r.rows());
    for (const auto& old : v.partitions)
      if (old.row_begin < r.end && r.begin < old.row_end) p.iterations = std::max(p.iterations, old.iterations);
    out.partitions.push_back(std::move(p));
  }
  return out;
}

checkpoint_data repartition(const checkpoint_data& data, const placement& target) {
  checkpoint_data out;
  out.step = data.step;
  out.optimizer = data.optimizer;
  out.hyperparams = data.hyperparams;
  out.extra = data.extra;
  for (const auto& tv : target.variables()) {
    const auto it = std::find_if(data.variables.begin(), data.variables.end(),
                                 [&](const variable_data& v) { return v.name == tv.name; });
    if (it == data.variables.end())
      throw checkpoint_error(fmt::format("repartition: the checkpoint of step {} has no variable '{}'",
                                         data.step, tv.name));
    if (it->shape != tv.shape)
      throw checkpoint_error(fmt::format("repartition: variable '{}' is {} in the checkpoint but {} "
                                         "in the target",
                                         tv.name, to_string(it->shape), to_string(tv.shape)));
    if (it->dynamic != tv.dynamic)
      throw checkpoint_error(fmt::format("repartition: variable '{}' is {} in the checkpoint but {} in the target",
                                         tv.name, it->dynamic ? "a dynamic table" : "a fixed one",
                                         tv.dynamic ? "a dynamic table" : "a fixed one"));
    std::vector<row_range> ranges;
    for (const auto& p : tv.partitions)
      ranges.push_back(tv.dynamic ? row_range{p.index, p.index + 1} : row_range{p.row_begin, p.row_end});
    out.variables.push_back(repartition(*it, ranges));
  }
  for (const auto& v : data.variables)
    if (!target.find(v.name))
      throw checkpoint_error(fmt::format("repartition: checkpoint variable '{}' is not in the "
                                         "target placement",
                                         v.name));
  return out;
}

partition_data table_partition(const dynamic_table::snapshot& s, const std::vector<std::string>& slot_names) {
  if (s.slots.size() != slot_names.size())
    throw std::invalid_argument(
      fmt::format("table_partition: {} slots for {} slot names", s.slots.size(), slot_names.size()));
  const auto n = static_cast<Eigen::Index>(s.ids.size());
  partition_data p;
  p.iterations = s.iterations;
  p.ids = s.ids;
  p.last_update = s.last_update;
  p.waiting = s.waiting;
  if (!s.full) p.removed = s.removed;  // the caller names its base
  p.values = Eigen::Map<const matrix>(s.values.data(), n, s.dim);
  for (size_t k = 0; k < slot_names.size(); ++k) p.slots[slot_names[k]] = Eigen::Map<const matrix>(s.slots[k].data(), n, s.dim);
  return p;
}

dynamic_table::snapshot table_snapshot(const partition_data& p, const std::vector<std::string>& slot_names) {
  if (p.base >= 0) throw std::invalid_argument(fmt::format("table_snapshot: an increment over step {}, not every row", p.base));
  const auto n = static_cast<int64_t>(p.ids.size());
  if (p.values.rows() != n || p.last_update.size() != p.ids.size())
    throw std::invalid_argument(fmt::format("table_snapshot: {} ids, {} last updates for values {}", p.ids.size(),
                                            p.last_update.size(), shape_string(p.values)));
  dynamic_table::snapshot s;
  s.full = true;
  s.dim = p.values.cols();
  s.iterations = p.iterations;
  s.ids = p.ids;
  s.last_update = p.last_update;
  s.waiting = p.waiting;
  s.values.assign(p.values.data(), p.values.data() + p.values.size());
  for (const auto& name : slot_names) {
    auto it = p.slots.find(name);
    if (it == p.slots.end())
      throw std::invalid_argument(fmt::format("table_snapshot: no slot '{}' of the optimizer's", name));
    if (it->second.rows() != n || it->second.cols() != s.dim)
      throw std::invalid_argument(fmt::format("table_snapshot: slot '{}' is {}, the values {}", name,
                                              shape_string(it->second), shape_string(p.values)));
    s.slots.emplace_back(it->second.data(), it->second.data() + it->second.size());
  }
  return s;
}

}  // namespace actortrain::model
