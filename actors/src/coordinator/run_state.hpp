#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// The run state a checkpoint keeps in its manifest's "extra" (format "actortrain.run"):
// where each input pipeline is, the run's counters, the epoch's running means, the
// history and the visits, the epochs that fence the shards, the kept epoch and the
// optimizer's hyperparameters at that step. The coordinator writes one at every
// checkpoint and reads one back on a roll-back or a resume; the codec is plain values,
// tested alone (tests/actors/run_state_test.cpp).

#include <actortrain/actors/core/step_id.hpp>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace actortrain {

struct run_state {
  uint64_t run = 0;
  int32_t epoch = 0;
  int32_t epochs = 1;
  int64_t steps_per_epoch = 0;
  int64_t applied_epoch = 0, dispatched_epoch = 0;
  uint64_t applied_run = 0, dispatched_run = 0, steps_total = 0;
  size_t round_robin = 0;
  uint64_t sync_round = 1;
  bool ran_out = false;
  struct pipeline {
    uint64_t next = 0;
    uint64_t epoch_begin = 0;
    uint64_t end = UINT64_MAX;  ///< first position known past the data (UINT64_MAX: none)
  };
  std::vector<pipeline> pipelines;
  std::vector<uint64_t> watermark;
  /// The epoch's running means: the loss sum, the examples, each metric's state.
  double loss_sum = 0;
  int64_t examples = 0;
  std::vector<std::pair<std::string, std::vector<double>>> metrics;
  std::map<std::string, std::vector<double>> history;
  bool visitation_log = false;
  std::vector<visit> visits;
  uint64_t coordinator_epoch = 0, recovery_epoch = 0;
  int64_t kept_epoch = -1;
  std::string kept_checkpoint;
  std::optional<std::vector<std::pair<std::string, double>>> hyperparams;
  /// A run of scheduled steps (grant_queue.hpp): the tickets open at this point and the
  /// tickets granted so far.
  bool scheduled = false;
  uint64_t loop = 0;  ///< its run_spec::on_demand
  std::vector<uint64_t> open_tickets;
  uint64_t granted = 0;
};

/// The manifest's form of `s`.
nlohmann::json to_json(const run_state& s);

/// Reads a run state for a fit with `pipelines` input pipelines, `steps_per_epoch` and
/// `epochs`: throws std::runtime_error when it is not a run state or belongs to another
/// shape of run (naming what differs), nlohmann::json::exception naming a missing or
/// mistyped field.
run_state run_state_from(const nlohmann::json& j, size_t pipelines, int64_t steps_per_epoch, int32_t epochs);

}  // namespace actortrain
