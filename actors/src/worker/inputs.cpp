// What a step needs before it computes (state.hpp): its batch (prefetched while the
// step before computes), and its parameters — pulled from every shard, pulled ahead
// (pull_ahead), or reused and moved by the local learning rate (pull_every).
#include <actortrain/model/layers/embedding.hpp>

#include <algorithm>
#include <limits>

#include "state.hpp"

namespace actortrain::worker_detail {

// Downpour's local update: the copy the next steps reuse moves by -lr x this step's
// gradient (a new matrix each: the pulled one may be the shard's own, shared).
void local_step(worker_state& st) {
  auto lr = static_cast<float>(st.opts.local_learning_rate);
  for (size_t v = 0; v < st.grads.is_sparse.size(); ++v) {
    auto id = static_cast<model::variable_id>(v);
    if (st.grads.is_sparse[v] || !st.last_pulled.has(id)) continue;
    st.last_pulled.adopt(id, std::make_shared<model::matrix>(st.last_pulled[id] - lr * st.grads.dense[v]));
  }
}

namespace {

bool same_fence(const fence& a, const fence& b) {
  return a.coordinator_epoch == b.coordinator_epoch && a.recovery_epoch == b.recovery_epoch &&
         a.worker_generation == b.worker_generation && a.worker == b.worker;
}

// The step after the current one, its fence and whether it trains, if one is known
// (this task's next step, or the first of the next queued task).
struct known_step {
  fence f;
  step_id step;
  bool training = false;
};
std::optional<known_step> next_step(const worker_state& st) {
  if (st.next < st.task.steps.size()) return known_step{st.task.f, st.task.steps[st.next], st.task.training};
  if (!st.waiting.empty()) {
    const auto& t = st.waiting.front().first;
    return known_step{t.f, t.steps.front(), t.training};
  }
  return std::nullopt;
}

// Makes the round's values the step's parameters, asks ahead for the next step's (with
// pull_ahead), and computes.
void install_round(self_ptr self) {
  auto& st = self->state;
  st.round.active = false;
  if (st.renumber) {  // the batch's ids point into the compact tables send_rows made
    st.renumber = false;
    const auto& feeds = st.opts.structure.row_feeds();
    for (size_t v = 0; v < st.compact.size(); ++v)
      if (st.by_rows[v] && st.compact[v]) model::renumber_rows(st.batch, feeds[v], st.row_ids[v]);
  }
  st.params = std::move(st.round.values);
  st.read_version = std::move(st.round.read_version);
  if (st.opts.pull_every > 1 && st.task.training && !st.round.reused) {
    st.last_pulled = st.params;  // shares the matrices
    st.last_read_version = st.read_version;
    st.last_fence = st.task.f;
    st.reuses_left = st.opts.pull_every - 1;
  }
  if (st.opts.pull_ahead)
    if (auto n = next_step(st)) send_round(self, n->f, n->step, n->training);
  compute(self);
}

}  // namespace

// A pull of round `id` to shard `p` failed: the round is dropped (one asked ahead is
// asked again when its step starts), and the step waiting for it fails.
void round_failed(self_ptr self, uint64_t id, int p, caf::error e) {
  auto& st = self->state;
  auto& rd = st.round;
  if (!rd.active || rd.id != id) return;
  bool awaited = rd.awaited && rd.seq == st.seq;
  rd = worker_state::pull_round{};
  if (awaited) fail(self, shard_error(st, p, std::move(e)));
}

// Opens a round for `step` (dropping any other): what to ask each shard, by ps index.
std::vector<std::vector<partition_key>> open_round(self_ptr self, const fence& f, const step_id& step, bool training) {
  auto& st = self->state;
  const auto& pl = *st.opts.placement;
  std::vector<std::vector<partition_key>> asks(static_cast<size_t>(pl.num_ps()));
  for (auto& vp : pl.variables()) {
    if (st.by_rows[static_cast<size_t>(vp.variable)]) continue;  // by row, once the batch is known
    for (auto& part : vp.partitions) asks[static_cast<size_t>(part.ps)].push_back(partition_key{vp.variable, part.index});
  }
  auto& rd = st.round;
  rd = worker_state::pull_round{};
  rd.active = true;
  rd.id = ++st.round_id;
  rd.f = f;
  rd.step = step;
  rd.training = training;
  rd.values = model::parameter_store{st.opts.structure.variables().size()};
  rd.read_version.assign(st.opts.structure.variables().size(), 0);
  for (auto& a : asks)
    if (!a.empty()) ++rd.outstanding;
  rd.asked = asks;
  return asks;
}

namespace {

// Why shard `p`'s answer cannot be what round `rd` asked it (each partition asked, once,
// of the partition's shape), or "".
std::string misfit(const worker_state& st, const worker_state::pull_round& rd, int p,
                   const std::vector<partition_value>& values) {
  const auto& asked = rd.asked.at(static_cast<size_t>(p));
  if (values.size() != asked.size()) return fmt::format("{} partitions for the {} asked", values.size(), asked.size());
  std::vector<bool> seen(asked.size());
  for (auto& pv : values) {
    auto at = std::find(asked.begin(), asked.end(), pv.key);
    if (at == asked.end() || seen[static_cast<size_t>(at - asked.begin())])
      return fmt::format("partition {}:{}, which it was not asked for (or twice)", pv.key.variable, pv.key.index);
    seen[static_cast<size_t>(at - asked.begin())] = true;
    const auto& vp = st.opts.placement->variable(pv.key.variable);
    const auto& part = vp.partitions[static_cast<size_t>(pv.key.index)];
    if (!pv.value.value || pv.value.rows() != part.rows() || pv.value.cols() != vp.shape.cols)
      return fmt::format("{} partition {} as [{} x {}], which is [{} x {}]", vp.name, pv.key.index,
                         pv.value.value ? pv.value.rows() : 0, pv.value.value ? pv.value.cols() : 0, part.rows(),
                         vp.shape.cols);
  }
  return {};
}

}  // namespace

// Shard `p`'s values for round `id` (a pull's reply, or a push's with pull_with_push);
// the last of the round installs it when its step waits. Values that are not what was
// asked drop the round and fail the task.
void round_values(self_ptr self, uint64_t id, int p, std::vector<partition_value>& values) {
  auto& st = self->state;
  auto& rd = st.round;
  if (!rd.active || rd.id != id || rd.outstanding == 0) return;
  if (auto why = misfit(st, rd, p, values); !why.empty()) {
    rd = worker_state::pull_round{};
    if (st.busy)
      fail(self, make_error(error_code::invalid_request,
                            fmt::format("worker {}: ps shard {} answered {}", st.opts.id, p, why)));
    return;
  }
  const auto& pl = *st.opts.placement;
  for (auto& pv : values) {
    auto v = static_cast<size_t>(pv.key.variable);
    rd.read_version[v] = std::max(rd.read_version[v], pv.version);
    store_partition(rd.values, pl, pv, /*share=*/true);  // whole variables: zero copy
  }
  if (--rd.outstanding == 0 && rd.awaited && rd.seq == st.seq) install_round(self);
}

// Pulls every variable from the shards that hold it, in parallel, as one round.
void send_round(self_ptr self, const fence& f, const step_id& step, bool training) {
  auto& st = self->state;
  auto asks = open_round(self, f, step, training);
  for (size_t p = 0; p < asks.size(); ++p) {
    if (asks[p].empty()) continue;
    pull_request r{f, std::move(asks[p]), training};
    st.opts.seam->request(self, st.opts.ps[p], via(st, static_cast<int>(p)), st.opts.timeout, pull_atom::value, std::move(r))
      .then([self, id = st.round.id, p](pull_reply& rep) { round_values(self, id, static_cast<int>(p), rep.values); },
            [self, id = st.round.id, p](caf::error& e) { round_failed(self, id, static_cast<int>(p), std::move(e)); });
  }
}

namespace {

// Adds to the round the rows of the current batch of every table pulled by row: the ids
// in its feeds (values that are no valid id are left to the embedding layer to report),
// asked of the shards that hold them. A table that owns its feeds (model::compact_rows)
// gets a table of those rows alone (batch_rows.hpp), which install_round makes the
// batch's ids point into; another gets them in a buffer of the whole table. False, the
// step failed and the round dropped, when a batch has more ids than such a table numbers.
bool send_rows(self_ptr self) {
  auto& st = self->state;
  auto& rd = st.round;
  const auto& pl = *st.opts.placement;
  const auto& feeds = st.opts.structure.row_feeds();
  for (size_t v = 0; v < st.by_rows.size(); ++v) {
    if (!st.by_rows[v]) continue;
    auto vid = static_cast<model::variable_id>(v);
    const auto& vp = pl.variable(vid);
    const bool compact = st.compact[v];
    auto& ids = st.row_ids[v];  // kept for install_round and the push
    // A dynamic table's ids are any the features hold: int64 ids, or floats below 2^24.
    ids = model::batch_row_ids(st.batch, feeds[v], vp.dynamic ? std::numeric_limits<int64_t>::max() : vp.shape.rows);
    if (compact && static_cast<int64_t>(ids.size()) > model::layers::max_float_id) {
      fail(self, make_error(error_code::user_error,
                            fmt::format("step {}: {} distinct ids of table {} in one batch: a step holds at most 2^24 "
                                        "(its rows are numbered by floats)",
                                        to_string(st.current.step), ids.size(), vp.name)));
      rd = worker_state::pull_round{};  // the step failed: nothing installs this round
      return false;
    }
    auto& table = st.tables[v];
    if (compact) {
      // The buffer of an earlier step is reused once nothing else holds it.
      if (!table || table.use_count() > 1) table = std::make_shared<model::matrix>();
      table->resize(static_cast<Eigen::Index>(ids.size()), vp.shape.cols);
      st.renumber = true;
    } else if (!table) {
      table = std::make_shared<model::matrix>(model::matrix::Zero(vp.shape.rows, vp.shape.cols));
    }
    rd.values.adopt(vid, table);
    if (ids.empty()) continue;
    for (auto& grp : pl.group_rows(vid, ids)) {
      pull_rows_request req;
      req.f = st.task.f;
      req.variable = vid;
      req.training = st.task.training;  // what a dynamic table counts as an unadmitted read
      std::vector<int64_t> rows;  // where each asked id goes in the worker's table
      for (auto p : grp.positions) {
        req.ids.push_back(ids[p]);
        rows.push_back(compact ? static_cast<int64_t>(p) : ids[p]);
      }
      ++rd.outstanding;
      auto p = grp.ps;
      auto asked = req.ids;
      st.opts.seam->request(self, st.opts.ps[static_cast<size_t>(p)], via(st, p), st.opts.timeout, pull_rows_atom::value, std::move(req))
        .then(
          [self, id = rd.id, v, asked = std::move(asked), rows = std::move(rows)](rows_reply& rep) {
            auto& st = self->state;
            auto& rd = st.round;
            if (!rd.active || rd.id != id || rd.outstanding == 0) return;
            auto& table = *st.tables[v];
            if (!rep.rows.value || rep.ids != asked || rep.rows.rows() != static_cast<int64_t>(asked.size()) ||
                rep.rows.cols() != table.cols()) {
              rd = worker_state::pull_round{};
              fail(self, make_error(error_code::invalid_request,
                                    fmt::format("worker {}: a ps shard answered {} ids of {} with rows of [{} x {}], "
                                                "asked for {} ids",
                                                st.opts.id, rep.ids.size(), st.opts.structure.variables()[v].name,
                                                rep.rows.rows(), rep.rows.cols(), asked.size())));
              return;
            }
            for (size_t j = 0; j < rows.size(); ++j)
              table.row(static_cast<Eigen::Index>(rows[j])) = rep.rows.value->row(static_cast<Eigen::Index>(j));
            rd.read_version[v] = std::max(rd.read_version[v], rep.version);
            if (--rd.outstanding == 0 && rd.awaited && rd.seq == st.seq) install_round(self);
          },
          [self, id = rd.id, p](caf::error& e) { round_failed(self, id, p, std::move(e)); });
    }
  }
  return true;
}

}  // namespace

// The step needs its parameters: from the round sent ahead when it is for this fence,
// else from a new one.
void pull(self_ptr self) {
  auto& st = self->state;
  st.phase_start = clock_type::now();
  auto& rd = st.round;
  // Downpour's n_fetch: the dense variables of the last pull, while they may serve.
  if (st.reuses_left > 0 && st.task.training && same_fence(st.last_fence, st.task.f) && !rd.active) {
    --st.reuses_left;
    rd = worker_state::pull_round{};
    rd.active = true;
    rd.reused = true;
    rd.id = ++st.round_id;
    rd.f = st.task.f;
    rd.step = st.current.step;
    rd.values = st.last_pulled;
    rd.read_version = st.last_read_version;
    if (!send_rows(self)) return;
    if (rd.outstanding == 0) {
      install_round(self);
      return;
    }
    rd.awaited = true;
    rd.seq = st.seq;
    return;
  }
  st.reuses_left = 0;
  if (!rd.active || !same_fence(rd.f, st.task.f) || rd.step != st.current.step || rd.training != st.task.training)
    send_round(self, st.task.f, st.current.step, st.task.training);
  if (!send_rows(self)) return;
  if (rd.outstanding == 0) {
    install_round(self);
    return;
  }
  rd.awaited = true;
  rd.seq = st.seq;
}

// The batch of the current step arrived.
void on_batch(self_ptr self, batch_reply& r) {
  auto& st = self->state;
  st.current.timings.batch_us = micros_since(st.phase_start);
  if (r.end_of_data) {
    // The rest of the task is past the end too: report it and stop. Parameters asked
    // ahead for a step past the end are dropped: the next epoch begins at that position,
    // under the same step id, and must read parameters pulled after it was dispatched.
    if (st.round.active && !st.round.awaited) st.round = worker_state::pull_round{};
    st.current.end_of_data = true;
    auto& res = st.records[st.current_record].result;
    res.steps.push_back(std::move(st.current));
    for (; st.next < st.task.steps.size(); ++st.next) {
      step_result s;
      s.step = st.task.steps[st.next];
      s.worker = st.opts.id;
      s.generation = st.task.f.worker_generation;
      s.end_of_data = true;
      res.steps.push_back(s);
    }
    if (!st.acc_steps.empty()) {
      push_group(self);  // the steps before the end (the task ends once they are pushed)
      return;
    }
    finish_task(self);
    return;
  }
  st.batch = to_element(std::move(r.batch));
  if (st.batch.features.size() != st.opts.structure.num_inputs()) {
    fail(self, make_error(error_code::user_error,
                          fmt::format("step {}: the batch has {} feature tensors, the model {} inputs",
                                      to_string(st.current.step), st.batch.features.size(),
                                      st.opts.structure.num_inputs())));
    return;
  }
  for (size_t k = 0; k < st.batch.ids.size(); ++k)
    if (st.batch.is_ids(k) && (k >= st.batch.features.size() || st.batch.features[k].cols() != 0 ||
                               st.batch.ids[k].rows() != st.batch.rows())) {
      fail(self, make_error(error_code::user_error,
                            fmt::format("step {}: the batch's input {} has {} rows of ids beside {} floats, its "
                                        "other inputs {} rows",
                                        to_string(st.current.step), k, st.batch.ids[k].rows(),
                                        k < st.batch.features.size() ? model::shape_string(st.batch.features[k]) : "no",
                                        st.batch.rows())));
      return;
    }
  // The ledgers record which batch each applied step used (ledger.hpp).
  if (st.task.training) st.current.digest = dataset::element_digest(st.batch);
  if (st.batch.has_ids()) {
    try {
      model::ids_as_floats(st.batch, st.ids_kept);  // the ids no compact table renumbers
    } catch (const std::invalid_argument& e) {
      fail(self, make_error(error_code::user_error, fmt::format("step {}: {}", to_string(st.current.step), e.what())));
      return;
    }
  }
  prefetch_next(self);
  pull(self);
}

// Asks for the batch of the step after the current one (in this task, or the first of
// the next queued task) so that it is there when that step starts.
void prefetch_next(self_ptr self) {
  auto& st = self->state;
  const step_task* t = nullptr;
  size_t index = 0;
  if (st.next < st.task.steps.size()) {
    t = &st.task;
    index = st.next;
  } else if (!st.waiting.empty()) {
    t = &st.waiting.front().first;
  }
  if (!t || !t->source) return;
  auto& pf = st.prefetch;
  // Asked for already: a task that arrived during the last step of the one before asked
  // for its first batch then (worker.cpp); asking again fetched every such batch twice.
  if (pf.is_for(*t, t->steps[index])) return;
  pf = worker_state::prefetch_slot{};
  pf.active = true;
  pf.step = t->steps[index];
  pf.epoch = t->epoch;
  pf.epoch_begin = t->epoch_begin;
  pf.source = t->source;
  pf.id = ++st.prefetch_id;
  st.opts.seam
    ->request(self, t->source, st.opts.timeout, batch_atom::value,
              batch_request{t->f, pf.step, t->epoch, t->epoch_begin})
    .then(
      [self, id = pf.id](batch_reply& r) {
        auto& pf = self->state.prefetch;
        if (!pf.active || pf.id != id) return;
        if (pf.awaited) {
          pf.active = false;
          if (self->state.seq == pf.seq) on_batch(self, r);
          return;
        }
        pf.arrived = true;
        pf.reply = std::move(r);
      },
      [self, id = pf.id](caf::error& e) {
        auto& pf = self->state.prefetch;
        if (!pf.active || pf.id != id) return;
        bool awaited = pf.awaited;
        auto seq = pf.seq;
        pf.active = false;  // a failed prefetch is asked for again when the step starts
        if (awaited && self->state.seq == seq) fail(self, batch_error(self->state, std::move(e)));
      });
}

}  // namespace actortrain::worker_detail
