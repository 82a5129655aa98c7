#pragma once
// Variables that form groups with optimizers of their own — the wide-and-deep pattern:
// Adagrad for a wide (linear, sparse) part, Adam for the deep part, as TensorFlow
// Addons' MultiOptimizer or a DNNLinearCombined estimator's two optimizers. Each
// variable is updated by its group's optimizer, with that optimizer's slots; the
// variables no group names use the default optimizer.
//
// Hyperparameters are named as in the default optimizer ("learning_rate") for the
// default one, and "GROUP/NAME" ("wide/learning_rate") for a group's: a learning-rate
// schedule (which sets "learning_rate") changes the default optimizer only.
//
// example[in_model]:
//   std::vector<variable_group> groups{{"wide", {"wide/"}, make_adagrad({0.1})}};
//   optimizer_set opts{*make_adam({0.001}), groups};
//   opts.set_hyperparam("wide/learning_rate", 0.05);
//   const optimizer& o = opts.for_variable("wide/kernel");  // the Adagrad

#include <actortrain/model/optim/optimizer.hpp>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace actortrain::model {

class model;

struct variable_group {
  /// Names the group's hyperparameters ("wide/learning_rate"): letters, digits, '_' and
  /// '-', not empty.
  std::string name;
  /// Variable names; one ending in '/' names every variable it begins (a layer name
  /// prefix, "wide/").
  std::vector<std::string> variables;
  std::shared_ptr<const actortrain::model::optimizer> optimizer;
};

/// The default optimizer and the groups' (clones of each), by variable.
class optimizer_set {
 public:
  /// Throws std::invalid_argument naming the problem: a group without a name, an
  /// optimizer or variables, a name used twice or not of the allowed characters.
  optimizer_set(const optimizer& fallback, const std::vector<variable_group>& groups = {});
  optimizer_set(const optimizer_set& other);
  optimizer_set& operator=(const optimizer_set& other);

  /// The optimizer of variable `name`: its group's (the first group that names it), or
  /// the default one.
  const optimizer& for_variable(const std::string& name) const;
  /// The index of variable `name`'s optimizer, for at(): its group's (0, 1, ... in the
  /// order given) or -1 for the default one. Stays valid across copies and
  /// hyperparameter changes, so a caller resolves a variable once (a ps shard does, per
  /// partition, at init) instead of searching the groups on every apply.
  int index_of(const std::string& name) const;
  /// The optimizer index_of returned; std::out_of_range for another index.
  const optimizer& at(int index) const;
  /// The group of variable `name` ("" for the default optimizer).
  const std::string& group_of(const std::string& name) const;

  /// "NAME" sets the default optimizer's, "GROUP/NAME" that group's. Throws
  /// std::invalid_argument naming the optimizer (or the unknown group); on error
  /// nothing changes.
  void set_hyperparam(const std::string& name, double value);
  double hyperparam(const std::string& name) const;
  /// The default optimizer's, then each group's prefixed, sorted by name.
  std::vector<std::pair<std::string, double>> hyperparams() const;
  /// The default optimizer's describe(), then " + GROUP: describe() [variables]" per
  /// group (job fingerprints and checkpoint manifests compare it).
  std::string describe() const;
  bool has_groups() const { return !groups_.empty(); }
  /// The groups with clones of their optimizers as they are now (hyperparameters set
  /// since included).
  std::vector<variable_group> groups() const;
  const optimizer& fallback() const { return *fallback_; }

 private:
  struct group {
    std::string name;
    std::vector<std::string> variables;
    optimizer_ptr opt;
  };
  // The first group that names `variable` (null: none does).
  const group* find(const std::string& variable) const;
  // The optimizer "NAME" or "GROUP/NAME" names, and NAME in `param`.
  const optimizer& target(const std::string& name, std::string& param) const;
  optimizer_ptr fallback_;
  std::vector<group> groups_;
};

/// That `groups` fit `m`: every name that is not a prefix is a variable of `m`, every
/// prefix names at least one, and no variable is in two groups. Throws
/// std::invalid_argument naming the group and the variable.
void check_groups(const model& m, const std::vector<variable_group>& groups);

}  // namespace actortrain::model
