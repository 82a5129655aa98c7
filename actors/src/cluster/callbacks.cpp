#include <actortrain/actors/cluster/callbacks.hpp>
#include <actortrain/actors/cluster/cluster.hpp>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

namespace actortrain {

namespace {

class csv_logger_impl : public callback {
 public:
  explicit csv_logger_impl(std::string path) : path_(std::move(path)) {}

  void on_train_begin(cluster&) override {
    std::ifstream in(path_);
    bool fresh = !in || in.peek() == std::ifstream::traits_type::eof();
    if (!fresh) {
      std::string header;
      std::getline(in, header);
      columns_.clear();
      for (size_t at = header.find(',') == std::string::npos ? header.size() : header.find(',') + 1; at < header.size();) {
        auto end = header.find(',', at);
        if (end == std::string::npos) end = header.size();
        columns_.push_back(header.substr(at, end - at));
        at = end + 1;
      }
    }
    have_header_ = !fresh;
    out_.open(path_, std::ios::app);
    if (!out_) throw std::runtime_error(fmt::format("csv_logger: cannot write {}: {}", path_, std::strerror(errno)));
  }

  void on_epoch_end(cluster&, int64_t epoch, const std::map<std::string, double>& logs) override {
    if (!have_header_) {
      for (auto& [k, v] : logs) columns_.push_back(k);
      out_ << "epoch";
      for (auto& c : columns_) out_ << ',' << c;
      out_ << '\n';
      have_header_ = true;
    }
    out_ << epoch;
    for (auto& c : columns_) {
      out_ << ',';
      if (auto i = logs.find(c); i != logs.end()) out_ << fmt::format("{:.9g}", i->second);
    }
    out_ << '\n' << std::flush;
  }

 private:
  std::string path_;
  std::ofstream out_;
  std::vector<std::string> columns_;
  bool have_header_ = false;
};

class schedule_impl : public callback {
 public:
  explicit schedule_impl(std::function<double(int64_t)> f) : f_(std::move(f)) {}
  bool waits_for_epoch_end() const override { return true; }  // every step of an epoch at its rate
  void on_epoch_begin(cluster& c, int64_t epoch) override {
    auto lr = f_(epoch);
    if (!(lr > 0) || !std::isfinite(lr))
      throw std::invalid_argument(fmt::format("learning_rate_schedule: epoch {} gives learning rate {}", epoch, lr));
    c.set_hyperparams_async({{"learning_rate", lr}});  // applied before the epoch's steps reach the shards
  }

 private:
  std::function<double(int64_t)> f_;
};

// Whether a higher `monitor` is better under `mode` ("min", "max", "auto").
bool higher_is_better(const char* who, const std::string& mode, const std::string& monitor) {
  if (mode == "max") return true;
  if (mode == "min") return false;
  if (mode == "auto") return monitor.find("acc") != std::string::npos;
  throw std::invalid_argument(fmt::format("{}: mode '{}' (min, max or auto)", who, mode));
}

double monitored(const char* who, const std::string& monitor, int64_t epoch, const std::map<std::string, double>& logs) {
  auto i = logs.find(monitor);
  if (i != logs.end()) return i->second;
  std::string keys;
  for (auto& [k, v] : logs) keys += (keys.empty() ? "" : ", ") + k;
  throw std::runtime_error(fmt::format("{}: no '{}' in the logs of epoch {} ({}){}", who, monitor, epoch + 1, keys,
                                       monitor.rfind("val_", 0) == 0 ? ": give fit validation data, or monitor another" : ""));
}

}  // namespace

early_stopping::early_stopping(early_stopping_options o) : o_(std::move(o)) {
  if (o_.monitor.empty()) throw std::invalid_argument("early_stopping: empty monitor");
  if (o_.patience < 0) throw std::invalid_argument(fmt::format("early_stopping: patience = {} < 0", o_.patience));
  if (!(o_.min_delta >= 0)) throw std::invalid_argument(fmt::format("early_stopping: min_delta = {} < 0", o_.min_delta));
  higher_ = higher_is_better("early_stopping", o_.mode, o_.monitor);
}

void early_stopping::on_train_begin(cluster& c) {
  best_epoch_ = stopped_epoch_ = -1;
  if (o_.restore_best) c.restore_kept_state_at_end();
}

// An epoch at or before the best one ends again when a ps restore rolled the run back
// past it (and dropped the kept state): it is the best again, as it now is.
void early_stopping::on_epoch_end(cluster& c, int64_t epoch, const std::map<std::string, double>& logs) {
  double v = monitored("early_stopping", o_.monitor, epoch, logs);
  bool better = best_epoch_ < 0 || epoch <= best_epoch_ ||
                (higher_ ? v - o_.min_delta > best_ : v + o_.min_delta < best_);
  if (better) {
    best_ = v;
    best_epoch_ = epoch;
    if (o_.restore_best) c.keep_state();
    return;
  }
  if (epoch - best_epoch_ >= std::max<int64_t>(1, o_.patience)) {  // Keras: `patience` epochs without improvement
    stopped_epoch_ = epoch;
    c.stop_training();
  }
}

model_checkpoint::model_checkpoint(model_checkpoint_options o) : o_(std::move(o)) {
  if (o_.dir.empty()) throw std::invalid_argument("model_checkpoint: empty dir");
  if (o_.every_steps < 0) throw std::invalid_argument(fmt::format("model_checkpoint: every_steps = {} < 0", o_.every_steps));
  if (o_.every_steps == 0 && o_.monitor.empty())
    throw std::invalid_argument("model_checkpoint: neither every_steps nor monitor: it would never write");
  if (o_.keep < 1) throw std::invalid_argument(fmt::format("model_checkpoint: keep = {} < 1", o_.keep));
  higher_ = higher_is_better("model_checkpoint", o_.mode, o_.monitor);
}

void model_checkpoint::on_train_begin(cluster& c) {
  if (c.spec().checkpoint_dir == o_.dir)
    throw std::invalid_argument(fmt::format("model_checkpoint: {} is the cluster's checkpoint_dir; use another", o_.dir));
  next_due_ = o_.every_steps;
  have_best_ = false;
}

// By the run's step count, not by the events seen: a step event may be dropped.
void model_checkpoint::on_step_end(cluster& c, const step_info& s) {
  if (o_.every_steps <= 0 || s.step < next_due_) return;
  next_due_ = (s.step / o_.every_steps + 1) * o_.every_steps;
  c.checkpoint_async(o_.dir, o_.keep);  // a failed write ends the run: join reports it
  ++asked_;
}

void model_checkpoint::on_epoch_end(cluster& c, int64_t epoch, const std::map<std::string, double>& logs) {
  if (o_.monitor.empty()) return;
  double v = monitored("model_checkpoint", o_.monitor, epoch, logs);
  bool redone = !best_epochs_.empty() && epoch <= best_epochs_.back();  // rolled back past the best
  if (have_best_ && !redone && !(higher_ ? v > best_ : v < best_)) return;
  have_best_ = true;
  best_ = v;
  best_epochs_.push_back(epoch);
  c.checkpoint_async(o_.dir, o_.keep);
  ++asked_;
}

callback_ptr csv_logger(std::string path) {
  if (path.empty()) throw std::invalid_argument("csv_logger: empty path");
  return std::make_shared<csv_logger_impl>(std::move(path));
}

callback_ptr learning_rate_schedule(std::function<double(int64_t)> schedule) {
  if (!schedule) throw std::invalid_argument("learning_rate_schedule: no schedule");
  return std::make_shared<schedule_impl>(std::move(schedule));
}

std::function<double(int64_t)> step_decay(double initial, double drop, int64_t every) {
  if (!(initial > 0) || !(drop > 0) || every < 1)
    throw std::invalid_argument(fmt::format("step_decay({}, {}, {}): need initial > 0, drop > 0, every >= 1", initial, drop, every));
  return [=](int64_t e) { return initial * std::pow(drop, static_cast<double>(e / every)); };
}

std::function<double(int64_t)> exponential_decay(double initial, double rate) {
  if (!(initial > 0) || !(rate > 0))
    throw std::invalid_argument(fmt::format("exponential_decay({}, {}): need initial > 0, rate > 0", initial, rate));
  return [=](int64_t e) { return initial * std::pow(rate, static_cast<double>(e)); };
}

std::function<double(int64_t)> cosine_decay(double initial, int64_t epochs, double minimum) {
  if (!(initial > 0) || epochs < 1 || !(minimum >= 0) || minimum >= initial)
    throw std::invalid_argument(fmt::format("cosine_decay({}, {}, {}): need initial > minimum >= 0, epochs >= 1", initial,
                                            epochs, minimum));
  return [=](int64_t e) {
    double t = static_cast<double>(std::min(e, epochs)) / static_cast<double>(epochs);
    return minimum + (initial - minimum) * (1 + std::cos(M_PI * t)) / 2;
  };
}

}  // namespace actortrain
