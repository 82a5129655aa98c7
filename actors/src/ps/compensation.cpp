// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// Staleness compensation: its text form (ps/compensation.hpp) and one partition's
// mechanics (compensator.hpp).
#include "compensator.hpp"

#include <actortrain/actors/ps/compensation.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

namespace actortrain {

namespace {

constexpr double max_horizon = 8;
constexpr size_t kept_versions = 16;  // dc_asgd: documented in compensation.hpp
constexpr size_t max_view_buffers = 4;  // lookahead: views kept for reuse

// The number between "name(" and ")", in [lo, hi].
double argument(const std::string& text, const std::string& name, double lo, double hi, const char* example) {
  auto arg = text.substr(name.size() + 1, text.size() - name.size() - 2);
  char* end = nullptr;
  double v = arg.empty() ? NAN : std::strtod(arg.c_str(), &end);
  if (arg.empty() || end != arg.c_str() + arg.size() || !std::isfinite(v) || v < lo || v > hi)
    throw std::invalid_argument(
      fmt::format("compensation '{}': the argument must be a number in [{}, {}], as in {}", text, lo, hi, example));
  return v;
}

bool call_of(const std::string& text, const std::string& name) {
  return text.size() > name.size() + 1 && text.compare(0, name.size() + 1, name + "(") == 0 && text.back() == ')';
}

}  // namespace

staleness_compensation staleness_compensation::parse(const std::string& text) {
  if (text == "none") return none();
  if (text == "lookahead") return lookahead();
  if (text == "staleness_lr") return staleness_lr();
  if (call_of(text, "lookahead")) {
    double k = argument(text, "lookahead", 0, max_horizon, "lookahead(1)");
    if (k == 0)
      throw std::invalid_argument(fmt::format(
        "compensation '{}': k must be > 0 (\"lookahead\" measures it; \"none\" turns compensation off)", text));
    return lookahead(k);
  }
  if (call_of(text, "dc_asgd")) {
    double lambda = argument(text, "dc_asgd", 0, 1e6, "dc_asgd(0.04)");
    if (lambda == 0) throw std::invalid_argument(fmt::format("compensation '{}': lambda must be > 0 (or: none)", text));
    return dc_asgd(lambda);
  }
  throw std::invalid_argument(fmt::format(
    "unknown compensation '{}' (none, lookahead, lookahead(k), staleness_lr or dc_asgd(lambda))", text));
}

std::string staleness_compensation::to_string() const {
  switch (kind_) {
    case kind::none: return "none";
    case kind::lookahead: return parameter_ == 0 ? "lookahead" : fmt::format("lookahead({})", parameter_);
    case kind::staleness_lr: return "staleness_lr";
    case kind::dc_asgd: return fmt::format("dc_asgd({})", parameter_);
  }
  return "none";
}

// -- compensator ------------------------------------------------------------------------

using kind = staleness_compensation::kind;

const float* compensator::before(const model::matrix& w, uint64_t version, uint64_t read_version,
                                 const model::matrix& g, double& lr_scale) {
  lr_scale = 1.0;
  const uint64_t lag = version >= read_version ? version - read_version : 0;
  switch (how_.mode()) {
    case kind::none: break;
    case kind::lookahead:
      // The mean over about the last 64 applies.
      ++lags_seen_;
      mean_lag_ += (static_cast<double>(lag) - mean_lag_) / static_cast<double>(std::min<uint64_t>(lags_seen_, 64));
      break;
    case kind::staleness_lr:
      if (lag > 1) lr_scale = 1.0 / static_cast<double>(lag);
      break;
    case kind::dc_asgd: {
      if (lag == 0) break;
      auto read = std::find_if(kept_.begin(), kept_.end(), [&](const auto& k) { return k.first == read_version; });
      if (read == kept_.end() || read->second.rows() != w.rows() || read->second.cols() != w.cols()) {
        ++uncompensated_;
        break;
      }
      const auto lambda = static_cast<float>(how_.parameter());
      corrected_ = g;
      corrected_.array() += lambda * g.array() * g.array() * (w.array() - read->second.array());
      return corrected_.data();
    }
  }
  return g.data();
}

void compensator::after(const model::matrix& w, uint64_t version) {
  if (how_.mode() == kind::lookahead) {
    // The apply wrote the view of this version (ahead()), or there was none to write.
    if (pending_) {
      view_ = std::move(pending_);
      view_version_ = version;
    } else {
      view_.reset();
    }
  } else if (how_.mode() == kind::dc_asgd) {
    if (kept_.size() < kept_versions) {
      kept_.emplace_back(version, w);
    } else {  // reuses the oldest version's buffer
      auto oldest = std::move(kept_.front());
      kept_.pop_front();
      oldest.first = version;
      oldest.second = w;
      kept_.push_back(std::move(oldest));
    }
  }
}

double compensator::horizon() const {
  if (how_.mode() != kind::lookahead) return 0;
  return how_.parameter() > 0 ? how_.parameter() : std::min(mean_lag_, max_horizon);
}

float* compensator::ahead(const model::matrix& w) {
  pending_.reset();
  view_.reset();  // of the version this apply ends; the replies that hold it keep it
  if (how_.mode() != kind::lookahead || horizon() == 0) return nullptr;
  // A buffer no reply holds any more (embedded workers hold theirs while they compute),
  // else a new one: views are as big as the partition, and allocating one per version
  // costs page faults on every step.
  for (auto& b : view_buffers_)
    if (b.use_count() == 1 && b->rows() == w.rows() && b->cols() == w.cols()) {
      pending_ = b;
      break;
    }
  if (!pending_) {
    pending_ = std::make_shared<model::matrix>(w.rows(), w.cols());
    if (view_buffers_.size() < max_view_buffers) view_buffers_.push_back(pending_);
  }
  return pending_->data();
}

std::shared_ptr<const model::matrix> compensator::view(const std::shared_ptr<model::matrix>& w, uint64_t version) {
  if (view_ && view_version_ == version) return view_;
  return w;
}

void compensator::reset(const model::matrix& w, uint64_t version) {
  view_.reset();
  pending_.reset();
  view_buffers_.clear();
  kept_.clear();
  if (how_.mode() == kind::dc_asgd) kept_.emplace_back(version, w);
}

}  // namespace actortrain
