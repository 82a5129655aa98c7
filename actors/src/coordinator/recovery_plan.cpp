// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// The recovery planner's decisions (recovery_plan.hpp): which recovery, which
// checkpoint and run state, what when none serves, which epochs.
#include "recovery_plan.hpp"

#include <exception>

#include <fmt/format.h>

namespace actortrain {

recovery_kind recovery_for(const recovery_view& v) {
  if (v.resuming) return recovery_kind::resume;  // a shard was lost before the resumed run had its state
  if (v.stage == run_stage::between_runs)
    return v.has_checkpoints ? recovery_kind::restore_values : recovery_kind::wait_for_fit;
  if (!v.run_start_committed) return recovery_kind::start_state;
  return recovery_kind::roll_back;
}

bool loss_ends_run(const recovery_view& v) {
  return v.stage != run_stage::between_runs && !v.has_checkpoints && v.steps_total > 0;
}

std::optional<nlohmann::json> state_for(const nlohmann::json& extra, restore_kind kind, uint64_t run) {
  auto starts = extra.contains("run_starts") ? extra.at("run_starts") : nlohmann::json::array();
  switch (kind) {
    case restore_kind::values:
      return extra;
    case restore_kind::newest:
      return starts.empty() ? extra : starts.back();
    case restore_kind::this_run:
      if (extra.contains("run") && extra.at("run").get<uint64_t>() == run) return extra;
      for (auto& s : starts)
        if (s.contains("run") && s.at("run").get<uint64_t>() == run) return s;
      return std::nullopt;
  }
  return std::nullopt;
}

std::optional<restore_source> pick_checkpoint(model::file_system& fs, const std::string& dir,
                                              const model::placement& placement, restore_kind kind, uint64_t run,
                                              std::vector<std::string>& skipped) {
  auto all = model::list_checkpoints(fs, dir);
  auto extra_of = [&fs](const std::string& path) {
    auto manifest = model::read_manifest(fs, path);
    return manifest.contains("extra") ? manifest.at("extra") : nlohmann::json::object();
  };
  // Resuming continues the newest run the directory holds: its own checkpoints only (a
  // fallback past a corrupt one must not land in an earlier run).
  if (kind == restore_kind::newest && !all.empty()) {
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
      try {
        auto state = state_for(extra_of(it->path), restore_kind::newest, 0);
        if (state && state->contains("run")) {
          run = state->at("run").get<uint64_t>();
          kind = restore_kind::this_run;
          break;
        }
      } catch (const std::exception&) {
        // Its manifest does not parse: the next one says which run is newest.
      }
    }
  }
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    std::optional<nlohmann::json> state;
    try {
      state = state_for(extra_of(it->path), kind, run);
    } catch (const std::exception& e) {
      skipped.push_back(fmt::format("{}: {}", it->path, e.what()));
      continue;
    }
    if (!state) continue;
    try {
      restore_source out;
      out.data = model::repartition(model::read_checkpoint(fs, it->path), placement);
      out.path = it->path;
      out.state = std::move(*state);
      return out;
    } catch (const std::exception& e) {
      skipped.push_back(fmt::format("{}: {}", it->path, e.what()));
    }
  }
  return std::nullopt;
}

restore_plan plan_restore(model::file_system& fs, const std::string& dir, const model::placement& placement,
                          restore_kind kind, uint64_t run, run_stage stage) {
  restore_plan plan;
  try {
    plan.source = pick_checkpoint(fs, dir, placement, kind, run, plan.skipped);
  } catch (const std::exception& ex) {
    plan.problem = ex.what();
  }
  if (plan.source) return plan;
  if (plan.problem.empty())
    plan.problem = plan.skipped.empty()
                     ? fmt::format("no committed checkpoint under {}{}", dir,
                                   kind == restore_kind::this_run ? fmt::format(" of run {}", run) : std::string{})
                     : fmt::format("no checkpoint under {} validates: {}", dir, fmt::join(plan.skipped, "; "));
  if (stage == run_stage::between_runs)
    plan.none = when_none::wait_for_fit;  // the next fit restores or initializes them
  else if (kind == restore_kind::values && stage == run_stage::starting)
    plan.none = when_none::initial_values;  // the run has applied nothing: it starts from the initial values
  else
    plan.none = when_none::fail_run;
  return plan;
}

std::vector<std::pair<std::string, double>> hyperparams_of(const nlohmann::json& state) {
  std::vector<std::pair<std::string, double>> out;
  if (state.contains("hyperparams"))
    for (auto& [k, v] : state.at("hyperparams").items()) out.emplace_back(k, v.get<double>());
  return out;
}

fences_seen fences_seen::before_restore(const nlohmann::json& state, bool takeover) {
  fences_seen out;
  if (takeover && state.contains("coordinator_epoch"))
    out.newest_.coordinator_epoch = state.at("coordinator_epoch").get<uint64_t>();
  return out;
}

void fences_seen::add(const fence& seen, const std::vector<std::pair<uint32_t, uint64_t>>& worker_fences) {
  if (epochs_older(newest_, seen)) {
    newest_.coordinator_epoch = seen.coordinator_epoch;
    newest_.recovery_epoch = seen.recovery_epoch;
  }
  for (auto& [w, g] : worker_fences) generations_[w] = std::max(generations_[w], g);
}

uint64_t fences_seen::generation(uint32_t worker) const {
  auto it = generations_.find(worker);
  return it != generations_.end() ? it->second : 0;
}

fence epochs_after_restore(const fence& own, const fences_seen& seen, bool takeover) {
  fence out;
  const auto& newest = seen.newest();
  if (takeover) {
    out.coordinator_epoch = std::max(own.coordinator_epoch, newest.coordinator_epoch + 1);
    out.recovery_epoch = 0;
    return out;
  }
  out.coordinator_epoch = own.coordinator_epoch;
  auto base = newest.coordinator_epoch == own.coordinator_epoch ? newest.recovery_epoch : 0;
  out.recovery_epoch = std::max(own.recovery_epoch, base) + 1;
  return out;
}

bool can_mark_start(bool clean_since_commit, int64_t last_committed, uint64_t steps_total,
                    const std::string& restore_dir, const std::string& checkpoint_dir) {
  return clean_since_commit && last_committed == static_cast<int64_t>(steps_total) && !restore_dir.empty() &&
         restore_dir == checkpoint_dir;
}

}  // namespace actortrain
