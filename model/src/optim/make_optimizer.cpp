#include <actortrain/model/optim/all.hpp>

#include "call_spec.hpp"
#include "join.hpp"

#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

namespace actortrain::model {

namespace {

constexpr const char* what = "make_optimizer";

/// Bound argument values by hyperparameter name; `get` leaves the default when absent.
class arg_values {
 public:
  explicit arg_values(std::map<std::string, double> values) : values_(std::move(values)) {}

  void get(const char* name, double& out) const {
    if (auto it = values_.find(name); it != values_.end()) out = it->second;
  }

  void get(const char* name, int& out) const {
    auto it = values_.find(name);
    if (it == values_.end()) return;
    if (!(it->second >= 1.0 && it->second <= 1e9 && it->second == static_cast<double>(static_cast<int>(it->second))))
      throw std::invalid_argument(fmt::format("{} must be a whole number >= 1, got {}", name, it->second));
    out = static_cast<int>(it->second);
  }

  void get(const char* name, bool& out) const {
    auto it = values_.find(name);
    if (it == values_.end()) return;
    if (it->second != 0.0 && it->second != 1.0)
      throw std::invalid_argument(fmt::format("{} must be true or false, got {}", name, it->second));
    out = it->second != 0.0;
  }

 private:
  std::map<std::string, double> values_;
};

struct entry {
  const char* name;
  std::function<optimizer_ptr(const arg_values&)> make;
};

const std::vector<entry>& registry() {
  // A function-local table of plain factories (no mutable global state).
  static const std::vector<entry> table{
    {"adagrad",
     [](const arg_values& a) {
       adagrad_options o;
       a.get("learning_rate", o.learning_rate);
       a.get("initial_accumulator_value", o.initial_accumulator_value);
       a.get("epsilon", o.epsilon);
       a.get("use_ema", o.use_ema);
       a.get("ema_momentum", o.ema_momentum);
       a.get("ema_every", o.ema_every);
       return make_adagrad(o);
     }},
    {"adam",
     [](const arg_values& a) {
       adam_options o;
       a.get("learning_rate", o.learning_rate);
       a.get("beta_1", o.beta_1);
       a.get("beta_2", o.beta_2);
       a.get("epsilon", o.epsilon);
       a.get("use_ema", o.use_ema);
       a.get("ema_momentum", o.ema_momentum);
       a.get("ema_every", o.ema_every);
       return make_adam(o);
     }},
    {"rmsprop",
     [](const arg_values& a) {
       rmsprop_options o;
       a.get("learning_rate", o.learning_rate);
       a.get("rho", o.rho);
       a.get("momentum", o.momentum);
       a.get("epsilon", o.epsilon);
       a.get("centered", o.centered);
       a.get("use_ema", o.use_ema);
       a.get("ema_momentum", o.ema_momentum);
       a.get("ema_every", o.ema_every);
       return make_rmsprop(o);
     }},
    {"sgd",
     [](const arg_values& a) {
       sgd_options o;
       a.get("learning_rate", o.learning_rate);
       a.get("momentum", o.momentum);
       a.get("nesterov", o.nesterov);
       a.get("use_ema", o.use_ema);
       a.get("ema_momentum", o.ema_momentum);
       a.get("ema_every", o.ema_every);
       return make_sgd(o);
     }},
  };
  return table;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

std::vector<std::string> optimizer_names() {
  std::vector<std::string> out;
  for (const auto& e : registry()) out.emplace_back(e.name);
  std::sort(out.begin(), out.end());
  return out;
}

optimizer_ptr make_optimizer(const std::string& text) {
  const auto spec = detail::parse_call_spec(text, what);
  const std::string name = lower(spec.name);
  const entry* found = nullptr;
  for (const auto& e : registry())
    if (name == e.name) found = &e;
  if (!found)
    throw std::invalid_argument(fmt::format("{}: unknown optimizer '{}' in '{}' (known: {})", what,
                                            spec.name, text, detail::join(optimizer_names())));
  // A default instance tells the parameter names and their positional order.
  const auto names = found->make(arg_values({}))->hyperparam_names();
  std::map<std::string, double> values;
  for (const auto& [key, token] : detail::bind_args(spec, names, text, what))
    values[key] = detail::parse_value(token, key, text, what);
  try {
    return found->make(arg_values(std::move(values)));
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("{}: bad spec '{}': {}", what, text, e.what()));
  }
}

}  // namespace actortrain::model
