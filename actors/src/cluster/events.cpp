// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
#include <actortrain/actors/cluster/events.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <ostream>
#include <random>

namespace actortrain {

const char* to_string(event_kind k) {
  switch (k) {
    case event_kind::run_begin: return "run_begin";
    case event_kind::epoch_begin: return "epoch_begin";
    case event_kind::step_done: return "step";
    case event_kind::step_begun: return "step_begun";
    case event_kind::epoch_done: return "epoch";
    case event_kind::worker_joined: return "worker_joined";
    case event_kind::worker_lost: return "worker_lost";
    case event_kind::steps_requeued: return "steps_requeued";
    case event_kind::dataset_lost: return "dataset_lost";
    case event_kind::dataset_rebuilt: return "dataset_rebuilt";
    case event_kind::checkpoint_done: return "checkpoint";
    case event_kind::ps_lost: return "ps_lost";
    case event_kind::ps_restored: return "ps_restored";
    case event_kind::resumed: return "resumed";
    case event_kind::evaluation_done: return "evaluation";
    case event_kind::warning: return "warning";
    case event_kind::run_done: return "run_done";
    case event_kind::step_no_data: return "step_no_data";
    case event_kind::eval_batch_begun: return "eval_batch_begun";
    case event_kind::eval_batch_done: return "eval_batch_done";
  }
  return "unknown";
}

void event_queue::push(event e) {
  bool wake = true;
  {
    std::lock_guard<std::mutex> lock{mtx_};
    // A scheduled step's result is what its handle waits for: never dropped.
    if ((e.kind == event_kind::step_done && e.ticket == 0) || e.kind == event_kind::step_begun ||
        e.kind == event_kind::eval_batch_begun || e.kind == event_kind::eval_batch_done) {
      if (q_.size() >= capacity_) {
        if (e.kind == event_kind::step_done) ++dropped_;  // (a begun step's hook is simply missed)
        return;
      }
      // Steps come by the thousand per second: the consumer picks them up when its wait
      // ends, and is woken early only to keep the queue from filling.
      wake = q_.size() + 1 >= capacity_ / 2;
    }
    q_.push_back(std::move(e));
  }
  if (wake) cv_.notify_one();
}

std::optional<event> event_queue::pop(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock{mtx_};
  if (q_.empty() && wait.count() > 0) cv_.wait_for(lock, wait, [this] { return !q_.empty(); });
  if (q_.empty()) return std::nullopt;
  auto e = std::move(q_.front());
  q_.pop_front();
  return e;
}

uint64_t event_queue::dropped() const {
  std::lock_guard<std::mutex> lock{mtx_};
  return dropped_;
}

size_t event_queue::size() const {
  std::lock_guard<std::mutex> lock{mtx_};
  return q_.size();
}

namespace {

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

metrics_writer::metrics_writer(std::ostream& out) : out_(out) {
  std::random_device rd;
  nonce_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

const std::string& metrics_writer::id_of(uint64_t run) {
  if (run != id_run_ || id_.empty()) {  // made once per run, not on every step's line
    id_run_ = run;
    id_ = fmt::format("{:016x}-{}", nonce_, run);
  }
  return id_;
}

void metrics_writer::write_done(uint64_t run, bool failed, const std::string& text,
                                const std::map<std::string, double>& values) {
  nlohmann::json j;
  j["event"] = to_string(event_kind::run_done);
  j["run"] = run;
  j["id"] = id_of(run);
  j["time"] = last_seconds_;
  j["wall"] = wall_seconds();
  j["failed"] = failed;
  if (!values.empty()) j["values"] = values;
  if (!text.empty()) j["text"] = text;
  out_ << j.dump() << '\n';
  out_.flush();
}

void metrics_writer::write(const event& e) {
  if (e.kind == event_kind::step_begun || e.kind == event_kind::eval_batch_begun ||
      e.kind == event_kind::eval_batch_done)
    return;  // a callback's hook, not a measurement
  nlohmann::json j;
  j["event"] = to_string(e.kind);
  j["run"] = e.run;
  j["id"] = id_of(e.run);
  j["time"] = e.seconds;
  j["wall"] = wall_seconds();
  last_seconds_ = e.kind == event_kind::run_begin ? e.seconds : std::max(last_seconds_, e.seconds);
  switch (e.kind) {
    case event_kind::step_done:
      j["epoch"] = e.epoch;
      j["pipeline"] = e.pipeline;
      j["position"] = e.position;
      j["worker"] = e.worker;
      j["loss"] = e.loss;
      j["examples"] = e.examples;
      j["staleness"] = e.staleness;
      if (e.round > 0) j["round"] = e.round;
      if (e.ticket > 0) j["ticket"] = e.ticket;
      j["us"] = {{"batch", e.batch_us}, {"pull", e.pull_us}, {"compute", e.compute_us}, {"push", e.push_us}};
      break;
    case event_kind::epoch_begin:
    case event_kind::epoch_done:
    case event_kind::evaluation_done:
      j["epoch"] = e.epoch;
      break;
    case event_kind::worker_joined:
    case event_kind::worker_lost:
      j["worker"] = e.worker;
      j["generation"] = e.generation;
      break;
    case event_kind::steps_requeued:
      j["worker"] = e.worker;
      j["count"] = e.count;
      break;
    case event_kind::dataset_lost:
    case event_kind::dataset_rebuilt:
      j["pipeline"] = e.pipeline;
      break;
    case event_kind::checkpoint_done:
    case event_kind::ps_restored:
    case event_kind::resumed:
      j["step"] = e.count;
      break;
    case event_kind::ps_lost:
      j["ps"] = e.count;
      break;
    case event_kind::step_no_data:
      j["ticket"] = e.ticket;
      j["pipeline"] = e.pipeline;
      break;
    case event_kind::run_done:
      j["failed"] = e.failed;
      break;
    default:
      break;
  }
  if (!e.values.empty()) j["values"] = e.values;
  if (!e.text.empty()) j["text"] = e.text;
  out_ << j.dump() << '\n';
  out_.flush();
}

}  // namespace actortrain
