// The run state a checkpoint keeps, alone (actors/src/coordinator/run_state.hpp): it
// comes back as it was written, and a manifest of another run's shape, or a damaged one,
// is refused naming what differs or which field is wrong, before anything is taken.

#include <boost/test/unit_test.hpp>

#include "../../actors/src/coordinator/run_state.hpp"

#include <string>

namespace at = actortrain;

namespace {

at::run_state sample() {
  at::run_state s;
  s.run = 3;
  s.epoch = 1;
  s.epochs = 4;
  s.steps_per_epoch = 0;
  s.applied_epoch = 17;
  s.dispatched_epoch = 19;
  s.applied_run = 57;
  s.dispatched_run = 59;
  s.steps_total = 120;
  s.round_robin = 2;
  s.sync_round = 9;
  s.ran_out = false;
  s.pipelines = {{20, 12, UINT64_MAX}, {21, 12, 24}};
  s.watermark = {18, 21};
  s.loss_sum = 12.5;
  s.examples = 340;
  s.metrics = {{"accuracy", {301, 340}}};
  s.history = {{"loss", {0.9}}, {"accuracy", {0.6}}};
  s.visitation_log = true;
  s.visits = {{3, 0, 12, 1, 2}, {3, 1, 12, 0, 1}};
  s.coordinator_epoch = 2;
  s.recovery_epoch = 5;
  s.kept_epoch = 0;
  s.kept_checkpoint = "/ck/kept/ckpt-000000000040";
  s.hyperparams = std::vector<std::pair<std::string, double>>{{"learning_rate", 0.01}};
  return s;
}

std::string refusal(const nlohmann::json& j, size_t pipelines = 2, int64_t spe = 0, int32_t epochs = 4) {
  try {
    at::run_state_from(j, pipelines, spe, epochs);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_run_state_comes_back_as_written) {
  auto s = sample();
  auto j = at::to_json(s);
  BOOST_TEST(j.at("format") == "actortrain.run");
  BOOST_TEST(j.at("pipelines").at(0).at("end").is_null());  // no end known
  auto r = at::run_state_from(nlohmann::json::parse(j.dump()), 2, 0, 4);
  BOOST_TEST(r.run == s.run);
  BOOST_TEST(r.epoch == s.epoch);
  BOOST_TEST(r.applied_epoch == s.applied_epoch);
  BOOST_TEST(r.dispatched_run == s.dispatched_run);
  BOOST_TEST(r.steps_total == s.steps_total);
  BOOST_TEST(r.round_robin == s.round_robin);
  BOOST_TEST(r.sync_round == s.sync_round);
  BOOST_TEST(r.pipelines[0].end == UINT64_MAX);
  BOOST_TEST(r.pipelines[1].end == 24u);
  BOOST_TEST(r.pipelines[1].next == 21u);
  BOOST_TEST(r.watermark == s.watermark);
  BOOST_TEST(r.loss_sum == s.loss_sum);
  BOOST_TEST(r.metrics.at(0).first == "accuracy");
  BOOST_TEST(r.metrics.at(0).second == s.metrics[0].second);
  BOOST_TEST((r.history == s.history));
  BOOST_TEST(r.visits.size() == 2u);
  BOOST_TEST(r.visits[1].pipeline == 1u);
  BOOST_TEST(r.visits[0].generation == 2u);
  BOOST_TEST(r.recovery_epoch == 5u);
  BOOST_TEST(r.kept_checkpoint == s.kept_checkpoint);
  BOOST_REQUIRE(r.hyperparams);
  BOOST_TEST(r.hyperparams->at(0).second == 0.01);
  BOOST_TEST(at::to_json(r) == j);  // and writes the same manifest again
}

BOOST_AUTO_TEST_CASE(without_a_visitation_log_no_visits_are_written) {
  auto s = sample();
  s.visitation_log = false;
  auto j = at::to_json(s);
  BOOST_TEST(!j.contains("visits"));
  BOOST_TEST(at::run_state_from(j, 2, 0, 4).visits.empty());
}

BOOST_AUTO_TEST_CASE(another_runs_shape_is_refused_naming_what_differs) {
  auto j = at::to_json(sample());
  BOOST_TEST(refusal(j, 3) == "the checkpoint's run has 2 input pipelines, this one 3");
  BOOST_TEST(refusal(j, 2, 50) == "the checkpoint's run has steps_per_epoch = 0, this one 50");
  // Issue 16's defect 1: a fit of 1 epoch asked to roll back into epoch 1 of another run.
  BOOST_TEST(refusal(j, 2, 0, 1) == "the checkpoint is in epoch 1 (from 0), this fit has only 1 epochs");
  BOOST_TEST(refusal(nlohmann::json::object()) ==
             "the manifest's extra holds no run state (format is not actortrain.run)");
  BOOST_TEST(refusal(nlohmann::json::array()) ==
             "the manifest's extra holds no run state (format is not actortrain.run)");
}

BOOST_AUTO_TEST_CASE(a_missing_or_mistyped_field_is_named) {
  for (std::string field : {"applied_run", "round_robin", "history", "epoch_accumulator"}) {
    auto j = at::to_json(sample());
    j.erase(field);
    auto e = refusal(j);
    BOOST_TEST(e.find(field) != std::string::npos, field << ": " << e);
  }
  auto j = at::to_json(sample());
  j["steps_total"] = "many";
  BOOST_TEST(!refusal(j).empty());
  j = at::to_json(sample());
  j["pipelines"][1].erase("epoch_begin");
  BOOST_TEST(refusal(j).find("epoch_begin") != std::string::npos);
}
