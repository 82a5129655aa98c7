#include <actortrain/model/batch_rows.hpp>
#include <actortrain/model/fpu.hpp>
#include <actortrain/model/layers/embedding.hpp>
#include <actortrain/model/layers/gemm_tuning.hpp>
#include <actortrain/model/progress.hpp>
#include <actortrain/model/random.hpp>
#include <actortrain/model/trainer.hpp>
#include <actortrain/model/checkpoint/checkpoint.hpp>
#include <actortrain/model/partitioner.hpp>

#include "builtin_step.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <iostream>
#include <stdexcept>

#include <fmt/format.h>

namespace actortrain::model {

const std::vector<double>& history::operator[](const std::string& key) const {
  auto i = values_.find(key);
  if (i == values_.end()) throw std::out_of_range(fmt::format("history has no key '{}'", key));
  return i->second;
}

double history::last(const std::string& key) const {
  const auto& v = (*this)[key];
  if (v.empty()) throw std::out_of_range(fmt::format("history key '{}' is empty", key));
  return v.back();
}

size_t history::epochs() const {
  size_t n = 0;
  for (auto& [k, v] : values_) n = std::max(n, v.size());
  return n;
}

namespace {

// use_ema (optimizer.hpp, "Averaging"): while it lives, the dense variables hold what a
// read of the model sees (optimizer::model_view: their averages, once updated); the
// values come back when it ends, unless keep() made the averages the values.
class averaged_values {
 public:
  averaged_values(parameter_store& params, const std::vector<slot_block>& slots, const optimizer& opt,
                  const std::vector<std::shared_ptr<dynamic_table>>& tables)
    : params_(params) {
    std::vector<const std::vector<float>*> views;
    // Every value saved before the first is overwritten: a failed copy changes nothing.
    for (size_t v = 0; v < params.size(); ++v)
      if (const auto* view = tables[v] ? nullptr : opt.model_view(slots[v])) {
        saved_.emplace_back(v, params[static_cast<variable_id>(v)]);
        views.push_back(view);
      }
    for (size_t i = 0; i < saved_.size(); ++i)
      std::copy(views[i]->begin(), views[i]->end(), params[static_cast<variable_id>(saved_[i].first)].data());
  }
  averaged_values(const averaged_values&) = delete;
  averaged_values& operator=(const averaged_values&) = delete;
  ~averaged_values() {
    for (auto& [v, value] : saved_) params_[static_cast<variable_id>(v)] = std::move(value);
  }
  void keep() { saved_.clear(); }

 private:
  parameter_store& params_;
  std::vector<std::pair<size_t, matrix>> saved_;
};

// Variable v's dynamic table in a model seeded by `seed`.
dynamic_table_options table_options(const model& m, uint64_t seed, size_t v) {
  const auto& spec = m.variables()[v];
  dynamic_table_options o;
  o.dim = spec.shape.cols;
  o.init = spec.init;
  o.seed = variable_seed(seed, v);
  o.admit_after = spec.admit_after;
  o.evict_after = spec.evict_after;
  return o;
}

}  // namespace

trainer::trainer(model m, optimizer_ptr opt, loss_ptr l, uint64_t seed)
  : model_(std::move(m)), opt_(std::move(opt)), loss_(std::move(l)), seed_(seed),
    exec_(model_.empty() ? throw std::invalid_argument("trainer: empty model") : model_) {
  if (!opt_) throw std::invalid_argument("trainer: null optimizer");
  tune_gemm_blocking();
  if (!loss_) throw std::invalid_argument("trainer: null loss");
  params_ = model_.initial_parameters(seed_);
  grads_ = gradient_store{model_.variables()};
  const auto& vars = model_.variables();
  for (size_t v = 0; v < vars.size(); ++v)
    if (vars[v].sparse && opt_->average_slot() >= 0)
      throw std::invalid_argument(fmt::format("trainer: '{}' is updated by rows, and {} averages dense variables only "
                                              "(use_ema)",
                                              vars[v].name, opt_->describe()));
  for (size_t v = 0; v < vars.size(); ++v) {
    const auto& value = params_[static_cast<variable_id>(v)];
    const auto n = static_cast<size_t>(vars[v].shape.size());
    slots_.push_back(opt_->make_slots(n, static_cast<size_t>(value.size()) == n ? value.data() : nullptr));
  }
  tables_.resize(vars.size());
  table_ids_.resize(vars.size());
  for (size_t v = 0; v < vars.size(); ++v) {
    if (!vars[v].dynamic) continue;
    if (!model_.compact_rows()[v])
      throw std::invalid_argument(fmt::format(
        "trainer: the dynamic table '{}' must be applied straight to model inputs that nothing else reads",
        vars[v].name));
    tables_[v] = std::make_shared<dynamic_table>(table_options(model_, seed_, v), *opt_);
  }
}


void trainer::release_tables() {
  for (size_t v = 0; v < tables_.size(); ++v)
    if (tables_[v]) params_.adopt(static_cast<variable_id>(v), std::make_shared<matrix>(0, tables_[v]->dim()));
}

const batch& trainer::with_tables(const batch& b, bool training) {
  bool any = b.has_ids();
  for (auto& t : tables_) any = any || t;
  if (!any) return b;
  renumbered_ = b;
  const auto& feeds = model_.row_feeds();
  for (size_t v = 0; v < tables_.size(); ++v) {
    if (!tables_[v]) continue;
    auto& ids = table_ids_[v];
    ids = batch_row_ids(b, feeds[v], std::numeric_limits<int64_t>::max());
    if (static_cast<int64_t>(ids.size()) > layers::max_float_id)
      throw std::invalid_argument(fmt::format("{} distinct ids of table '{}' in one batch: a step holds at most 2^24 "
                                              "(its rows are numbered by floats)",
                                              ids.size(), model_.variables()[v].name));
    auto rows = std::make_shared<matrix>(static_cast<Eigen::Index>(ids.size()), tables_[v]->dim());
    tables_[v]->read(ids.data(), ids.size(), rows->data(), training);
    params_.adopt(static_cast<variable_id>(v), std::move(rows));
    renumber_rows(renumbered_, feeds[v], ids);
  }
  ids_as_floats(renumbered_);  // ids a fixed table reads
  return renumbered_;
}

void trainer::restore(const checkpoint_data& data) {
  auto one = place(model_.variables(), nullptr, 1);
  auto cut = repartition(data, one);  // checks names and shapes before anything changes
  auto names = opt_->slot_names();
  std::vector<slot_block> slots;
  // A dynamic table's rows: into a new table first, so a bad one changes nothing.
  std::vector<std::shared_ptr<dynamic_table>> tables(tables_.size());
  for (size_t v = 0; v < cut.variables.size(); ++v)
    if (tables_[v]) {
      tables[v] = std::make_shared<dynamic_table>(table_options(model_, seed_, v), *opt_);
      try {
        tables[v]->merge(table_snapshot(cut.variables[v].partitions.front(), names));
      } catch (const std::invalid_argument& e) {
        throw checkpoint_error(fmt::format("trainer::restore: dynamic table '{}': {}", cut.variables[v].name, e.what()));
      }
    }
  for (size_t v = 0; v < cut.variables.size(); ++v) {
    const auto& part = cut.variables[v].partitions.front();
    if (tables_[v]) {  // its slots are its table's
      slots.push_back(opt_->make_slots(0));
      continue;
    }
    // A slot the checkpoint lacks starts fresh; an average, as the values.
    auto block = opt_->make_slots(static_cast<size_t>(part.values.size()), part.values.data());
    for (size_t k = 0; k < names.size(); ++k) {
      auto it = part.slots.find(names[k]);
      if (it != part.slots.end()) std::copy(it->second.data(), it->second.data() + it->second.size(), block.slots[k].begin());
    }
    block.iterations = part.iterations;
    slots.push_back(std::move(block));
  }
  for (size_t v = 0; v < cut.variables.size(); ++v)
    if (!tables_[v]) params_[static_cast<variable_id>(v)] = std::move(cut.variables[v].partitions.front().values);
  for (size_t v = 0; v < tables.size(); ++v)
    if (tables[v]) tables_[v] = std::move(tables[v]);
  release_tables();
  slots_ = std::move(slots);
  steps_ = data.step;
}

void trainer::restore(const std::string& dir) {
  auto& fs = posix_file_system();
  if (fs.exists(dir + "/manifest.json")) {
    restore(read_checkpoint(fs, dir));
    return;
  }
  auto latest = latest_checkpoint(fs, dir);
  if (!latest) throw checkpoint_error(fmt::format("{}: no committed checkpoint (no manifest.json, no ckpt-* with one)", dir));
  restore(read_checkpoint(fs, latest->path));
}

checkpoint_data trainer::checkpoint() const {
  checkpoint_data out;
  out.step = steps_;
  out.optimizer = opt_->describe();
  auto names = opt_->slot_names();
  const auto& vars = model_.variables();
  for (size_t v = 0; v < vars.size(); ++v) {
    variable_data d;
    d.name = vars[v].name;
    d.shape = vars[v].shape;
    if (tables_[v]) {  // every row, in one partition ("rows" [0, 1))
      d.dynamic = true;
      auto p = table_partition(tables_[v]->save(), names);
      p.row_begin = 0;
      p.row_end = 1;
      d.partitions.push_back(std::move(p));
      out.variables.push_back(std::move(d));
      continue;
    }
    partition_data p;
    p.row_begin = 0;
    p.row_end = vars[v].shape.rows;
    p.values = params_[static_cast<variable_id>(v)];
    for (size_t k = 0; k < names.size(); ++k) {
      matrix m(p.values.rows(), p.values.cols());
      std::copy(slots_[v].slots[k].begin(), slots_[v].slots[k].end(), m.data());
      p.slots[names[k]] = std::move(m);
    }
    p.iterations = slots_[v].iterations;
    d.partitions.push_back(std::move(p));
    out.variables.push_back(std::move(d));
  }
  return out;
}

void trainer::stop_training() { stop_ = true; }

std::map<std::string, double> trainer::hyperparams() const {
  std::map<std::string, double> out;
  for (auto& [k, v] : opt_->hyperparams()) out[k] = v;
  return out;
}

// All or nothing: every change is tried on a copy first.
void trainer::set_hyperparams(const std::map<std::string, double>& values) {
  auto probe = opt_->clone();
  for (auto& [k, v] : values) probe->set_hyperparam(k, v);
  for (auto& [k, v] : values) opt_->set_hyperparam(k, v);
}

// A parameter_store shares its matrices: the kept state holds copies.
void trainer::keep_state() {
  kept_state k{parameter_store{params_.size()}, slots_, {}};
  for (size_t v = 0; v < params_.size(); ++v) {
    auto id = static_cast<variable_id>(v);
    k.params.adopt(id, std::make_shared<const matrix>(params_[id]));
    k.tables.push_back(tables_[v] ? std::optional{tables_[v]->save()} : std::nullopt);
  }
  kept_ = std::move(k);
}

void trainer::restore_kept_state_at_end() { restore_at_end_ = true; }

void trainer::save_checkpoint(const std::string& dir, int keep) {
  if (keep < 1) throw std::invalid_argument(fmt::format("save_checkpoint: keep = {} < 1", keep));
  auto& fs = posix_file_system();
  write_checkpoint(fs, dir, checkpoint());
  prune_checkpoints(fs, dir, static_cast<size_t>(keep));
}

void trainer::add_metric(metric_ptr m) {
  if (!m) throw std::invalid_argument("trainer::add_metric: null metric");
  if (m->name() == "loss") throw std::invalid_argument("trainer::add_metric: 'loss' is always reported");
  metrics_.push_back(std::move(m));
}

const matrix& trainer::variable(const std::string& name) const {
  auto id = model_.find_variable(name);
  if (id < 0) throw std::out_of_range(fmt::format("model has no variable '{}'", name));
  if (tables_[static_cast<size_t>(id)])
    throw std::out_of_range(fmt::format("variable '{}' is a dynamic table: trainer::table()", name));
  return params_[id];
}

const dynamic_table& trainer::table(const std::string& name) const {
  auto id = model_.find_variable(name);
  if (id < 0 || !tables_[static_cast<size_t>(id)])
    throw std::out_of_range(fmt::format("model has no dynamic table '{}'", name));
  return *tables_[static_cast<size_t>(id)];
}

void trainer::check_element(const batch& e) const {
  if (e.features.size() != model_.num_inputs())
    throw std::invalid_argument(fmt::format("the data has {} feature tensors, the model {} inputs",
                                            e.features.size(), model_.num_inputs()));
}

double trainer::step(const batch& given, const loss& lf) {
  check_element(given);
  const batch& b = with_tables(given, true);
  grads_.zero();
  step_context ctx{exec_, params_, grads_, lf, &metrics_, b,
                   draw(seed_, static_cast<uint64_t>(steps_), 0x64726f70ULL), d_out_};
  double l = 0;
  if (!step_fn_) {
    last_logs_.clear();  // the built-in step: no map per step
    l = detail::builtin_step(ctx);
  } else {
    last_logs_ = step_fn_.fn(ctx);
    auto found = last_logs_.find("loss");
    if (found == last_logs_.end())
      throw std::invalid_argument(fmt::format("train step '{}' returned no \"loss\" in its logs", step_fn_.name));
    l = found->second;
  }
  const auto& specs = model_.variables();
  for (size_t v = 0; v < specs.size(); ++v) {
    auto& value = params_[static_cast<variable_id>(v)];
    if (auto& t = tables_[v]) {  // every step counts, rows or none
      auto& g = grads_.sparse[v];
      if (!restore_row_ids(g, table_ids_[v]))
        throw std::invalid_argument(
          fmt::format("the gradient of '{}' has a row past the {} rows of its batch", specs[v].name, table_ids_[v].size()));
      t->apply(*opt_, g.ids.data(), g.ids.size(), g.rows.data());
      continue;
    }
    if (grads_.is_sparse[v]) {
      auto& g = grads_.sparse[v];
      if (g.ids.empty()) continue;
      opt_->apply_rows(value.data(), static_cast<size_t>(value.cols()), g.ids.data(), g.ids.size(),
                       g.rows.data(), slots_[v]);
    } else {
      opt_->apply_dense(value.data(), grads_.dense[v].data(), static_cast<size_t>(value.size()), slots_[v]);
    }
  }
  release_tables();  // a batch's rows mean nothing past its step
  ++steps_;
  return l;
}

namespace {

/// fit(x, y), evaluate(x, y) and predict(x)'s data: the rows of x and y in batches of
/// batch_size, in a new order each epoch when shuffled. It yields exactly the batches of
/// dataset::from_tensor_slices(x, y)[.shuffle(rows, seed)].batch(batch_size), which these
/// calls built before model/ stopped including dataset/: the same checks and messages,
/// the same order (model::shuffle_buffer, which dataset::shuffle runs too), the same
/// gathered rows.
class tensor_batches final : public batch_source::impl, public std::enable_shared_from_this<tensor_batches> {
 public:
  tensor_batches(std::vector<matrix> x, matrix y, int64_t batch_size, std::optional<uint64_t> shuffle_seed)
      : x_(std::move(x)), y_(std::move(y)), batch_size_(static_cast<uint64_t>(batch_size)), seed_(shuffle_seed) {
    if (x_.empty() && y_.rows() == 0 && y_.cols() == 0)
      throw std::invalid_argument("from_tensor_slices: no features and no labels");
    const auto rows = x_.empty() ? y_.rows() : x_[0].rows();
    for (size_t k = 1; k < x_.size(); ++k)
      if (x_[k].rows() != rows)
        throw std::invalid_argument(fmt::format(
          "from_tensor_slices: features[{}] is {} but features[0] is {}: row counts must agree", k,
          shape_string(x_[k]), shape_string(x_[0])));
    const auto label_rows = y_.rows();
    // A 0 x 0 labels matrix means "no labels": give it the rows, with no columns.
    if (y_.size() == 0 && y_.rows() != rows) y_.resize(rows, 0);
    if (y_.rows() != rows)
      throw std::invalid_argument(fmt::format(
        "from_tensor_slices: labels are {} but features[0] is {}: row counts must agree", shape_string(y_),
        shape_string(x_[0])));
    if (seed_ && label_rows < 1)
      throw std::invalid_argument(fmt::format("shuffle: buffer_size must be >= 1, got {}", label_rows));
    rows_ = static_cast<uint64_t>(rows);
  }

  batch_count count() const override {
    return {static_cast<int64_t>(rows_ / batch_size_ + (rows_ % batch_size_ != 0)), false};
  }

  std::unique_ptr<batch_iterator> iterate(uint64_t epoch) const override {
    std::vector<uint64_t> order;
    if (seed_) {
      // dataset::shuffle(rows, seed) on indices: a buffer as large as the data, stream = epoch.
      order.reserve(rows_);
      shuffle_buffer<uint64_t> buf(rows_, *seed_, epoch);
      uint64_t next = 0;
      auto pull = [&]() -> std::optional<uint64_t> {
        if (next >= rows_) return std::nullopt;
        return next++;
      };
      while (auto i = buf.next(pull)) order.push_back(*i);
    }
    return std::make_unique<iterator>(shared_from_this(), std::move(order));
  }

 private:
  class iterator final : public batch_iterator {
   public:
    iterator(std::shared_ptr<const tensor_batches> src, std::vector<uint64_t> order)
        : src_(std::move(src)), order_(std::move(order)) {}

    std::optional<batch> next() override {
      if (begin_ >= src_->rows_) return std::nullopt;
      const uint64_t end = std::min(src_->rows_, begin_ + src_->batch_size_);
      const auto n = static_cast<Eigen::Index>(end - begin_);
      batch b;
      b.features.resize(src_->x_.size());
      for (size_t k = 0; k < src_->x_.size(); ++k) {
        b.features[k].resize(n, src_->x_[k].cols());
        copy_rows(src_->x_[k], b.features[k]);
      }
      b.labels.resize(n, src_->y_.cols());
      copy_rows(src_->y_, b.labels);
      begin_ = end;
      return b;
    }

   private:
    void copy_rows(const matrix& from, matrix& to) const {
      const auto cols = from.cols();
      if (cols == 0) return;
      for (Eigen::Index j = 0; j < to.rows(); ++j) {
        const uint64_t p = begin_ + static_cast<uint64_t>(j);
        const auto row = static_cast<Eigen::Index>(src_->seed_ ? order_[p] : p);
        std::memcpy(to.data() + j * cols, from.data() + row * cols, static_cast<size_t>(cols) * sizeof(float));
      }
    }

    std::shared_ptr<const tensor_batches> src_;  // an iterator keeps its data alive
    std::vector<uint64_t> order_;
    uint64_t begin_ = 0;
  };

  std::vector<matrix> x_;
  matrix y_;
  uint64_t batch_size_;
  std::optional<uint64_t> seed_;
  uint64_t rows_ = 0;
};

batch_source tensors(std::vector<matrix> x, matrix y, int64_t batch_size, std::optional<uint64_t> shuffle_seed) {
  return batch_source{std::make_shared<tensor_batches>(std::move(x), std::move(y), batch_size, shuffle_seed)};
}

int64_t known_steps(const batch_source& d) { return d.count().n; }

}  // namespace

void check_fit_options(const fit_options& opts) {
  auto bad = [](const std::string& what) { throw std::invalid_argument("fit: " + what); };
  if (opts.epochs < 0) bad(fmt::format("epochs = {} < 0", opts.epochs));
  if (opts.initial_epoch < 0) bad(fmt::format("initial_epoch = {} < 0", opts.initial_epoch));
  if (opts.initial_epoch > 0 && opts.initial_epoch >= opts.epochs)
    bad(fmt::format("initial_epoch = {} >= epochs = {}: nothing would train (epochs is the epoch to end at, as "
                    "in Keras)",
                    opts.initial_epoch, opts.epochs));
  if (opts.steps_per_epoch < 0) bad(fmt::format("steps_per_epoch = {} < 0", opts.steps_per_epoch));
  if (!(opts.validation_split >= 0 && opts.validation_split < 1))
    bad(fmt::format("validation_split = {} (it must lie in [0, 1))", opts.validation_split));
  if (opts.validation_freq < 1) bad(fmt::format("validation_freq = {} < 1", opts.validation_freq));
  for (auto e : opts.validation_epochs)
    if (e < 1) bad(fmt::format("validation_epochs holds {}: epochs count from 1", e));
  for (auto& [c, w] : opts.class_weight) {
    if (c < 0) bad(fmt::format("class_weight has class {}: class ids count from 0", c));
    if (!(w >= 0) || !std::isfinite(w)) bad(fmt::format("class_weight[{}] = {} (a finite weight >= 0)", c, w));
  }
  for (size_t i = 0; i < opts.callbacks.size(); ++i)
    if (!opts.callbacks[i]) bad(fmt::format("callbacks[{}] is null", i));
  if (opts.verbose < 0 || opts.verbose > 2) bad(fmt::format("verbose = {} (0, 1 or 2)", opts.verbose));
  if (opts.input.per_replica_buffer_size > (size_t{1} << 20))
    bad(fmt::format("input.per_replica_buffer_size = {} (at most 2^20 batches)", opts.input.per_replica_buffer_size));
}

bool validates_after(int validation_freq, const std::vector<int64_t>& validation_epochs, int64_t epoch) {
  if (!validation_epochs.empty())
    return std::find(validation_epochs.begin(), validation_epochs.end(), epoch + 1) != validation_epochs.end();
  return (epoch + 1) % std::max(1, validation_freq) == 0;
}

bool validates_after(const fit_options& opts, int64_t epoch) {
  return validates_after(opts.validation_freq, opts.validation_epochs, epoch);
}

history trainer::fit(const batch_source& data, const fit_options& opts) {
  if (opts.validation_split != 0)
    throw std::invalid_argument(
      "fit: validation_split is for fit(x, y) with tensors (Keras refuses it for datasets too): split the dataset "
      "with take()/skip() and pass the held-out part as fit_options::validation");
  return run_fit(data, opts, opts.validation);
}

namespace {

// Runs a hook of every callback, in order; an exception ends the call (run_fit lets the
// callbacks hear on_train_end(failed) first).
template <class F>
void each(const std::vector<callback_ptr>& cbs, F&& f) {
  for (auto& c : cbs) f(*c);
}

}  // namespace

history trainer::run_fit(const batch_source& data, const fit_options& opts, const std::optional<batch_source>& validation) {
  if (!opts.resume_from.empty())
    throw std::invalid_argument("fit: resume_from is for cluster::fit; load a checkpoint with trainer::restore");
  if (opts.input.per_replica_buffer_size != 0)
    throw std::invalid_argument(
      "fit: input.per_replica_buffer_size is for cluster::fit (its dataset shards read ahead); the trainer reads on "
      "its own thread: give the dataset a prefetch(n)");
  check_fit_options(opts);
  if (opts.steps_per_epoch == 0 && data.count().infinite)
    throw std::invalid_argument("fit: the dataset is infinite (repeat()); set steps_per_epoch");
  loss_ptr fit_loss = opts.class_weight.empty() ? loss_ : class_weighted(loss_, opts.class_weight);
  enable_flush_to_zero();
  std::ostream& out = opts.out ? *opts.out : std::cout;
  progress_printer progress{out, opts.verbose, progress_printer::stdout_is_terminal(out)};
  const auto& cbs = opts.callbacks;
  uint64_t saved_seed = seed_;
  if (opts.seed != 0) seed_ = opts.seed;
  stop_ = restore_at_end_ = false;
  validating_ = validation.has_value();
  kept_.reset();
  history h;
  int64_t fit_steps = 0;  // this fit's steps: what callbacks see as the step
  try {
    each(cbs, [&](callback& c) { c.on_train_begin(*this); });
    std::unique_ptr<batch_iterator> persistent;
    if (opts.steps_per_epoch > 0) persistent = data.iterate(0);
    int64_t total = opts.steps_per_epoch > 0 ? opts.steps_per_epoch : known_steps(data);
    bool ran_out = false;
    for (int epoch = opts.initial_epoch; epoch < opts.epochs && !ran_out && !stop_; ++epoch) {
      for (auto& m : metrics_) m->reset();
      progress.begin_epoch(epoch, opts.epochs, total);
      each(cbs, [&](callback& c) { c.on_epoch_begin(*this, epoch); });
      std::unique_ptr<batch_iterator> fresh;
      batch_iterator* it = persistent.get();
      if (!it) {
        fresh = data.iterate(static_cast<uint64_t>(epoch));
        it = fresh.get();
      }
      double loss_sum = 0;
      int64_t samples = 0, step_in_epoch = 0;
      std::map<std::string, double> values, extra_sums;  // extra: a custom step's other logs
      auto current = [&] {
        values["loss"] = samples > 0 ? loss_sum / static_cast<double>(samples) : 0.0;
        for (auto& [k, v] : extra_sums) values[k] = samples > 0 ? v / static_cast<double>(samples) : 0.0;
        for (auto& m : metrics_) values[m->name()] = m->result();
      };
      while (!stop_ && (opts.steps_per_epoch == 0 || step_in_epoch < opts.steps_per_epoch)) {
        auto e = it->next();
        if (!e) {
          if (opts.steps_per_epoch > 0) {
            progress.note(fmt::format("warning: the input ran out of data after {} steps of epoch {}; "
                                      "training stops (use repeat() or fewer steps_per_epoch)",
                                      step_in_epoch, epoch + 1));
            ran_out = true;
          }
          break;
        }
        each(cbs, [&](callback& c) { c.on_train_batch_begin(*this, epoch, fit_steps + 1); });
        double l = step(*e, *fit_loss);
        ++fit_steps;
        loss_sum += l * static_cast<double>(e->rows());
        for (auto& [k, v] : last_logs_)
          if (k != "loss") extra_sums[k] += v * static_cast<double>(e->rows());
        samples += e->rows();
        ++step_in_epoch;
        if (opts.verbose == 1 || !cbs.empty()) current();
        if (opts.verbose == 1) progress.update(step_in_epoch, samples, values);
        if (!cbs.empty()) {
          step_info si{epoch, fit_steps, 0, l, e->rows(), 0, values};
          each(cbs, [&](callback& c) { c.on_train_batch_end(*this, si); });
        }
      }
      current();
      if (validation && validates_after(opts, epoch))
        for (auto& [k, v] : run_evaluate(*validation, cbs)) values["val_" + k] = v;
      progress.end_epoch(step_in_epoch, samples, values);
      for (auto& [k, v] : values) h.add(k, v);
      each(cbs, [&](callback& c) { c.on_epoch_end(*this, epoch, values); });
    }
    if (stop_ && opts.verbose > 0) progress.note("training stopped by a callback");
  } catch (...) {
    seed_ = saved_seed;
    for (auto& c : cbs) {
      try {
        c->on_train_end(*this, true);
      } catch (...) {
        // the first failure is the one fit reports
      }
    }
    throw;
  }
  seed_ = saved_seed;
  if (restore_at_end_ && kept_) {
    for (size_t v = 0; v < params_.size(); ++v) {
      params_[static_cast<variable_id>(v)] = kept_->params[static_cast<variable_id>(v)];
      if (tables_[v] && kept_->tables[v]) {
        tables_[v]->clear();
        tables_[v]->merge(*kept_->tables[v]);
      }
    }
    slots_ = kept_->slots;
    kept_.reset();
  }
  // use_ema: the model is its average from now on (Keras's finalize_variable_values).
  averaged_values{params_, slots_, *opt_, tables_}.keep();
  each(cbs, [&](callback& c) { c.on_train_end(*this, false); });
  return h;
}

history trainer::fit(const std::vector<matrix>& x, const matrix& y, const fit_options& opts) {
  if (opts.batch_size <= 0) throw std::invalid_argument(fmt::format("fit: batch_size = {} <= 0", opts.batch_size));
  check_fit_options(opts);
  std::optional<uint64_t> shuffle_seed;
  if (opts.shuffle) shuffle_seed = opts.seed ? opts.seed : seed_;
  if (opts.validation_split == 0 || opts.validation) return run_fit(tensors(x, y, opts.batch_size, shuffle_seed), opts, opts.validation);
  // Keras: the last rows, before shuffling, are the validation data.
  const Eigen::Index rows = x.empty() ? y.rows() : x[0].rows();
  const auto split_at = static_cast<Eigen::Index>(std::floor(static_cast<double>(rows) * (1 - opts.validation_split)));
  if (split_at <= 0 || split_at >= rows)
    throw std::invalid_argument(fmt::format(
      "fit: validation_split = {} of {} rows leaves {} for training and {} for validation: each needs at least one",
      opts.validation_split, rows, split_at, rows - split_at));
  auto head = [&](const matrix& m, Eigen::Index from, Eigen::Index n) -> matrix {
    if (m.rows() != rows) return m;  // a shape error: tensors() names it
    return m.middleRows(from, n);
  };
  std::vector<matrix> xt, xv;
  for (auto& m : x) {
    xt.push_back(head(m, 0, split_at));
    xv.push_back(head(m, split_at, rows - split_at));
  }
  matrix yt = y.size() == 0 ? y : head(y, 0, split_at), yv = y.size() == 0 ? y : head(y, split_at, rows - split_at);
  std::optional<batch_source> val = tensors(std::move(xv), std::move(yv), opts.batch_size, std::nullopt);
  return run_fit(tensors(std::move(xt), std::move(yt), opts.batch_size, shuffle_seed), opts, val);
}

std::map<std::string, double> trainer::evaluate(const batch_source& data, int verbose,
                                                const std::vector<callback_ptr>& callbacks) {
  for (size_t i = 0; i < callbacks.size(); ++i)
    if (!callbacks[i]) throw std::invalid_argument(fmt::format("evaluate: callbacks[{}] is null", i));
  auto r = run_evaluate(data, callbacks);
  if (verbose > 0) {
    std::string s = "evaluate:";
    for (auto& [k, v] : r) s += fmt::format(" - {}: {:.4f}", k, v);
    std::cout << s << '\n';
  }
  return r;
}

std::map<std::string, double> trainer::run_evaluate(const batch_source& data, const std::vector<callback_ptr>& cbs) {
  if (data.count().infinite)
    throw std::invalid_argument("evaluate: the dataset is infinite (repeat())");
  averaged_values on_average{params_, slots_, *opt_, tables_};  // use_ema: Keras's SwapEMAWeights
  std::vector<metric_ptr> ms;
  for (auto& m : metrics_) ms.push_back(m->clone());
  each(cbs, [&](callback& c) { c.on_test_begin(*this); });
  auto it = data.iterate(0);
  double loss_sum = 0;
  int64_t samples = 0, batch_no = 0;
  std::map<std::string, double> r;
  auto current = [&] {
    r["loss"] = samples > 0 ? loss_sum / static_cast<double>(samples) : 0.0;
    for (auto& m : ms) r[m->name()] = m->result();
  };
  while (auto e = it->next()) {
    check_element(*e);
    each(cbs, [&](callback& c) { c.on_test_batch_begin(*this, batch_no); });
    const matrix& out = exec_.forward(params_, with_tables(*e, false).features, false);
    loss_sum += loss_->compute(out, e->labels, nullptr) * static_cast<double>(e->rows());
    samples += e->rows();
    for (auto& m : ms) m->update(out, e->labels);
    if (!cbs.empty()) {
      current();
      each(cbs, [&](callback& c) { c.on_test_batch_end(*this, batch_no, r); });
    }
    ++batch_no;
  }
  release_tables();
  current();
  each(cbs, [&](callback& c) { c.on_test_end(*this, r); });
  return r;
}

std::map<std::string, double> trainer::evaluate(const std::vector<matrix>& x, const matrix& y,
                                                int64_t batch_size) {
  if (batch_size <= 0) throw std::invalid_argument(fmt::format("evaluate: batch_size = {} <= 0", batch_size));
  return evaluate(tensors(x, y, batch_size, std::nullopt));
}

matrix predict(executor& ex, const parameter_store& params, const batch_source& data,
               const std::function<void(int64_t batch, bool begin)>& each_batch) {
  if (data.count().infinite)
    throw std::invalid_argument("predict: the dataset is infinite (repeat())");
  const auto& m = ex.structure();
  std::vector<matrix> parts;
  auto it = data.iterate(0);
  while (auto e = it->next()) {
    if (e->features.size() != m.num_inputs())
      throw std::invalid_argument(fmt::format("the data has {} feature tensors, the model {} inputs",
                                              e->features.size(), m.num_inputs()));
    if (each_batch) each_batch(static_cast<int64_t>(parts.size()), true);
    ids_as_floats(*e);
    parts.push_back(ex.forward(params, e->features, false));
    if (each_batch) each_batch(static_cast<int64_t>(parts.size()) - 1, false);
  }
  return stack_rows(parts, m.output_width());
}

namespace {

// A source whose batches are another's passed through `f`, one at a time as they are taken.
class mapped_batches final : public batch_source::impl {
 public:
  mapped_batches(batch_source inner, std::function<batch(batch)> f) : inner_(std::move(inner)), f_(std::move(f)) {}
  std::unique_ptr<batch_iterator> iterate(uint64_t epoch) const override {
    struct it final : batch_iterator {
      std::unique_ptr<batch_iterator> inner;
      const std::function<batch(batch)>* f;
      std::optional<batch> next() override {
        auto b = inner->next();
        if (!b) return b;
        return (*f)(std::move(*b));
      }
    };
    auto out = std::make_unique<it>();
    out->inner = inner_.iterate(epoch);
    out->f = &f_;
    return out;
  }
  batch_count count() const override { return inner_.count(); }

 private:
  batch_source inner_;
  std::function<batch(batch)> f_;
};

}  // namespace

matrix trainer::predict(const batch_source& data, const std::vector<callback_ptr>& cbs) {
  for (size_t i = 0; i < cbs.size(); ++i)
    if (!cbs[i]) throw std::invalid_argument(fmt::format("predict: callbacks[{}] is null", i));
  averaged_values on_average{params_, slots_, *opt_, tables_};  // use_ema
  // With dynamic tables each batch is renumbered as it is taken, just before its forward.
  batch_source source = data;
  bool any = false;
  for (auto& t : tables_) any = any || t;
  if (any) source = batch_source{std::make_shared<mapped_batches>(data, [this](batch b) {
                      with_tables(b, false);
                      return renumbered_;
                    })};
  if (cbs.empty()) {
    auto out = ::actortrain::model::predict(exec_, params_, source);
    release_tables();
    return out;
  }
  each(cbs, [&](callback& c) { c.on_predict_begin(*this); });
  auto out = ::actortrain::model::predict(exec_, params_, source, [&](int64_t b, bool begin) {
    each(cbs, [&](callback& c) {
      if (begin)
        c.on_predict_batch_begin(*this, b);
      else
        c.on_predict_batch_end(*this, b);
    });
  });
  release_tables();
  each(cbs, [&](callback& c) { c.on_predict_end(*this); });
  return out;
}

matrix trainer::predict(const std::vector<matrix>& x, int64_t batch_size) {
  if (batch_size <= 0) throw std::invalid_argument(fmt::format("predict: batch_size = {} <= 0", batch_size));
  if (x.empty()) throw std::invalid_argument("predict: no inputs");
  return predict(tensors(x, matrix(x[0].rows(), 0), batch_size, std::nullopt));
}

}  // namespace actortrain::model
