#include <actortrain/model/callbacks.hpp>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <algorithm>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

namespace actortrain::model {

namespace {

class csv_logger_impl : public callback {
 public:
  explicit csv_logger_impl(std::string path) : path_(std::move(path)) {}

  bool wants_batch_begin() const override { return false; }

  void on_train_end(training&, bool) override { out_.close(); }

  void on_train_begin(training&) override {
    if (out_.is_open()) out_.close();  // a logger used again by another fit
    out_.clear();
    columns_.clear();
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

  void on_epoch_end(training&, int64_t epoch, const logs& l) override {
    if (!have_header_) {
      for (auto& [k, v] : l) columns_.push_back(k);
      out_ << "epoch";
      for (auto& c : columns_) out_ << ',' << c;
      out_ << '\n';
      have_header_ = true;
    }
    out_ << epoch;
    for (auto& c : columns_) {
      out_ << ',';
      if (auto i = l.find(c); i != l.end()) out_ << fmt::format("{:.9g}", i->second);
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
  bool wants_batch_begin() const override { return false; }
  bool waits_for_epoch_end() const override { return true; }  // every step of an epoch at its rate
  void on_epoch_begin(training& t, int64_t epoch) override {
    auto lr = f_(epoch);
    if (!(lr > 0) || !std::isfinite(lr))
      throw std::invalid_argument(fmt::format("learning_rate_schedule: epoch {} gives learning rate {}", epoch, lr));
    t.set_hyperparams({{"learning_rate", lr}});  // a cluster's: before the epoch's steps reach the shards
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

// The monitored value of an epoch, or none when the epoch did not validate (a val_*
// monitor, validation data given, no val_* key in its logs: validation_freq skipped it).
std::optional<double> monitored(const char* who, const std::string& monitor, int64_t epoch, const logs& l,
                                const training& t) {
  auto i = l.find(monitor);
  if (i != l.end()) return i->second;
  if (monitor.rfind("val_", 0) == 0 && t.has_validation() &&
      std::none_of(l.begin(), l.end(), [](const auto& kv) { return kv.first.rfind("val_", 0) == 0; }))
    return std::nullopt;
  std::string keys;
  for (auto& [k, v] : l) keys += (keys.empty() ? "" : ", ") + k;
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

void early_stopping::on_train_begin(training& t) {
  best_epoch_ = stopped_epoch_ = -1;
  if (o_.restore_best) t.restore_kept_state_at_end();
}

// An epoch at or before the best one ends again when a ps restore rolled the run back
// past it (and dropped the kept state): it is the best again, as it now is.
void early_stopping::on_epoch_end(training& t, int64_t epoch, const logs& l) {
  auto seen = monitored("early_stopping", o_.monitor, epoch, l, t);
  if (!seen) return;
  double v = *seen;
  bool better = best_epoch_ < 0 || epoch <= best_epoch_ ||
                (higher_ ? v - o_.min_delta > best_ : v + o_.min_delta < best_);
  if (better) {
    best_ = v;
    best_epoch_ = epoch;
    if (o_.restore_best) t.keep_state();
    return;
  }
  if (epoch - best_epoch_ >= std::max<int64_t>(1, o_.patience)) {  // Keras: `patience` epochs without improvement
    stopped_epoch_ = epoch;
    t.stop_training();
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

void model_checkpoint::on_train_begin(training& t) {
  if (t.own_checkpoint_dir() == o_.dir)
    throw std::invalid_argument(fmt::format("model_checkpoint: {} is the training's own checkpoint directory (checkpoint_dir); use another", o_.dir));
  next_due_ = o_.every_steps;
  have_best_ = false;
}

// By the run's step count, not by the events seen: a step event may be dropped.
void model_checkpoint::on_train_batch_end(training& t, const step_info& s) {
  if (o_.every_steps <= 0 || s.step < next_due_) return;
  next_due_ = (s.step / o_.every_steps + 1) * o_.every_steps;
  t.save_checkpoint(o_.dir, o_.keep);  // a cluster's failed write ends its run: join reports it
  ++asked_;
}

void model_checkpoint::on_epoch_end(training& t, int64_t epoch, const logs& l) {
  if (o_.monitor.empty()) return;
  auto seen = monitored("model_checkpoint", o_.monitor, epoch, l, t);
  if (!seen) return;
  double v = *seen;
  bool redone = !best_epochs_.empty() && epoch <= best_epochs_.back();  // rolled back past the best
  if (have_best_ && !redone && !(higher_ ? v > best_ : v < best_)) return;
  have_best_ = true;
  best_ = v;
  best_epochs_.push_back(epoch);
  t.save_checkpoint(o_.dir, o_.keep);
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

reduce_lr_on_plateau::reduce_lr_on_plateau(reduce_lr_options o) : o_(std::move(o)) {
  if (o_.monitor.empty()) throw std::invalid_argument("reduce_lr_on_plateau: empty monitor");
  if (!(o_.factor > 0 && o_.factor < 1))
    throw std::invalid_argument(fmt::format("reduce_lr_on_plateau: factor = {} (it must lie in (0, 1))", o_.factor));
  if (o_.patience < 0) throw std::invalid_argument(fmt::format("reduce_lr_on_plateau: patience = {} < 0", o_.patience));
  if (o_.cooldown < 0) throw std::invalid_argument(fmt::format("reduce_lr_on_plateau: cooldown = {} < 0", o_.cooldown));
  if (!(o_.min_delta >= 0)) throw std::invalid_argument(fmt::format("reduce_lr_on_plateau: min_delta = {} < 0", o_.min_delta));
  if (!(o_.min_lr >= 0)) throw std::invalid_argument(fmt::format("reduce_lr_on_plateau: min_lr = {} < 0", o_.min_lr));
  higher_ = higher_is_better("reduce_lr_on_plateau", o_.mode, o_.monitor);
}

void reduce_lr_on_plateau::on_train_begin(training& t) {
  auto hp = t.hyperparams();
  if (!hp.count("learning_rate"))
    throw std::invalid_argument("reduce_lr_on_plateau: the optimizer has no learning_rate");
  have_best_ = false;
  wait_ = cooldown_left_ = 0;
}

// Keras's order: a cooldown epoch resets the count; an improvement resets it; otherwise,
// outside a cooldown, it grows, and at `patience` the rate drops.
void reduce_lr_on_plateau::on_epoch_end(training& t, int64_t epoch, const logs& l) {
  auto seen = monitored("reduce_lr_on_plateau", o_.monitor, epoch, l, t);
  if (!seen) return;
  double v = *seen;
  if (cooldown_left_ > 0) {
    --cooldown_left_;
    wait_ = 0;
  }
  bool better = !have_best_ || (higher_ ? v > best_ + o_.min_delta : v < best_ - o_.min_delta);
  if (better) {
    best_ = v;
    have_best_ = true;
    wait_ = 0;
    return;
  }
  if (cooldown_left_ > 0) return;
  if (++wait_ < std::max<int64_t>(1, o_.patience)) return;
  double lr = t.hyperparams().at("learning_rate");
  if (lr <= o_.min_lr) return;  // Keras: the count goes on, nothing left to lower
  wait_ = 0;
  double next = std::max(lr * o_.factor, o_.min_lr);
  t.set_hyperparams({{"learning_rate", next}});
  reduced_after_.push_back(epoch);
  rates_.push_back(next);
  cooldown_left_ = o_.cooldown;
}

void terminate_on_nan::on_train_batch_end(training& t, const step_info& s) {
  if (std::isfinite(s.loss) || at_ >= 0) return;
  at_ = s.step;
  t.stop_training();
}

namespace {

class lambda_impl : public callback {
 public:
  explicit lambda_impl(lambda_hooks h) : h_(std::move(h)) {}
  bool waits_for_epoch_end() const override { return h_.waits_for_epoch_end; }
  bool wants_batch_begin() const override { return static_cast<bool>(h_.on_train_batch_begin); }
  void on_train_begin(training& t) override {
    if (h_.on_train_begin) h_.on_train_begin(t);
  }
  void on_train_end(training& t, bool failed) override {
    if (h_.on_train_end) h_.on_train_end(t, failed);
  }
  void on_epoch_begin(training& t, int64_t e) override {
    if (h_.on_epoch_begin) h_.on_epoch_begin(t, e);
  }
  void on_epoch_end(training& t, int64_t e, const logs& l) override {
    if (h_.on_epoch_end) h_.on_epoch_end(t, e, l);
  }
  void on_train_batch_begin(training& t, int64_t e, int64_t s) override {
    if (h_.on_train_batch_begin) h_.on_train_batch_begin(t, e, s);
  }
  void on_train_batch_end(training& t, const step_info& s) override {
    if (h_.on_train_batch_end) h_.on_train_batch_end(t, s);
  }

 private:
  lambda_hooks h_;
};

}  // namespace

callback_ptr lambda_callback(lambda_hooks hooks) { return std::make_shared<lambda_impl>(std::move(hooks)); }

}  // namespace actortrain::model
