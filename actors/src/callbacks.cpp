#include <actortrain/actors/callbacks.hpp>
#include <actortrain/actors/cluster.hpp>

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
  void on_epoch_begin(cluster& c, int64_t epoch) override {
    auto lr = f_(epoch);
    if (!(lr > 0) || !std::isfinite(lr))
      throw std::invalid_argument(fmt::format("learning_rate_schedule: epoch {} gives learning rate {}", epoch, lr));
    c.set_hyperparams_async({{"learning_rate", lr}});  // applied before the epoch's steps reach the shards
  }

 private:
  std::function<double(int64_t)> f_;
};

}  // namespace

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
