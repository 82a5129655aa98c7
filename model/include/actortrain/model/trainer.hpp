#pragma once
// Single-process training, Keras style: a trainer is a compiled model (structure,
// optimizer, loss, metrics) that owns its parameters and runs fit / evaluate / predict
// on the calling thread. The distributed coordinator offers the same three calls on a
// cluster; this is the baseline it is measured against.
//
// example[app]:
//   model::trainer t{model::model::sequential(784, {model::layers::dense(128, model::layers::activation::relu),
//                                                   model::layers::dense(10)}),
//                    model::make_adam(), model::softmax_cross_entropy()};
//   t.add_metric(model::accuracy());
//   model::fit_options o;
//   o.epochs = 10;
//   o.validation = test.batch(1000);
//   auto h = t.fit(train.shuffle(60000, 1).batch(128), o);
//   std::printf("%.4f\n", h.last("val_accuracy"));
//
// The data is a batch_source (batch_source.hpp): a dataset::dataset converts to one, so
// fit, evaluate, predict and fit_options::validation take datasets; model/ itself does not
// include dataset/. Callbacks (callbacks.hpp) are given per call; the trainer is the
// `training` they see, and runs every hook on this thread between steps.

#include <actortrain/model/batch_source.hpp>
#include <actortrain/model/callbacks.hpp>
#include <actortrain/model/dynamic_table.hpp>
#include <actortrain/model/loss.hpp>
#include <actortrain/model/metric.hpp>
#include <actortrain/model/model.hpp>
#include <actortrain/model/optim/optimizer.hpp>
#include <actortrain/model/train_step.hpp>

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace actortrain::model {

struct checkpoint_data;

/// Per-epoch values, as Keras's History: history["loss"][epoch].
class history {
 public:
  /// Values of `key` per epoch; throws std::out_of_range naming the key if unknown.
  const std::vector<double>& operator[](const std::string& key) const;
  /// The last epoch's value of `key`.
  double last(const std::string& key) const;
  bool has(const std::string& key) const { return values_.count(key) > 0; }
  size_t epochs() const;
  void add(const std::string& key, double v) { values_[key].push_back(v); }
  const std::map<std::string, std::vector<double>>& values() const { return values_; }

 private:
  std::map<std::string, std::vector<double>> values_;
};

/// TensorFlow's tf.distribute.InputOptions for a cluster's fit: how the input pipelines
/// of one run read ahead.
struct input_options {
  /// Batches each dataset shard (per replica) prepares ahead of demand, as TF's
  /// experimental_per_replica_buffer_size; 0: the cluster's cluster_spec::prefetch.
  size_t per_replica_buffer_size = 0;
};

struct fit_options {
  /// The epoch to end at: epochs initial_epoch .. epochs - 1 run (Keras: with
  /// initial_epoch 0, this many passes over the data, or of steps_per_epoch steps each).
  int epochs = 1;
  /// Keras's initial_epoch: the epoch (from 0) training starts at, to continue an earlier
  /// fit; epoch e still reads data.iterate(e) and is printed as "Epoch e+1/epochs". The
  /// history holds the epochs run. initial_epoch >= epochs (> 0) is refused: nothing
  /// would train (Keras trains nothing, silently).
  int initial_epoch = 0;
  /// 0: an epoch ends with the data (iterate(epoch) each epoch). > 0: an epoch is this
  /// many steps drawn from one iterator that persists across epochs (Keras semantics
  /// with an infinite dataset); training stops early, with a warning, if it runs out.
  int64_t steps_per_epoch = 0;
  /// Evaluated at each epoch end into val_<metric> keys (batched already). Assign a
  /// dataset::dataset (it converts); cluster::fit needs one (dataset::as_dataset).
  std::optional<batch_source> validation;
  /// Keras's validation_split, for fit(x, y) only: the last fraction of the rows (taken
  /// before any shuffling) is held out as validation data, batched by batch_size; in
  /// [0, 1). fit on a dataset refuses it, as Keras does (split with take/skip and pass
  /// `validation`). With `validation` set too, `validation` wins, as in Keras.
  double validation_split = 0;
  /// Validate after every validation_freq-th epoch (epochs e with (e + 1) % freq == 0),
  /// as Keras's integer validation_freq; val_* histories hold only those epochs.
  int validation_freq = 1;
  /// Keras's list form of validation_freq: the epochs (from 1) to validate after; when
  /// not empty it replaces validation_freq.
  std::vector<int64_t> validation_epochs;
  /// Keras's class_weight: class id -> weight of its examples' training loss (the label
  /// column's value for class-id labels, the one-hot column's index, or 0/1 for a single
  /// binary column); the loss is the mean of the weighted per-example losses, as
  /// Keras's. Every class met in the data needs a weight (a missing one throws naming
  /// it); validation and evaluate are not weighted. The cluster refuses it: give its job
  /// model::class_weighted(loss, weights) instead (loss.hpp).
  std::map<int64_t, double> class_weight;
  /// Callbacks of this call only (callbacks.hpp), in order.
  std::vector<callback_ptr> callbacks;
  /// A cluster's fit: how its input pipelines read ahead (in a cluster of processes, the
  /// workers' replicas too). The trainer reads on its own thread and refuses it: give
  /// the dataset a prefetch() instead.
  input_options input;
  /// 0 silent, 1 progress bar (updated in place on a terminal), 2 one line per epoch.
  int verbose = 1;
  /// Where progress goes (stdout when null).
  std::ostream* out = nullptr;
  /// For fit(x, y): batch size and whether to reshuffle each epoch (seeded by seed).
  int64_t batch_size = 32;
  bool shuffle = true;
  /// Seeds dropout masks and fit(x, y)'s shuffle; 0 uses the trainer's seed.
  uint64_t seed = 0;
  /// cluster::fit only: continue the run saved in the newest committed checkpoint under
  /// this directory (same dataset_fn, epochs and steps_per_epoch), step-exact. The local
  /// trainer refuses it: load the state with trainer::restore and call fit.
  std::string resume_from;
};

/// Checks what fit_options hold on their own (ranges, null callbacks); throws
/// std::invalid_argument naming the field. Both the trainer and the cluster call it.
void check_fit_options(const fit_options& opts);

/// Whether fit validates after `epoch` (from 0) under opts.validation_freq /
/// validation_epochs.
bool validates_after(const fit_options& opts, int64_t epoch);
/// The same rule from its two parts (a cluster's coordinator has them in its run_spec).
bool validates_after(int validation_freq, const std::vector<int64_t>& validation_epochs, int64_t epoch);

/// The outputs of `ex` on every batch of `data` (epoch 0), in order (rows = examples),
/// computed from `params` in inference mode. Throws std::invalid_argument for infinite
/// data or batches that do not fit the model. The trainer and the cluster both predict
/// through this.
/// `each_batch`, when set, is called before (begin = true) and after each batch.
matrix predict(executor& ex, const parameter_store& params, const batch_source& data,
               const std::function<void(int64_t batch, bool begin)>& each_batch = {});

class trainer : public training {
 public:
  /// Initializes parameters from `seed`. Throws std::invalid_argument for an empty model
  /// or a null optimizer or loss.
  trainer(model m, optimizer_ptr opt, loss_ptr l, uint64_t seed = 1);

  /// Metrics reported beside the loss (their name() is the history key).
  void add_metric(metric_ptr m);

  /// Trains on `data` (batches: features feed the model inputs, labels the loss); epoch e
  /// is data.iterate(e), or with steps_per_epoch one iterate(0) that persists.
  history fit(const batch_source& data, const fit_options& opts = {});
  /// Trains on tensors: x (one matrix per model input) and y, batched by opts.batch_size.
  history fit(const std::vector<matrix>& x, const matrix& y, const fit_options& opts = {});
  history fit(const matrix& x, const matrix& y, const fit_options& opts = {}) {
    return fit(std::vector<matrix>{x}, y, opts);
  }

  /// Loss and metrics over `data` (each element once), keys as in history. The
  /// callbacks' on_test_* hooks run.
  std::map<std::string, double> evaluate(const batch_source& data, int verbose = 0,
                                         const std::vector<callback_ptr>& callbacks = {});
  std::map<std::string, double> evaluate(const std::vector<matrix>& x, const matrix& y,
                                         int64_t batch_size = 256);

  /// Model outputs for every example of `data`, in order (rows = examples). The
  /// callbacks' on_predict_* hooks run.
  matrix predict(const batch_source& data, const std::vector<callback_ptr>& callbacks = {});
  matrix predict(const std::vector<matrix>& x, int64_t batch_size = 256);

  // -- training (callbacks.hpp): what callbacks ask of this trainer ------------------
  /// Stops the running fit after the current step.
  void stop_training() override;
  std::map<std::string, double> hyperparams() const override;
  void set_hyperparams(const std::map<std::string, double>& values) override;
  /// Keeps a copy of the parameters and optimizer state, in memory.
  void keep_state() override;
  /// When the running fit ends, the kept state (if any) comes back.
  void restore_kept_state_at_end() override;
  /// write_checkpoint(checkpoint()) under `dir`, then the newest `keep` are kept.
  void save_checkpoint(const std::string& dir, int keep) override;
  bool has_validation() const override { return validating_; }

  const model& structure() const { return model_; }
  parameter_store& parameters() { return params_; }
  const parameter_store& parameters() const { return params_; }
  /// The value of a variable by name ("dense/kernel"); throws std::out_of_range (also
  /// for a dynamic table, which table() gives).
  const matrix& variable(const std::string& name) const;
  /// A dynamic table (layers::dynamic_embedding) by its variable's name; throws
  /// std::out_of_range when there is none of that name.
  const dynamic_table& table(const std::string& name) const;
  optimizer& optim() { return *opt_; }
  /// Training steps taken over all fit calls.
  int64_t steps() const { return steps_; }

  /// One training step on a batch: the step function (default_train_step unless
  /// set_train_step gave another), then the optimizer applies its gradients. Returns the loss.
  double train_step(const batch& b) { return step(b, *loss_); }
  /// Keras's train_step override (train_step.hpp): every later step runs `s`; an empty
  /// one brings the built-in step back. Logs it returns besides "loss" are averaged over
  /// each epoch's examples into the history.
  void set_train_step(step_function s) { step_fn_ = std::move(s); }

  /// Takes parameters and optimizer state (slots, apply counts) from a checkpoint, as a
  /// cluster writes it (any number of ps shards, any partitioner: the partitions are
  /// assembled) or as checkpoint() returns it. Variables are matched by name and must
  /// agree in shape; a missing or misshapen one throws checkpoint_error naming it and
  /// changes nothing. Slots the optimizer does not have are ignored (an Adam checkpoint
  /// fine-tuned with SGD); slots the checkpoint lacks start fresh.
  void restore(const checkpoint_data& data);
  /// restore() from a checkpoint directory (ckpt-<step>, with manifest.json) or from the
  /// newest committed checkpoint under a root of them; checkpoint_error if there is none.
  void restore(const std::string& dir);
  /// The trainer's state as a checkpoint of one partition per variable at step steps(); a
  /// dynamic table's partition holds every row (model/checkpoint/checkpoint.hpp), which
  /// restore() takes from a checkpoint of any number of partitions (a cluster's).
  checkpoint_data checkpoint() const;

 private:
  void check_element(const batch& e) const;
  // `b` as the model computes on it: with dynamic tables, a copy with their ids
  // renumbered to the batch's rows, which become those tables' parameters (read for
  // training or not); `b` itself otherwise.
  const batch& with_tables(const batch& b, bool training);
  // Back to tables of no rows (what parameters() shows between steps).
  void release_tables();
  double step(const batch& b, const loss& l);
  history run_fit(const batch_source& data, const fit_options& opts, const std::optional<batch_source>& validation);
  std::map<std::string, double> run_evaluate(const batch_source& data, const std::vector<callback_ptr>& callbacks);
  model model_;
  optimizer_ptr opt_;
  loss_ptr loss_;
  uint64_t seed_;
  std::vector<metric_ptr> metrics_;
  parameter_store params_;
  gradient_store grads_;
  std::vector<slot_block> slots_;
  executor exec_;
  matrix d_out_;
  int64_t steps_ = 0;
  step_function step_fn_;
  logs last_logs_;  // the last step's logs (a custom step's extra keys)
  bool stop_ = false, restore_at_end_ = false, validating_ = false;
  // Per variable: its dynamic table (null for the others) and the distinct ids of the
  // batch being computed; that batch renumbered.
  std::vector<std::shared_ptr<dynamic_table>> tables_;
  std::vector<std::vector<int64_t>> table_ids_;
  batch renumbered_;
  struct kept_state {
    parameter_store params;
    std::vector<slot_block> slots;
    std::vector<std::optional<dynamic_table::snapshot>> tables;
  };
  std::optional<kept_state> kept_;
};

}  // namespace actortrain::model
