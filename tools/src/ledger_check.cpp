// actortrain ledger check: reads what the ps shards applied — the ledgers `actortrain
// node --ledger` writes as a ps task stops (launch puts them in DIR/ledgers/), or the
// ledgers a checkpoint's manifest keeps — and judges them against the example's own
// data definition with check_ledgers (ledger.hpp): every step applied exactly once on
// every partition, every position of every pipeline with the batch the data defines
// there, and (for a run that completed) every position of its epochs. It also checks
// that the ledgers cover every row of every variable of the model, so a forgotten ps
// task's file is not a silent pass. Nothing the coordinator says enters the verdict.

#include "ledger_check.hpp"

#include "flags.hpp"
#include <actortrain/actors/jobs/jobs.hpp>
#include <actortrain/actors/net/process.hpp>

#include <actortrain/actors/net/cluster_file.hpp>
#include <actortrain/actors/cluster/job.hpp>
#include <actortrain/actors/ps/ledger.hpp>
#include <actortrain/actors/net/process.hpp>
#include <actortrain/model/checkpoint/checkpoint.hpp>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <tuple>

namespace actortrain::tools {
namespace {

namespace md = actortrain::model;
using nlohmann::json;

const char* summary =
  "Checks exactly-once from what the ps shards applied. LEDGER is a file `actortrain node\n"
  "--ledger FILE` wrote (a ps task writes one as it stops), a directory of them\n"
  "(`actortrain launch` puts them in DIR/ledgers/), or a checkpoint directory or root\n"
  "(its manifest keeps the ledgers of the state it saved). The ledgers are judged\n"
  "against the example's own data (built from the flags after --, as the job ran it)\n"
  "and the cluster's shape (--cluster FILE, TF_CONFIG, or --workers): each step applied\n"
  "exactly once on every partition, with the batch the data defines at its position;\n"
  "for a completed run every position of its epochs applied; and every row of every\n"
  "variable covered by exactly one ledger. Exit status 0 exactly once, 1 a violation\n"
  "(each printed), 2 bad flags or unreadable input.";

struct input_error : usage_error {
  using usage_error::usage_error;
};

bool is_directory(const std::string& p) {
  struct stat st{};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool exists(const std::string& p) {
  struct stat st{};
  return ::stat(p.c_str(), &st) == 0;
}

std::vector<partition_ledger> read_ledger_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw input_error(fmt::format("{}: cannot read it: {}", path, std::strerror(errno)));
  std::stringstream text;
  text << in.rdbuf();
  json j;
  try {
    j = json::parse(text.str());
  } catch (const json::exception& e) {
    throw input_error(fmt::format("{}: not JSON: {}", path, e.what()));
  }
  try {
    return ledgers_from_json(j);
  } catch (const std::exception& e) {
    throw input_error(fmt::format("{}: {}", path, e.what()));
  }
}

// A checkpoint's manifest keeps its partitions' ledgers in "extra": "ledgers".
std::vector<partition_ledger> read_checkpoint_ledgers(const std::string& dir) {
  json m;
  try {
    m = md::read_manifest(md::posix_file_system(), dir);
  } catch (const std::exception& e) {
    throw input_error(e.what());
  }
  const json extra = m.value("extra", json::object());
  if (!extra.is_object() || !extra.contains("ledgers"))
    throw input_error(fmt::format("{}: its manifest keeps no ledgers (a checkpoint of an older version, or not "
                                  "written by a cluster)",
                                  dir));
  try {
    std::vector<partition_ledger> out;
    for (auto& l : extra.at("ledgers")) {
      partition_ledger p;
      p.shard = no_shard;
      p.variable = l.at("variable").get<std::string>();
      p.row_begin = l.at("row_begin").get<int64_t>();
      p.row_end = l.at("row_end").get<int64_t>();
      p.ledger = ledger_from_json(l.at("ledger"));
      out.push_back(std::move(p));
    }
    return out;
  } catch (const std::exception& e) {
    throw input_error(fmt::format("{}/manifest.json: extra.ledgers: {}", dir, e.what()));
  }
}

// What one LEDGER argument names: (where each partition came from, the partitions).
std::vector<std::pair<std::string, std::vector<partition_ledger>>> read_source(const std::string& arg) {
  if (!exists(arg)) throw input_error(fmt::format("{}: no such file or directory", arg));
  if (!is_directory(arg)) return {{arg, read_ledger_file(arg)}};
  if (exists(arg + "/manifest.json")) return {{arg, read_checkpoint_ledgers(arg)}};
  auto newest = md::latest_checkpoint(md::posix_file_system(), arg);
  if (newest) return {{newest->path, read_checkpoint_ledgers(newest->path)}};
  std::vector<std::string> files;
  if (DIR* d = ::opendir(arg.c_str())) {
    while (auto* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0) files.push_back(arg + "/" + name);
    }
    ::closedir(d);
  }
  if (files.empty())
    throw input_error(fmt::format("{}: a directory with neither ledger files (*.json) nor a checkpoint", arg));
  std::sort(files.begin(), files.end());
  std::vector<std::pair<std::string, std::vector<partition_ledger>>> out;
  for (auto& f : files) out.emplace_back(f, read_ledger_file(f));
  return out;
}

cluster_spec shape_of(const job& j, const std::string& cluster_file, int workers,
                      const std::optional<consistency_mode>& consistency) {
  cluster_def def;
  if (!cluster_file.empty()) {
    if (workers > 0) throw usage_error("give --cluster FILE or --workers N, not both");
    def = read_cluster_file(cluster_file);
  } else if (workers > 0) {
    cluster_spec spec = j.spec;
    spec.num_workers = workers;
    if (consistency) spec.consistency = *consistency;
    return spec;
  } else if (const char* tf = std::getenv("TF_CONFIG"); tf && *tf) {
    def = parse_cluster_def(tf, "TF_CONFIG", {}, cluster_dialect::tf_config);
  } else {
    throw usage_error("which cluster? --cluster FILE (launch writes DIR/cluster.json), TF_CONFIG, or --workers N");
  }
  if (consistency) def.consistency = *consistency;
  return node_spec(j, def);
}

}  // namespace

int ledger_command(int argc, char** argv, int first) {
  std::string what = first < argc ? argv[first] : "";
  if (what == "-h" || what == "--help") {
    std::cout << "usage: actortrain ledger check --example NAME [flags] LEDGER... [-- EXAMPLE FLAGS]\n\n"
              << summary << "\n";
    return 0;
  }
  if (what != "check")
    throw usage_error(what.empty() ? "ledger: which command? (actortrain ledger check ...)"
                                   : fmt::format("ledger: unknown command '{}' (check)", what));
  int dashes = argc;
  for (int i = first + 1; i < argc; ++i)
    if (std::string(argv[i]) == "--") {
      dashes = i;
      break;
    }
  std::vector<std::string> example_args(argv + std::min(argc, dashes + 1), argv + argc);
  std::string example, cluster_file;
  std::optional<consistency_mode> consistency;
  int workers = 0;
  uint64_t run = 0;
  bool incomplete = false;
  flags f{"actortrain ledger check --example NAME [flags] LEDGER... [-- EXAMPLE FLAGS]", summary};
  f.add("example", example, "the example the job ran (" + jobs::registered_names() + ")")
    .add("cluster", cluster_file, "the cluster definition the job ran on (its workers, ps tasks and consistency)")
    .add("workers", workers, "instead of --cluster: the job's worker count (0: take it from --cluster)",
         range<int>{0, 256})
    .add_parsed("consistency", "the example's",
                "the consistency the job ran with, when the cluster does not say: async, bounded_staleness(s) or sync",
                [&consistency](const std::string& v) { consistency = consistency_mode::parse(v); })
    .add("run", run, "the run to check (0: the newest the ledgers hold; earlier runs are listed, not checked)")
    .add("incomplete", incomplete, "the run failed or was stopped: check that what was applied is a valid prefix "
         "(no step twice, every batch the right one), not that every position was");
  if (!f.parse(dashes, argv, first + 1)) return 0;
  if (f.positional().empty()) throw usage_error("ledger check: which ledgers? (files, a directory or a checkpoint)");
  job j;
  if (!jobs::make_job(example, example_args, j)) return 0;
  cluster_spec spec;
  try {
    spec = shape_of(j, cluster_file, workers, consistency);
  } catch (const cluster_file_error& e) {
    throw usage_error(e.what());
  }

  // Every partition once, from whichever source gave it.
  std::vector<partition_ledger> ledgers;
  std::map<std::tuple<std::string, int64_t, int64_t>, std::string> from;
  for (auto& arg : f.positional())
    for (auto& [source, parts] : read_source(arg))
      for (auto& p : parts) {
        auto key = std::make_tuple(p.variable, p.row_begin, p.row_end);
        auto [it, fresh] = from.emplace(key, source);
        if (!fresh)
          throw input_error(fmt::format("{} rows [{}:{}) is in both {} and {}: give each partition's ledger once",
                                        p.variable, p.row_begin, p.row_end, it->second, source));
        ledgers.push_back(p);
      }

  std::vector<std::string> violations = check_coverage(ledgers, ledger_variables(j, spec.num_ps));
  const auto runs = ledger_runs(ledgers);
  if (runs.empty()) violations.push_back("the ledgers hold no applied step at all");
  const uint64_t checked = run != 0 ? run : runs.empty() ? 0 : *runs.rbegin();
  if (run != 0 && !runs.count(run)) violations.push_back(fmt::format("the ledgers hold no step of run {}", run));
  ledger_verdict verdict;
  if (checked != 0) {
    auto lr = ledger_run_of(j, spec, checked, !incomplete);
    verdict = check_ledgers(ledgers, {lr}, /*other_runs=*/true);
    violations.insert(violations.end(), verdict.violations.begin(), verdict.violations.end());
    for (auto r : runs)
      if (r != checked)
        fmt::print("run {}: {} step(s) on every partition (another run: not checked; --run {} checks it)\n", r,
                   steps_on_every_partition(ledgers, r), r);
    const auto steps = verdict.steps.count(checked) ? verdict.steps.at(checked) : 0;
    fmt::print("run {} of {} ({} pipeline(s), {}, {} epoch(s){}): {} step(s) on every one of {} partition(s)\n",
               checked, j.name.empty() ? example : j.name, lr.num_pipelines, spec.consistency.to_string(), lr.epochs,
               lr.steps_per_epoch > 0 ? fmt::format(" of {} steps", lr.steps_per_epoch) : "", steps, ledgers.size());
  }
  const size_t shown = std::min<size_t>(violations.size(), 50);
  for (size_t i = 0; i < shown; ++i) fmt::print("violation: {}\n", violations[i]);
  if (shown < violations.size()) fmt::print("violation: ... and {} more\n", violations.size() - shown);
  if (!violations.empty()) {
    fmt::print("ledger check: {} violation(s)\n", violations.size());
    return 1;
  }
  fmt::print("ledger check: exactly once: every step applied once on every partition, each with the batch the data "
             "defines at its position{}\n",
             incomplete ? " (a prefix of the run)" : ", every position of the run's epochs applied");
  return 0;
}

}  // namespace actortrain::tools
