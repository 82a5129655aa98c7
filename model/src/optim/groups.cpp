#include <actortrain/model/model.hpp>
#include <actortrain/model/optim/groups.hpp>

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace actortrain::model {

namespace {

bool names(const std::string& pattern, const std::string& variable) {
  if (!pattern.empty() && pattern.back() == '/') return variable.rfind(pattern, 0) == 0;
  return pattern == variable;
}

bool valid_name(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

}  // namespace

optimizer_set::optimizer_set(const optimizer& fallback, const std::vector<variable_group>& groups)
  : fallback_(fallback.clone()) {
  for (auto& g : groups) {
    if (!valid_name(g.name))
      throw std::invalid_argument(
        fmt::format("variable group '{}': a group's name is letters, digits, '_' and '-' (it prefixes its "
                    "hyperparameters: '{}/learning_rate')",
                    g.name, g.name.empty() ? "NAME" : g.name));
    if (!g.optimizer) throw std::invalid_argument(fmt::format("variable group '{}' has no optimizer", g.name));
    if (g.variables.empty()) throw std::invalid_argument(fmt::format("variable group '{}' names no variable", g.name));
    for (auto& h : groups_)
      if (h.name == g.name) throw std::invalid_argument(fmt::format("variable group '{}' is given twice", g.name));
    groups_.push_back(group{g.name, g.variables, g.optimizer->clone()});
  }
}

optimizer_set::optimizer_set(const optimizer_set& other) : fallback_(other.fallback_->clone()) {
  for (auto& g : other.groups_) groups_.push_back(group{g.name, g.variables, g.opt->clone()});
}

optimizer_set& optimizer_set::operator=(const optimizer_set& other) {
  if (this != &other) {
    optimizer_set copy{other};
    fallback_ = std::move(copy.fallback_);
    groups_ = std::move(copy.groups_);
  }
  return *this;
}

const optimizer_set::group* optimizer_set::find(const std::string& variable) const {
  for (auto& g : groups_)
    for (auto& v : g.variables)
      if (names(v, variable)) return &g;
  return nullptr;
}

const optimizer& optimizer_set::for_variable(const std::string& name) const {
  auto g = find(name);
  return g ? *g->opt : *fallback_;
}

int optimizer_set::index_of(const std::string& name) const {
  auto g = find(name);
  return g ? static_cast<int>(g - groups_.data()) : -1;
}

const optimizer& optimizer_set::at(int index) const {
  if (index == -1) return *fallback_;
  return *groups_.at(static_cast<size_t>(index)).opt;
}

const std::string& optimizer_set::group_of(const std::string& name) const {
  static const std::string none;
  auto g = find(name);
  return g ? g->name : none;
}

const optimizer& optimizer_set::target(const std::string& name, std::string& param) const {
  auto slash = name.find('/');
  if (slash == std::string::npos) {
    param = name;
    return *fallback_;
  }
  auto group = name.substr(0, slash);
  param = name.substr(slash + 1);
  for (auto& g : groups_)
    if (g.name == group) return *g.opt;
  std::vector<std::string> known;
  for (auto& g : groups_) known.push_back(g.name);
  throw std::invalid_argument(fmt::format("hyperparameter '{}': no variable group '{}' ({})", name, group,
                                          known.empty() ? std::string{"there are no groups"}
                                                        : fmt::format("the groups: {}", fmt::join(known, ", "))));
}

void optimizer_set::set_hyperparam(const std::string& name, double value) {
  std::string param;
  // target() finds one of this set's own optimizers: changing it is changing the set.
  const_cast<optimizer&>(target(name, param)).set_hyperparam(param, value);  // checks before it changes anything
}

double optimizer_set::hyperparam(const std::string& name) const {
  std::string param;
  return target(name, param).hyperparam(param);
}

std::vector<std::pair<std::string, double>> optimizer_set::hyperparams() const {
  auto out = fallback_->hyperparams();
  for (auto& g : groups_)
    for (auto& [k, v] : g.opt->hyperparams()) out.emplace_back(g.name + "/" + k, v);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<variable_group> optimizer_set::groups() const {
  std::vector<variable_group> out;
  for (auto& g : groups_) out.push_back(variable_group{g.name, g.variables, g.opt->clone()});
  return out;
}

std::string optimizer_set::describe() const {
  std::string out = fallback_->describe();
  for (auto& g : groups_) out += fmt::format(" + {}: {} [{}]", g.name, g.opt->describe(), fmt::join(g.variables, ", "));
  return out;
}

void check_groups(const model& m, const std::vector<variable_group>& groups) {
  std::map<std::string, std::string> owner;
  for (auto& g : groups)
    for (auto& pattern : g.variables) {
      bool any = false;
      for (auto& v : m.variables()) {
        if (!names(pattern, v.name)) continue;
        any = true;
        auto [it, fresh] = owner.emplace(v.name, g.name);
        if (!fresh && it->second != g.name)
          throw std::invalid_argument(
            fmt::format("variable {} is in two groups: '{}' and '{}'", v.name, it->second, g.name));
      }
      if (!any) {
        std::vector<std::string> have;
        for (auto& v : m.variables()) have.push_back(v.name);
        throw std::invalid_argument(fmt::format("variable group '{}': '{}' names no variable of the model ({})", g.name,
                                                pattern, fmt::join(have, ", ")));
      }
    }
}

}  // namespace actortrain::model
