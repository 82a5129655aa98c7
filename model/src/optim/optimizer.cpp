#include <actortrain/model/optim/optimizer.hpp>

#include "join.hpp"
#include "kernel.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

namespace actortrain::model {

optimizer::optimizer(std::string name, std::vector<std::string> slot_names)
  : name_(std::move(name)), slot_names_(std::move(slot_names)) {
}

std::string optimizer::describe() const {
  std::string out = name_ + "(";
  bool first = true;
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& p = params_[i];
    // Without averaging its settings are left out, and ema_every when it is 1: the text
    // is the one from before they existed (checkpoint manifests and job descriptions
    // compare it).
    if (average_slot_ < 0 && (p.name == "use_ema" || p.name == "ema_momentum" || p.name == "ema_every")) continue;
    if (p.name == "ema_every" && p.value == 1.0) continue;
    if (!first) out += ", ";
    first = false;
    if (p.range == value_range::flag)
      out += fmt::format("{}={}", p.name, p.value != 0.0 ? "true" : "false");
    else
      out += fmt::format("{}={}", p.name, p.value);
  }
  return out + ")";
}

slot_block optimizer::make_slots(size_t n, const float* values) const {
  slot_block s;
  s.slots.reserve(slot_names_.size());
  for (size_t k = 0; k < slot_names_.size(); ++k)
    if (static_cast<int>(k) == average_slot_ && values)
      s.slots.emplace_back(values, values + n);
    else
      s.slots.emplace_back(n, static_cast<int>(k) == average_slot_ ? 0.0f : initial_slot_value(k));
  return s;
}

void optimizer::declare_average(bool use_ema, double ema_momentum, double ema_every) {
  declare("use_ema", use_ema ? 1.0 : 0.0, value_range::flag, true);
  ema_momentum_ = declare("ema_momentum", ema_momentum, value_range::unit_open);
  ema_every_ = declare("ema_every", ema_every, value_range::count);
  if (use_ema) {
    average_slot_ = static_cast<int>(slot_names_.size());
    slot_names_.emplace_back("average");
  }
}

optimizer::average_step optimizer::average(const slot_block& s) const {
  if (average_slot_ < 0) return {};
  if (s.iterations <= 1) return {average_slot_, 0.0f};
  const auto every = static_cast<int64_t>(hp(ema_every_));
  if ((s.iterations - 1) % every != 0) return {};
  return {average_slot_, static_cast<float>(std::pow(hp(ema_momentum_), static_cast<double>(every)))};
}

float optimizer::initial_slot_value(size_t) const {
  return 0.0f;
}

std::string optimizer::check_change(size_t, double) const {
  return {};
}

void optimizer::check_scale(double lr_scale) const {
  if (!(lr_scale > 0.0 && lr_scale <= 1.0))
    throw std::invalid_argument(fmt::format("{}: learning-rate scale {} is not in (0, 1]", name_, lr_scale));
}

void optimizer::check_dense(const char* call, size_t n, const slot_block& s, double lr_scale) const {
  check_scale(lr_scale);
  if (s.slots.size() != slot_names_.size())
    throw std::invalid_argument(fmt::format("{}: {} with {} slots, expected {}", name_, call, s.slots.size(),
                                            slot_names_.size()));
  for (size_t k = 0; k < s.slots.size(); ++k)
    if (s.slots[k].size() != n)
      throw std::invalid_argument(fmt::format("{}: {} over {} values but slot '{}' has {}", name_, call, n,
                                              slot_names_[k], s.slots[k].size()));
}

void optimizer::apply_dense(float* values, const float* grads, size_t n, slot_block& s,
                            double lr_scale) const {
  check_dense("apply_dense", n, s, lr_scale);
  ++s.iterations;
  update_dense(values, grads, n, s, lr_scale);
}

void optimizer::apply_dense_ahead(float* values, const float* grads, size_t n, slot_block& s, double lr_scale,
                                  float k, float* ahead) const {
  check_dense("apply_dense_ahead", n, s, lr_scale);
  if (!std::isfinite(k)) throw std::invalid_argument(fmt::format("{}: apply_dense_ahead with k = {}", name_, k));
  ++s.iterations;
  update_dense_ahead(values, grads, n, s, lr_scale, k, ahead);
}

void optimizer::update_dense_ahead(float* values, const float* grads, size_t n, slot_block& s, double lr_scale,
                                   float k, float* ahead) const {
  std::vector<float> old(values, values + n);
  update_dense(values, grads, n, s, lr_scale);
  detail::extrapolate(values, old.data(), n, k, ahead);
}

void optimizer::apply_rows(float* values, size_t row_width, const int64_t* rows, size_t num_rows,
                           const float* grad_rows, slot_block& s, double lr_scale) const {
  if (average_slot_ >= 0)
    throw std::invalid_argument(fmt::format(
      "{}: use_ema averages dense blocks only, and this is an update of rows (an embedding pulled by id or a table "
      "keyed by id): give such variables an optimizer without use_ema",
      name_));
  check_scale(lr_scale);
  if (row_width == 0)
    throw std::invalid_argument(fmt::format("{}: apply_rows with row_width 0", name_));
  if (s.slots.size() != slot_names_.size())
    throw std::invalid_argument(fmt::format("{}: apply_rows with {} slots, expected {}", name_,
                                            s.slots.size(), slot_names_.size()));
  // With slots the block size is known: every slot must hold whole rows of the same block.
  int64_t block_rows = -1;
  for (size_t k = 0; k < s.slots.size(); ++k) {
    const size_t size = s.slots[k].size();
    if (size % row_width != 0 || size != s.slots[0].size())
      throw std::invalid_argument(
        fmt::format("{}: slot '{}' has {} values, not a block of rows of width {}", name_,
                    slot_names_[k], size, row_width));
    block_rows = static_cast<int64_t>(size / row_width);
  }
  bool increasing = true;
  for (size_t j = 0; j < num_rows; ++j) {
    const int64_t r = rows[j];
    if (r < 0 || (block_rows >= 0 && r >= block_rows))
      throw std::out_of_range(fmt::format("{}: row {} outside the block of {} rows", name_, r,
                                          block_rows >= 0 ? fmt::format("{}", block_rows)
                                                          : std::string("(unknown)")));
    if (j > 0 && r <= rows[j - 1]) increasing = false;
  }
  ++s.iterations;
  if (increasing) {
    update_rows(values, row_width, rows, num_rows, grad_rows, s, lr_scale);
    return;
  }
  // Repeated or unsorted rows: merge duplicates by summing their gradients, in row order.
  std::vector<size_t> order(num_rows);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [rows](size_t a, size_t b) { return rows[a] < rows[b]; });
  std::vector<int64_t> uniq;
  std::vector<float> merged;
  uniq.reserve(num_rows);
  merged.reserve(num_rows * row_width);
  for (size_t j : order) {
    const float* g = grad_rows + j * row_width;
    if (uniq.empty() || uniq.back() != rows[j]) {
      uniq.push_back(rows[j]);
      merged.insert(merged.end(), g, g + row_width);
    } else {
      float* acc = merged.data() + (uniq.size() - 1) * row_width;
      for (size_t c = 0; c < row_width; ++c) acc[c] += g[c];
    }
  }
  update_rows(values, row_width, uniq.data(), uniq.size(), merged.data(), s, lr_scale);
}

size_t optimizer::declare(std::string name, double value, value_range range, bool fixed) {
  param p{std::move(name), value, range, fixed};
  if (auto err = range_error(p, value); !err.empty()) throw std::invalid_argument(err);
  params_.push_back(std::move(p));
  return params_.size() - 1;
}

const optimizer::param* optimizer::find(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

std::string optimizer::known_names() const {
  auto names = hyperparam_names();
  std::sort(names.begin(), names.end());
  return detail::join(names);
}

std::string optimizer::range_error(const param& p, double v) const {
  const char* want = nullptr;
  switch (p.range) {
    case value_range::non_negative:
      if (!(std::isfinite(v) && v >= 0.0)) want = ">= 0";
      break;
    case value_range::positive:
      if (!(std::isfinite(v) && v > 0.0)) want = "> 0";
      break;
    case value_range::unit_open:
      if (!(v >= 0.0 && v < 1.0)) want = "in [0, 1)";
      break;
    case value_range::unit_closed:
      if (!(v >= 0.0 && v <= 1.0)) want = "in [0, 1]";
      break;
    case value_range::flag:
      if (!(v == 0.0 || v == 1.0)) want = "0 or 1 (false or true)";
      break;
    case value_range::count:
      if (!(v >= 1.0 && v <= 1e9 && v == std::floor(v))) want = "a whole number >= 1";
      break;
  }
  if (!want) return {};
  return fmt::format("{}: {} must be {}, got {}", name_, p.name, want, v);
}

void optimizer::set_hyperparam(const std::string& name, double value) {
  const param* p = find(name);
  if (!p)
    throw std::invalid_argument(fmt::format("{}: unknown hyperparameter '{}' (known: {})", name_,
                                            name, known_names()));
  if (auto err = range_error(*p, value); !err.empty()) throw std::invalid_argument(err);
  if (p->fixed && value != p->value)
    throw std::invalid_argument(
      fmt::format("{}: {} is fixed at construction (it decides the slots), cannot change {} -> {}",
                  name_, name, p->value, value));
  const auto index = static_cast<size_t>(p - params_.data());
  if (auto err = check_change(index, value); !err.empty())
    throw std::invalid_argument(fmt::format("{}: {}", name_, err));
  params_[index].value = value;
}

double optimizer::hyperparam(const std::string& name) const {
  if (const param* p = find(name)) return p->value;
  throw std::invalid_argument(fmt::format("{}: unknown hyperparameter '{}' (known: {})", name_,
                                          name, known_names()));
}

std::vector<std::pair<std::string, double>> optimizer::hyperparams() const {
  std::vector<std::pair<std::string, double>> out;
  out.reserve(params_.size());
  for (const auto& p : params_) out.emplace_back(p.name, p.value);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> optimizer::hyperparam_names() const {
  std::vector<std::string> out;
  out.reserve(params_.size());
  for (const auto& p : params_) out.push_back(p.name);
  return out;
}

}  // namespace actortrain::model
