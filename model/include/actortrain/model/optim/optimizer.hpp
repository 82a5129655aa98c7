#pragma once
// The optimizer interface: an update rule over a flat block of floats.
//
// The same code runs in a local trainer and inside parameter-server shards (as ps-lite's
// server handle: the transport knows nothing of the maths). An optimizer therefore knows
// nothing of layers, variables or messages. It updates one *block* — a partition, i.e.
// contiguous rows of a variable, or a whole variable — from a block of gradients, and
// keeps its state for that block in a `slot_block` that the caller owns and stores next
// to the values (one per partition on a ps shard, checkpointed with it).
//
// Layout: a block of `n` floats is row-major; slot `k` of the block is `n` floats laid
// out exactly like the values, so slot row `r` sits at the same offset as value row `r`.
//
// Thread safety: `apply_dense` / `apply_rows` are const and touch only their arguments,
// so one optimizer may update different blocks from different threads at once. They must
// not run concurrently with `set_hyperparam` on the same object (each ps shard owns its
// own `clone()`, so in practice a shard's actor serializes both).
//
// Errors: a call that is rejected (std::invalid_argument / std::out_of_range) changes
// nothing — not the values, not the slots, not the iteration count — because every
// argument is checked before the first write.
//
// Averaging (Keras's `use_ema` and `ema_momentum`, every rule here): with use_ema the
// optimizer keeps one more slot, "average", an exponential moving average of the values
// after each dense apply,
//
//   average = ema_momentum * average + (1 - ema_momentum) * values      (t > 1)
//   average = values                                                    (t = 1)
//
// (Keras 3's `_update_model_variables_moving_average`, where the first step's momentum is
// 0.) The values train as they would without it; what reads the average is the caller: a
// model::trainer validates on it and sets the values to it at the end of fit (Keras's
// `finalize_variable_values`), a ps shard serves it to every read that is not a training
// step's (evaluation, the application's reads of the variables). The average is of dense
// blocks only: apply_rows on an averaging optimizer throws std::invalid_argument (a lazy
// row update leaves the other rows' average behind), so variables updated by rows
// (embeddings pulled by id, tables keyed by id) need an optimizer without use_ema (on a
// cluster, model/optim/groups.hpp gives them one of their own). The built-in rules keep
// the average in their kernel's pass over the block; a rule of your own has no use_ema.
//
// `ema_every` = k > 1 (not in Keras; default 1) updates the average on apply 1 and every
// k-th after it (t = 1, 1 + k, 1 + 2k, ...) with the momentum raised to the k-th power,
// so the average spans the same number of updates at a k-th of its memory traffic; it
// then lags the values by up to k - 1 more updates.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace actortrain::model {

/// Optimizer state for one block of n values.
struct slot_block {
  /// One entry per `slot_names()` entry, each n floats (zero unless the optimizer says
  /// otherwise: Adagrad starts its accumulator at `initial_accumulator_value`).
  std::vector<std::vector<float>> slots;
  /// Apply calls so far on this block. Adam's bias correction uses t = iterations after
  /// the increment, i.e. the first call runs with t = 1 (as Keras's `iterations + 1`).
  /// It equals Keras's `optimizer.iterations` when every step applies to every block (a
  /// step that touches no row of a sparse block should still call `apply_rows` with zero
  /// rows so the count advances).
  int64_t iterations = 0;
};

class optimizer;
using optimizer_ptr = std::unique_ptr<optimizer>;

/// Base class of every update rule. Subclasses declare their hyperparameters and slots in
/// their constructor and supply the element-wise maths; the base class owns argument
/// checking, duplicate-row merging and the hyperparameter table.
class optimizer {
 public:
  virtual ~optimizer() = default;

  /// The rule's name as `make_optimizer` spells it: "sgd", "adam", "adagrad", "rmsprop".
  const std::string& name() const { return name_; }

  /// "adam(learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-07)": the name and
  /// every hyperparameter in declaration order, numbers in shortest round-trip form,
  /// flags as true/false. `make_optimizer(describe())` rebuilds an equal optimizer.
  virtual std::string describe() const;

  /// Names of the per-value state vectors, fixed at construction: {"m", "v"} for Adam,
  /// {} for plain SGD. These are also the checkpoint's slot file suffixes.
  std::vector<std::string> slot_names() const { return slot_names_; }
  size_t num_slots() const { return slot_names_.size(); }

  /// Fresh state for a block of n values: every slot sized n and set to its initial value,
  /// iterations 0. With use_ema the average starts as a copy of `values` (n floats;
  /// zeros when null, which only a block whose values are not known yet should take).
  slot_block make_slots(size_t n, const float* values = nullptr) const;

  /// use_ema: the index of the "average" slot (the last one), or -1 without averaging.
  int average_slot() const { return average_slot_; }

  /// What a read of the model sees of a block (every read but a training step's: the
  /// trainer's validation, evaluate and predict, a ps shard's non-training pulls): with
  /// use_ema and at least one apply, the block's average; otherwise null, the values.
  const std::vector<float>* model_view(const slot_block& s) const {
    if (average_slot_ < 0 || s.iterations == 0) return nullptr;
    return &s.slots[static_cast<size_t>(average_slot_)];
  }

  /// One apply's averaging: the average slot's index (-1: none, also on the applies that
  /// ema_every skips) and the momentum of this apply (0 at t = 1).
  struct average_step {
    int slot = -1;
    float momentum = 0;
  };

  /// Dense update: values[i] from grads[i], i < n. Increments s.iterations.
  /// Requires s.slots.size() == num_slots() and every slot of size n (else
  /// std::invalid_argument naming the optimizer). `values` and `grads` must not overlap.
  /// `lr_scale` multiplies the learning rate for this call only (a ps shard's
  /// staleness-aware rate); it must be finite and in (0, 1] (else std::invalid_argument).
  void apply_dense(float* values, const float* grads, size_t n, slot_block& s,
                   double lr_scale = 1.0) const;

  /// apply_dense, and beside it the values extrapolated `k` updates ahead along this
  /// one: ahead[i] = new[i] + k (new[i] - old[i]), i < n (a ps shard's lookahead
  /// compensation, ps/compensation.hpp). In one pass over the block: the old values are
  /// kept a cache-sized piece at a time. `ahead` must not overlap `values` or `grads`;
  /// `k` must be finite (else std::invalid_argument). The same checks and errors as
  /// apply_dense, and the same new values to the bit.
  void apply_dense_ahead(float* values, const float* grads, size_t n, slot_block& s, double lr_scale,
                         float k, float* ahead) const;

  /// Sparse ("lazy") row update, as TF's sparse kernels and LazyAdam: only the given rows
  /// of `values` and the same rows of every slot change; rows not listed keep their
  /// values and their state (Adam's moments of an untouched row do not decay).
  ///  - `rows[j]` is a row index local to the block (0 .. block_rows-1); the block has
  ///    block_rows = slot size / row_width rows.
  ///  - `grad_rows` is num_rows x row_width, row-major: row j is the gradient of rows[j].
  ///  - Repeated row indices are allowed: their gradients are summed first (Keras's
  ///    `_deduplicate_indexed_slices`), so a row is updated once per call.
  ///  - num_rows == 0 only advances s.iterations.
  /// Increments s.iterations. Throws std::out_of_range for a negative row or, when the
  /// optimizer has slots, a row past the block (optimizers without slots cannot know the
  /// block size; their caller guarantees the bound), std::invalid_argument for a zero
  /// row_width or slots of the wrong count or size.
  void apply_rows(float* values, size_t row_width, const int64_t* rows, size_t num_rows,
                  const float* grad_rows, slot_block& s, double lr_scale = 1.0) const;

  /// Sets a hyperparameter for the following apply calls (learning-rate schedules reach
  /// a ps shard's optimizer through this). Flags take 0 or 1. Throws std::invalid_argument
  /// naming the optimizer and the parameter for an unknown name, a non-finite or
  /// out-of-range value (negative learning rate, beta outside [0, 1), ...), or a change to
  /// a parameter that decides the slot layout (RMSprop's `centered`, SGD's `momentum`
  /// away from 0 when built without a momentum slot). On error nothing changes.
  void set_hyperparam(const std::string& name, double value);

  /// The current value; std::invalid_argument for an unknown name.
  double hyperparam(const std::string& name) const;

  /// Every hyperparameter, sorted by name (deterministic: manifests and logs compare).
  std::vector<std::pair<std::string, double>> hyperparams() const;

  /// Hyperparameter names in declaration order (describe()'s order; also the order of
  /// positional arguments to make_optimizer: "adam(0.01)" sets learning_rate).
  std::vector<std::string> hyperparam_names() const;

  /// An independent copy with the same hyperparameters (each ps shard owns one).
  virtual optimizer_ptr clone() const = 0;

 protected:
  /// Valid values of a hyperparameter.
  enum class value_range {
    non_negative,     ///< [0, inf)
    positive,         ///< (0, inf)
    unit_open,        ///< [0, 1)
    unit_closed,      ///< [0, 1]
    flag,             ///< 0 or 1, printed as false / true
    count,            ///< a whole number >= 1
  };

  optimizer(std::string name, std::vector<std::string> slot_names);
  optimizer(const optimizer&) = default;
  optimizer& operator=(const optimizer&) = default;

  /// Declares a hyperparameter (constructors only, in describe() order) and returns its
  /// index for `hp()`. `fixed` ones can only be given at construction. Throws
  /// std::invalid_argument if `value` is outside `range`.
  size_t declare(std::string name, double value, value_range range, bool fixed = false);

  /// Current value of hyperparameter `index` (fast: read once per apply call).
  double hp(size_t index) const { return params_[index].value; }

  /// Initial value of slot k (default 0).
  virtual float initial_slot_value(size_t k) const;

  /// The built-in rules' constructors, after their own hyperparameters: declares use_ema,
  /// ema_momentum and ema_every and, with use_ema, the "average" slot after the rule's
  /// slots. ema_momentum must lie in [0, 1) and ema_every be a whole number >= 1 (else
  /// std::invalid_argument).
  void declare_average(bool use_ema, double ema_momentum, double ema_every);

  /// What the built-in rules' update_dense and update_dense_ahead pass to their kernels'
  /// runners (model/src/optim/kernel.hpp) so that the average is kept in the same pass.
  average_step average(const slot_block& s) const;

  /// Extra validation of a run-time change of hyperparameter `index` to `value` (already
  /// range-checked). Return an error text to reject, or an empty string to accept.
  virtual std::string check_change(size_t index, double value) const;

  /// The maths. Called after every check, with s.iterations already incremented and
  /// slot pointers valid for the span:
  ///  - update_dense: the whole block, n floats.
  ///  - update_rows: `rows` unique and in range (duplicates already merged).
  /// `lr_scale` (checked, in (0, 1]) multiplies the learning rate of this call.
  virtual void update_dense(float* values, const float* grads, size_t n,
                            slot_block& s, double lr_scale) const = 0;
  virtual void update_rows(float* values, size_t row_width, const int64_t* rows,
                           size_t num_rows, const float* grad_rows, slot_block& s,
                           double lr_scale) const = 0;
  ///  - update_dense_ahead: update_dense and the extrapolation of apply_dense_ahead. The
  ///    default keeps a copy of the old values; the built-in rules run their kernel a
  ///    piece at a time instead (optim/kernel.hpp).
  virtual void update_dense_ahead(float* values, const float* grads, size_t n, slot_block& s,
                                  double lr_scale, float k, float* ahead) const;

 private:
  struct param {
    std::string name;
    double value;
    value_range range;
    bool fixed;
  };
  const param* find(const std::string& name) const;
  void check_scale(double lr_scale) const;
  // apply_dense's (and apply_dense_ahead's) checks of the scale and the slots.
  void check_dense(const char* call, size_t n, const slot_block& s, double lr_scale) const;
  std::string range_error(const param& p, double value) const;
  std::string known_names() const;

  std::string name_;
  std::vector<std::string> slot_names_;
  std::vector<param> params_;
  int average_slot_ = -1;
  size_t ema_momentum_ = 0;  // the hyperparameters' indices, with use_ema
  size_t ema_every_ = 0;
};

}  // namespace actortrain::model
