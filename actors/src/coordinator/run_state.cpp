// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
#include "run_state.hpp"

#include <stdexcept>

#include <fmt/format.h>

namespace actortrain {

nlohmann::json to_json(const run_state& s) {
  nlohmann::json j;
  j["format"] = "actortrain.run";
  j["run"] = s.run;
  j["epoch"] = s.epoch;
  j["epochs"] = s.epochs;
  j["steps_per_epoch"] = s.steps_per_epoch;
  j["applied_epoch"] = s.applied_epoch;
  j["dispatched_epoch"] = s.dispatched_epoch;
  j["applied_run"] = s.applied_run;
  j["dispatched_run"] = s.dispatched_run;
  j["steps_total"] = s.steps_total;
  j["round_robin"] = s.round_robin;
  j["sync_round"] = s.sync_round;
  j["ran_out"] = s.ran_out;
  auto pipes = nlohmann::json::array();
  for (auto& p : s.pipelines) {
    nlohmann::json q;
    q["next"] = p.next;
    q["epoch_begin"] = p.epoch_begin;
    q["end"] = p.end == UINT64_MAX ? nlohmann::json(nullptr) : nlohmann::json(p.end);
    pipes.push_back(q);
  }
  j["pipelines"] = pipes;
  j["watermark"] = s.watermark;
  nlohmann::json acc;
  acc["loss_sum"] = s.loss_sum;
  acc["examples"] = s.examples;
  auto ms = nlohmann::json::array();
  for (auto& [name, state] : s.metrics) ms.push_back({{"name", name}, {"state", state}});
  acc["metrics"] = ms;
  j["epoch_accumulator"] = acc;
  j["history"] = s.history;
  j["visitation_log"] = s.visitation_log;
  if (s.visitation_log) {
    auto v = nlohmann::json::array();
    for (auto& x : s.visits) v.push_back({x.run, x.pipeline, x.position, x.worker, x.generation});
    j["visits"] = v;
  }
  j["coordinator_epoch"] = s.coordinator_epoch;
  j["recovery_epoch"] = s.recovery_epoch;
  j["kept_epoch"] = s.kept_epoch;
  j["kept_checkpoint"] = s.kept_checkpoint;
  // What the shards' optimizers run with at this point (a schedule's rate): a restore
  // sets it again, so the steps redone after it use what they used the first time.
  if (s.hyperparams) {
    auto hp = nlohmann::json::object();
    for (auto& [k, v] : *s.hyperparams) hp[k] = v;
    j["hyperparams"] = hp;
  }
  if (s.scheduled) j["scheduled"] = {{"loop", s.loop}, {"open", s.open_tickets}, {"granted", s.granted}};
  return j;
}

run_state run_state_from(const nlohmann::json& j, size_t pipelines, int64_t steps_per_epoch, int32_t epochs) {
  if (!j.is_object() || j.value("format", std::string{}) != "actortrain.run")
    throw std::runtime_error("the manifest's extra holds no run state (format is not actortrain.run)");
  run_state s;
  auto& pipes = j.at("pipelines");
  if (pipes.size() != pipelines)
    throw std::runtime_error(
      fmt::format("the checkpoint's run has {} input pipelines, this one {}", pipes.size(), pipelines));
  s.steps_per_epoch = j.at("steps_per_epoch").get<int64_t>();
  if (s.steps_per_epoch != steps_per_epoch)
    throw std::runtime_error(fmt::format("the checkpoint's run has steps_per_epoch = {}, this one {}",
                                         s.steps_per_epoch, steps_per_epoch));
  s.epoch = j.at("epoch").get<int32_t>();
  if (s.epoch >= epochs)
    throw std::runtime_error(
      fmt::format("the checkpoint is in epoch {} (from 0), this fit has only {} epochs", s.epoch, epochs));
  s.epochs = j.value("epochs", epochs);
  s.run = j.at("run").get<uint64_t>();
  s.applied_epoch = j.at("applied_epoch").get<int64_t>();
  s.dispatched_epoch = j.at("dispatched_epoch").get<int64_t>();
  s.applied_run = j.at("applied_run").get<uint64_t>();
  s.dispatched_run = j.at("dispatched_run").get<uint64_t>();
  s.steps_total = j.at("steps_total").get<uint64_t>();
  s.round_robin = j.at("round_robin").get<size_t>();
  s.sync_round = j.value("sync_round", uint64_t{1});
  s.ran_out = j.at("ran_out").get<bool>();
  for (auto& p : pipes) {
    run_state::pipeline q;
    q.next = p.at("next").get<uint64_t>();
    q.epoch_begin = p.at("epoch_begin").get<uint64_t>();
    q.end = p.at("end").is_null() ? UINT64_MAX : p.at("end").get<uint64_t>();
    s.pipelines.push_back(q);
  }
  if (j.contains("watermark")) s.watermark = j.at("watermark").get<std::vector<uint64_t>>();
  auto& acc = j.at("epoch_accumulator");
  s.loss_sum = acc.at("loss_sum").get<double>();
  s.examples = acc.at("examples").get<int64_t>();
  for (auto& m : acc.at("metrics"))
    s.metrics.emplace_back(m.at("name").get<std::string>(), m.at("state").get<std::vector<double>>());
  s.history = j.at("history").get<std::map<std::string, std::vector<double>>>();
  s.visitation_log = j.value("visitation_log", false);
  if (j.contains("visits"))
    for (auto& v : j.at("visits"))
      s.visits.push_back(visit{v.at(0).get<uint64_t>(), v.at(1).get<uint32_t>(), v.at(2).get<uint64_t>(),
                               v.at(3).get<uint32_t>(), v.at(4).get<uint64_t>()});
  s.coordinator_epoch = j.value("coordinator_epoch", uint64_t{0});
  s.recovery_epoch = j.value("recovery_epoch", uint64_t{0});
  s.kept_epoch = j.value("kept_epoch", int64_t{-1});
  s.kept_checkpoint = j.value("kept_checkpoint", std::string{});
  if (j.contains("hyperparams")) {
    std::vector<std::pair<std::string, double>> hp;
    for (auto& [k, v] : j.at("hyperparams").items()) hp.emplace_back(k, v.get<double>());
    s.hyperparams = std::move(hp);
  }
  if (j.contains("scheduled")) {
    s.scheduled = true;
    s.open_tickets = j.at("scheduled").at("open").get<std::vector<uint64_t>>();
    s.granted = j.at("scheduled").at("granted").get<uint64_t>();
    s.loop = j.at("scheduled").at("loop").get<uint64_t>();
  }
  return s;
}

}  // namespace actortrain
