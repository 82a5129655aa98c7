// actortrain inspect: prints what a checkpoint holds — step, optimizer, every variable's
// partitions with statistics of their values, the run state the coordinator stored in
// the manifest's "extra", and totals. Everything is read through read_checkpoint, so a
// checkpoint that prints is one a restore would accept; one that does not gives the
// reader's error (naming the file) and exit status 1.

#include "inspect.hpp"

#include "flags.hpp"

#include <actortrain/actors/ps/ledger.hpp>
#include <actortrain/model/checkpoint/checkpoint.hpp>
#include <actortrain/model/digest.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace actortrain::tools {
namespace {

namespace md = actortrain::model;
using nlohmann::json;

struct inspect_options {
  std::string dir;
  bool all = false;
  bool digest = false;
  int64_t values = 0;
};

/// What DIR resolved to: the checkpoints to print and, for a root, every committed one.
struct inspect_targets {
  bool is_root = false;
  std::vector<md::checkpoint_info> committed;
  std::vector<md::checkpoint_info> shown;
};

inspect_options parse_options(int argc, char** argv, int first, bool& help_printed) {
  inspect_options o;
  flags f{"actortrain inspect DIR",
          "Prints a checkpoint: its step, optimizer, every variable's shape and partitions\n"
          "(row range, iterations, slots, min/max/mean/L2 norm and non-finite count of the\n"
          "values), the run state (run, epoch, pipeline positions, watermark) and totals.\n"
          "DIR is a checkpoint directory (holding manifest.json) or a checkpoint root\n"
          "(holding ckpt-* directories: the newest committed one is printed, and all are\n"
          "listed). Every file is validated (sizes, CRCs, shapes); exit status 1 when DIR\n"
          "holds no committed checkpoint or one fails validation. The ledgers the manifest\n"
          "keeps (what each partition applied) are summarized; `actortrain ledger check`\n"
          "judges them."};
  f.add("all", o.all, "under a root, print every committed checkpoint, not just the newest")
    .add("digest", o.digest, "print only the digest of the variables' values (what `actortrain node` prints for the "
         "parameters a worker pulled at the end; with an averaging optimizer, of their average), one line per "
         "checkpoint")
    .add("values", o.values, "also print the first N values of each partition");
  help_printed = !f.parse(argc, argv, first);
  if (help_printed) return o;
  if (o.values < 0) throw usage_error("--values must be >= 0");
  const auto& pos = f.positional();
  if (pos.empty()) throw usage_error("inspect: which directory? (actortrain inspect DIR)");
  if (pos.size() > 1) throw usage_error(fmt::format("inspect: unexpected argument '{}'", pos[1]));
  if (pos[0].empty()) throw usage_error("inspect: DIR must not be empty");
  o.dir = pos[0];
  return o;
}

/// The last component of a path, trailing slashes ignored: "a/ckpt-1/" -> "ckpt-1".
std::string base_name(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

/// Directories named ckpt-* that list_checkpoints did not accept: failed or interrupted
/// writes, worth a mention because they are why a root can look emptier than expected.
size_t count_uncommitted(md::file_system& fs, const inspect_targets& t, const std::string& root) {
  std::vector<std::string> names;
  if (!fs.list_dir(root, names).ok()) return 0;
  std::set<std::string> committed;
  for (auto& c : t.committed) committed.insert(base_name(c.path));
  return static_cast<size_t>(std::count_if(names.begin(), names.end(), [&](const std::string& n) {
    return n.rfind("ckpt-", 0) == 0 && committed.count(n) == 0;
  }));
}

inspect_targets resolve(md::file_system& fs, const inspect_options& o) {
  if (!fs.exists(o.dir)) throw std::runtime_error(fmt::format("{}: no such file or directory", o.dir));
  inspect_targets t;
  // A manifest makes DIR one checkpoint; its step comes from read_checkpoint later.
  if (fs.exists(md::join_path(o.dir, "manifest.json"))) {
    t.shown.push_back(md::checkpoint_info{0, o.dir, {}});
    return t;
  }
  // ckpt-<step> without a manifest is a write that never committed, not a root.
  if (base_name(o.dir).rfind("ckpt-", 0) == 0)
    throw std::runtime_error(fmt::format("{}: an uncommitted checkpoint (no manifest.json)", o.dir));
  t.is_root = true;
  t.committed = md::list_checkpoints(fs, o.dir);
  if (t.committed.empty()) {
    const size_t uncommitted = count_uncommitted(fs, t, o.dir);
    throw std::runtime_error(fmt::format(
      "{}: no committed checkpoint (no manifest.json, no ckpt-*/manifest.json{})", o.dir,
      uncommitted ? fmt::format("; {} uncommitted ckpt-* director{}", uncommitted, uncommitted == 1 ? "y" : "ies")
                  : ""));
  }
  if (o.all)
    t.shown = t.committed;
  else
    t.shown.push_back(t.committed.back());
  return t;
}

void print_committed_list(md::file_system& fs, const inspect_targets& t, const std::string& root) {
  fmt::print("{}: {} committed checkpoint{}\n", root, t.committed.size(), t.committed.size() == 1 ? "" : "s");
  for (size_t i = 0; i < t.committed.size(); ++i)
    fmt::print("  step {:>10}  {}{}\n", t.committed[i].step, t.committed[i].path,
               i + 1 == t.committed.size() ? "  (newest)" : "");
  if (size_t n = count_uncommitted(fs, t, root))
    fmt::print("  ({} uncommitted ckpt-* director{} ignored)\n", n, n == 1 ? "y" : "ies");
}

// --- values -----------------------------------------------------------------------

struct value_stats {
  int64_t finite = 0;
  int64_t non_finite = 0;
  double min = std::numeric_limits<double>::infinity();
  double max = -std::numeric_limits<double>::infinity();
  double sum = 0;
  double sum_sq = 0;
};

// Over the finite values only, so one NaN does not hide the range of the rest; the
// non-finite ones are counted instead.
value_stats stats_of(const md::matrix& m) {
  value_stats s;
  const float* p = m.data();
  for (Eigen::Index i = 0; i < m.size(); ++i) {
    const double x = p[i];
    if (!std::isfinite(x)) {
      ++s.non_finite;
      continue;
    }
    ++s.finite;
    s.min = std::min(s.min, x);
    s.max = std::max(s.max, x);
    s.sum += x;
    s.sum_sq += x * x;
  }
  return s;
}

std::string format_stats(const value_stats& s) {
  if (s.finite == 0) return fmt::format("no finite values  non-finite {}", s.non_finite);
  return fmt::format("min {:.6g}  max {:.6g}  mean {:.6g}  l2 {:.6g}  non-finite {}", s.min, s.max,
                     s.sum / static_cast<double>(s.finite), std::sqrt(s.sum_sq), s.non_finite);
}

void print_first_values(const md::matrix& m, int64_t n) {
  const auto count = std::min<int64_t>(n, m.size());
  std::vector<float> head(m.data(), m.data() + count);
  fmt::print("      first {} values: [{:.6g}]\n", count, fmt::join(head, ", "));
}

void print_partition(const md::partition_data& p, size_t index, int64_t values) {
  std::vector<std::string> slot_names;
  for (auto& [name, _] : p.slots) slot_names.push_back(name);
  fmt::print("    part {}  rows [{}, {})  iterations {}  slots {}\n", index, p.row_begin, p.row_end, p.iterations,
             slot_names.empty() ? "none" : fmt::format("{}", fmt::join(slot_names, ", ")));
  if (!p.ids.empty() || !p.waiting.empty())  // a dynamic table's partition
    fmt::print("      {:<10}{} rows by id, {} ids waiting for admission\n", "table", p.ids.size(), p.waiting.size());
  // Labels padded to one width so the statistics line up in columns.
  fmt::print("      {:<10}{}\n", "values", format_stats(stats_of(p.values)));
  for (auto& [name, m] : p.slots) fmt::print("      {:<10}{}\n", "slot " + name, format_stats(stats_of(m)));
  if (values > 0) print_first_values(p.values, values);
}

// Values a variable holds: a dynamic table's rows times its width.
int64_t parameters_of(const md::variable_data& v) {
  if (!v.dynamic) return v.shape.size();
  int64_t n = 0;
  for (auto& p : v.partitions) n += p.values.size();
  return n;
}

void print_variable(const md::variable_data& v, int64_t values) {
  fmt::print("  {}  {}{}  {} parameters  {} partition{}\n", v.name, md::to_string(v.shape),
             v.dynamic ? " dynamic (rows keyed by id)" : "", parameters_of(v), v.partitions.size(),
             v.partitions.size() == 1 ? "" : "s");
  for (size_t k = 0; k < v.partitions.size(); ++k) print_partition(v.partitions[k], k, values);
}

void print_optimizer(const md::checkpoint_data& d) {
  fmt::print("optimizer: {}\n", d.optimizer.empty() ? "(not recorded)" : d.optimizer);
  std::vector<std::string> hp;
  for (auto& [name, value] : d.hyperparams) hp.push_back(fmt::format("{} {:g}", name, value));
  fmt::print("  hyperparameters: {}\n", hp.empty() ? "(none)" : fmt::format("{}", fmt::join(hp, ", ")));
}

// --- run state ----------------------------------------------------------------------

/// A JSON value for a one-line report: strings bare, everything else compact JSON, cut
/// short so a long history or visitation log does not flood the terminal.
std::string compact(const json& j) {
  constexpr size_t limit = 160;
  std::string s = j.is_string() ? j.get<std::string>() : j.dump();
  if (s.size() > limit) s = fmt::format("{}... ({} chars)", s.substr(0, limit), s.size());
  return s;
}

/// "key value" for each of `keys` present in `j`, in that order.
std::vector<std::string> present_fields(const json& j, const std::vector<const char*>& keys) {
  std::vector<std::string> out;
  for (const char* k : keys)
    if (j.contains(k)) out.push_back(fmt::format("{} {}", k, compact(j[k])));
  return out;
}

// The coordinator stores a "pipelines" array (next, epoch_begin, end) and a parallel
// "watermark" array; either may be absent or of another length in a foreign checkpoint.
void print_pipelines(const json& extra) {
  const json none = json::array();
  const json& pipes = extra.contains("pipelines") && extra["pipelines"].is_array() ? extra["pipelines"] : none;
  const json& wm = extra.contains("watermark") && extra["watermark"].is_array() ? extra["watermark"] : none;
  for (size_t i = 0; i < std::max(pipes.size(), wm.size()); ++i) {
    std::vector<std::string> fields;
    if (i < pipes.size() && pipes[i].is_object()) {
      fields = present_fields(pipes[i], {"next", "epoch_begin", "end"});
      for (auto& [k, v] : pipes[i].items())
        if (k != "next" && k != "epoch_begin" && k != "end") fields.push_back(fmt::format("{} {}", k, compact(v)));
    } else if (i < pipes.size()) {
      fields.push_back(compact(pipes[i]));
    }
    if (i < wm.size()) fields.push_back(fmt::format("watermark {}", compact(wm[i])));
    fmt::print("  pipeline {}: {}\n", i, fmt::join(fields, ", "));
  }
}

void print_run_state(const json& extra) {
  if (!extra.is_object() || extra.empty()) {
    fmt::print("run state: none recorded\n");
    return;
  }
  const bool is_run = extra.value("format", json()).is_string() && extra["format"] == "actortrain.run";
  fmt::print("run state{}:\n", is_run ? "" : " (extra, not in actortrain.run format)");
  // The coordinator counts epochs from 0, so "epoch 1 of 1" is a finished one-epoch run.
  auto fields = present_fields(extra, {"run", "epoch", "epochs", "steps_total", "sync_round"});
  for (auto& f : fields)
    if (f.rfind("epoch ", 0) == 0) f += " (from 0)";
  if (!fields.empty()) fmt::print("  {}\n", fmt::join(fields, ", "));
  print_pipelines(extra);
  const std::set<std::string> shown = {"format", "run", "epoch", "epochs", "steps_total", "sync_round",
                                       "pipelines", "watermark", "ledgers"};
  for (auto& [k, v] : extra.items())
    if (!shown.count(k) || (k == "format" && !is_run)) fmt::print("  {}: {}\n", k, compact(v));
}

// --- ledgers ------------------------------------------------------------------------

/// One line per run the partitions' ledgers hold (steps on every partition, segments),
/// and every violation they recorded. A summary: `actortrain ledger check` judges them.
void print_ledgers(const json& extra) {
  if (!extra.is_object() || !extra.contains("ledgers")) return;
  std::vector<actortrain::partition_ledger> ls;
  try {
    for (auto& l : extra.at("ledgers")) {
      actortrain::partition_ledger p;
      p.variable = l.at("variable").get<std::string>();
      p.ledger = actortrain::ledger_from_json(l.at("ledger"));
      ls.push_back(std::move(p));
    }
  } catch (const std::exception& e) {
    fmt::print("ledgers: malformed: {}\n", e.what());
    return;
  }
  fmt::print("ledgers: {} partition(s), {} step(s) applied twice\n", ls.size(), actortrain::applied_twice(ls));
  for (auto run : actortrain::ledger_runs(ls)) {
    uint64_t least = UINT64_MAX, most = 0;
    for (auto& l : ls) {
      auto n = actortrain::step_ledger(l.ledger).steps(run);
      least = std::min(least, n);
      most = std::max(most, n);
    }
    fmt::print("  run {}: {} step(s) on every partition{}\n", run, least,
               least == most ? "" : fmt::format(" (up to {} on some)", most));
  }
}

// The digest of every variable's values, in the manifest's order (the model's). With an
// averaging optimizer (use_ema) a read of the model gets the average, the workers' final
// pull among them: a partition with an "average" slot and an update counts that (the rule
// of optimizer::model_view, here on a checkpoint's slots by name).
uint64_t digest_of(const md::checkpoint_data& d) {
  std::vector<actortrain::model::matrix> all;
  for (auto& v : d.variables) {
    if (!v.dynamic) {
      auto read = v;
      for (auto& p : read.partitions)
        if (auto a = p.slots.find("average"); a != p.slots.end() && p.iterations > 0) p.values = a->second;
      all.push_back(md::assemble_variable(read));
      continue;
    }
    // A dynamic table: its rows in id order, and the ids (as their bits), whatever the
    // number of partitions it was saved in.
    std::vector<std::pair<int64_t, const float*>> rows;
    for (auto& p : v.partitions)
      for (size_t j = 0; j < p.ids.size(); ++j) rows.emplace_back(p.ids[j], p.values.row(static_cast<Eigen::Index>(j)).data());
    std::sort(rows.begin(), rows.end(), [](auto& a, auto& b) { return a.first < b.first; });
    actortrain::model::matrix values(static_cast<Eigen::Index>(rows.size()), v.shape.cols), ids(static_cast<Eigen::Index>(rows.size()), 2);
    for (size_t j = 0; j < rows.size(); ++j) {
      std::copy(rows[j].second, rows[j].second + v.shape.cols, values.row(static_cast<Eigen::Index>(j)).data());
      std::memcpy(ids.row(static_cast<Eigen::Index>(j)).data(), &rows[j].first, sizeof(int64_t));
    }
    all.push_back(std::move(values));
    all.push_back(std::move(ids));
  }
  return md::parameters_digest(all);
}

// --- totals -------------------------------------------------------------------------

struct disk_usage {
  int64_t bytes = 0;
  int64_t files = 0;
};

void add_file_entry(const json& f, disk_usage& u) {
  if (!f.is_object() || !f.contains("bytes") || !f["bytes"].is_number_integer()) return;
  u.bytes += f["bytes"].get<int64_t>();
  ++u.files;
}

// The manifest's recorded sizes (read_checkpoint has checked them against the files)
// plus the manifest itself: the checkpoint's files, not whatever else the directory holds.
disk_usage disk_usage_of(md::file_system& fs, const std::string& dir) {
  disk_usage u;
  const json m = md::read_manifest(fs, dir);
  for (auto& v : m.value("variables", json::array()))
    for (auto& p : v.value("partitions", json::array())) {
      add_file_entry(p.value("file", json()), u);
      const json slots = p.value("slots", json::object());
      for (auto& [_, s] : slots.items()) add_file_entry(s, u);
      for (auto what : {"ids", "last_update", "waiting", "removed"}) add_file_entry(p.value(what, json()), u);
    }
  std::string text;
  if (fs.read_file(md::join_path(dir, "manifest.json"), text).ok()) {
    u.bytes += static_cast<int64_t>(text.size());
    ++u.files;
  }
  return u;
}

std::string human_bytes(int64_t b) {
  if (b < 1024) return fmt::format("{} B", b);
  if (b < 1024 * 1024) return fmt::format("{:.1f} KiB", b / 1024.0);
  return fmt::format("{:.1f} MiB", b / (1024.0 * 1024.0));
}

void print_totals(md::file_system& fs, const md::checkpoint_data& d, const std::string& dir) {
  int64_t params = 0;
  for (auto& v : d.variables) params += parameters_of(v);
  const disk_usage u = disk_usage_of(fs, dir);
  fmt::print("total: {} variable{}, {} parameters, {} bytes on disk ({}) in {} files\n", d.variables.size(),
             d.variables.size() == 1 ? "" : "s", params, u.bytes, human_bytes(u.bytes), u.files);
  // An incremental checkpoint: its files hold what changed since its bases; the
  // variables above are the chain read back whole.
  std::set<int64_t> bases;
  for (auto& v : md::read_manifest(fs, dir).value("variables", json::array()))
    for (auto& p : v.value("partitions", json::array()))
      if (p.contains("base") && p["base"].is_number_integer()) bases.insert(p["base"].get<int64_t>());
  if (!bases.empty())
    fmt::print("incremental: dynamic tables hold the rows changed since step{} {} (read back whole above)\n",
               bases.size() == 1 ? "" : "s", fmt::join(bases, ", "));
}

// --- one checkpoint -----------------------------------------------------------------

/// Reads (validating) before printing anything, so a corrupt checkpoint prints only its error.
void inspect_checkpoint(md::file_system& fs, const std::string& dir, int64_t values, bool digest_only) {
  const md::checkpoint_data d = md::read_checkpoint(fs, dir);
  if (digest_only) {
    fmt::print("{:016x} {}\n", digest_of(d), dir);
    return;
  }
  fmt::print("checkpoint {}\n", dir);
  fmt::print("step {}\n", d.step);
  print_optimizer(d);
  fmt::print("variables:\n");
  for (auto& v : d.variables) print_variable(v, values);
  print_run_state(d.extra);
  print_ledgers(d.extra);
  print_totals(fs, d, dir);
  fmt::print("parameters digest: {:016x}\n", digest_of(d));
}

}  // namespace

int inspect_command(int argc, char** argv, int first) {
  bool help_printed = false;
  const inspect_options o = parse_options(argc, argv, first, help_printed);
  if (help_printed) return 0;
  md::file_system& fs = md::posix_file_system();
  const inspect_targets t = resolve(fs, o);
  if (t.is_root && !o.digest) {
    print_committed_list(fs, t, o.dir);
    fmt::print("\n");
  }
  // With --all one bad checkpoint should not hide the others: report it and go on.
  int failed = 0;
  for (size_t i = 0; i < t.shown.size(); ++i) {
    if (i > 0 && !o.digest) fmt::print("\n");
    try {
      inspect_checkpoint(fs, t.shown[i].path, o.values, o.digest);
    } catch (const md::checkpoint_error& e) {
      std::fflush(stdout);
      fmt::print(stderr, "actortrain: error: {}\n", e.what());  // as run_main prints the others
      ++failed;
    }
  }
  return failed ? 1 : 0;
}

}  // namespace actortrain::tools
