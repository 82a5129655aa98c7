#include <actortrain/actors/core/errors.hpp>
#include <actortrain/actors/worker/worker.hpp>
#include <actortrain/dataset/digest.hpp>
#include <actortrain/model/digest.hpp>
#include <actortrain/model/fpu.hpp>
#include <actortrain/model/layers/gemm_tuning.hpp>
#include <actortrain/model/random.hpp>

#include <algorithm>
#include <cmath>
#include <deque>
#include <set>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "../core/planted.hpp"
#include "../core/thread_name.hpp"
#include "gradient_slices.hpp"

namespace actortrain {

namespace {

using clock_type = std::chrono::steady_clock;

uint64_t micros_since(clock_type::time_point t) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(clock_type::now() - t).count());
}

struct worker_state {
  worker_options opts;
  std::unique_ptr<model::executor> exec;
  model::parameter_store params;
  model::gradient_store grads;
  std::vector<std::unique_ptr<model::metric>> metrics;
  model::matrix d_out;
  // Tasks whose answer is pending: a task is answered once every step is computed and
  // every push of every step acknowledged. Pushes are not waited for before the next
  // step starts: CAF keeps each sender's messages in order, so the next pull reaches
  // every shard after this push and sees its update.
  struct task_record {
    caf::typed_response_promise<task_result> rp;
    task_result result;
    size_t pending = 0;     // push acknowledgements outstanding
    bool computed = false;  // every step computed and pushed
  };
  std::map<uint64_t, task_record> records;
  uint64_t next_record = 0;
  // The newest epochs a task carried: a task of an older coordinator (a zombie) or from
  // before a recovery is refused.
  fence newest;
  // The task being computed.
  uint64_t current_record = 0;
  step_task task;
  size_t next = 0;
  bool busy = false;
  // Tasks that arrived while busy (the coordinator may re-send after a timeout of its
  // own), served in order.
  std::deque<std::pair<step_task, caf::typed_response_promise<task_result>>> waiting;
  // Increases with every step attempt: replies that belong to an earlier step (late
  // after a timeout) are recognized and ignored.
  uint64_t seq = 0;
  // The batch of the next step, asked for while this one computes.
  struct prefetch_slot {
    bool active = false;   // a request is out (or its answer is kept)
    bool arrived = false;  // the answer is in `reply`
    bool awaited = false;  // the step has started and waits for the answer
    uint64_t id = 0;
    uint64_t seq = 0;      // the step attempt that waits
    step_id step;
    // The pass it belongs to: a position past an epoch's end is the next epoch's first
    // under the same step id, so a batch asked for one must not serve the other.
    uint64_t epoch = 0, epoch_begin = 0;
    caf::actor source;
    batch_reply reply;
  };
  prefetch_slot prefetch;
  uint64_t prefetch_id = 0;
  // The step in progress.
  dataset::element batch;
  step_result current;
  clock_type::time_point phase_start;
  std::vector<uint64_t> read_version;  // per variable (max over its partitions)
  // One set of pulls to every shard. With pull_ahead the next step's round is sent when
  // a step starts computing, and its answers wait in the mailbox until that step.
  struct pull_round {
    bool active = false;   // requests are out (or their answers are kept)
    bool awaited = false;  // a step waits for the answers
    uint64_t id = 0;
    uint64_t seq = 0;  // the step attempt that waits
    fence f;           // asked under this fence,
    step_id step;      // for this step: used by no other (it may have been asked before
                       // the other was dispatched, which the consistency modes forbid)
    size_t outstanding = 0;
    model::parameter_store values;
    std::vector<uint64_t> read_version;
    bool reused = false;  // the values are the last pull's (pull_every)
  };
  pull_round round;
  uint64_t round_id = 0;
  // pull_every > 1: the dense variables last pulled for a training step, reused by the
  // next pull_every - 1 training steps under the same epochs.
  model::parameter_store last_pulled;
  std::vector<uint64_t> last_read_version;
  fence last_fence;
  int reuses_left = 0;
  // The gradient buffers last pushed, per variable: reused for a later step once the
  // shard has let go of them (in-process), so a step allocates no gradient memory.
  std::vector<std::shared_ptr<const model::matrix>> sent;
  // push_every > 1: the mean of the gradients of the task's steps computed since the
  // last push (gradient_slices.hpp), and those steps.
  gradient_mean acc;
  std::vector<step_result> acc_steps;
  // Per variable: pulled by row (an embedding table fed by model inputs), and the
  // worker's buffer of it (only the rows of the current step are current).
  std::vector<bool> by_rows;
  std::vector<std::shared_ptr<model::matrix>> tables;
  // Shards in other processes that this worker monitors: a request to one that died is
  // never answered (CAF 0.17 fails it only at its timeout), so the down message fails it.
  std::set<caf::actor_addr> watched;
  // Remote shards that went down: a task naming one fails at once, until a task of
  // newer epochs (after the coordinator's recovery) arrives.
  std::set<caf::actor_addr> lost;
  static inline const char* name = "worker";
};

using self_ptr = worker_actor::stateful_pointer<worker_state>;

void run_next(self_ptr self);
void prefetch_next(self_ptr self);
void send_round(self_ptr self, const fence& f, const step_id& step);

void start(self_ptr self, step_task task, caf::typed_response_promise<task_result> rp) {
  auto& st = self->state;
  st.busy = true;
  st.task = std::move(task);
  st.next = 0;
  st.acc_steps.clear();  // a failed task's partial group is gone with it
  st.acc.clear();
  st.current_record = st.next_record++;
  st.records[st.current_record].rp = std::move(rp);
  run_next(self);
}

// Answers a task when it is complete.
void maybe_answer(self_ptr self, uint64_t id) {
  auto& st = self->state;
  auto i = st.records.find(id);
  if (i == st.records.end() || !i->second.computed || i->second.pending > 0) return;
  auto& steps = i->second.result.steps;
  std::sort(steps.begin(), steps.end(), [](const step_result& a, const step_result& b) { return a.step < b.step; });
  i->second.rp.deliver(std::move(i->second.result));
  st.records.erase(i);
}

void start_waiting(self_ptr self) {
  auto& st = self->state;
  if (st.busy || st.waiting.empty()) return;
  auto next = std::move(st.waiting.front());
  st.waiting.pop_front();
  start(self, std::move(next.first), std::move(next.second));
}

// A batch request that bounced off a dead dataset shard: the coordinator rebuilds the
// shard and re-runs the step, so it says so (and does not blame the step).
caf::error batch_error(const worker_state& st, caf::error e) {
  if (e != caf::sec::request_receiver_down) return e;
  return make_error(error_code::source_lost,
                    fmt::format("worker {}, step {}: its dataset shard is gone", st.opts.id, to_string(st.current.step)));
}

// A request to ps shard `p` bounced off a dead actor: say so (shard_lost), so that the
// coordinator does not read the bounce as the loss of this worker.
caf::error shard_error(const worker_state& st, int p, caf::error e) {
  if (e != caf::sec::request_receiver_down) return e;
  return make_error(error_code::shard_lost,
                    fmt::format("worker {}, step {}: ps shard {} is gone", st.opts.id, to_string(st.current.step), p));
}

// Task `id` failed: answer it with the error; stop computing it if it is the current one.
void fail_record(self_ptr self, uint64_t id, caf::error err) {
  auto& st = self->state;
  // An application error ends the run: queued tasks would only compute on after it, so
  // they fail too. After a transport error (a timeout) the worker goes on with its queue.
  if (is_application_error(err)) {
    for (auto& w : st.waiting) w.second.deliver(err);
    st.waiting.clear();
  }
  if (auto i = st.records.find(id); i != st.records.end()) {
    i->second.rp.deliver(err);
    st.records.erase(i);
  }
  if (st.busy && st.current_record == id) {
    st.params.release();
    st.busy = false;
    ++st.seq;
    start_waiting(self);
  }
}

void fail(self_ptr self, caf::error err) { fail_record(self, self->state.current_record, std::move(err)); }

// Every task this worker holds fails with `err`: the one computing, those waiting for
// push acknowledgements, and the queued ones (they would ask the same lost shard).
void fail_all(self_ptr self, const caf::error& err) {
  auto& st = self->state;
  for (auto& w : st.waiting) w.second.deliver(err);
  st.waiting.clear();
  std::vector<uint64_t> ids;
  for (auto& [id, rec] : st.records) ids.push_back(id);
  for (auto id : ids) fail_record(self, id, err);
}

// Monitors the shards in other processes among the current ones (once each).
void watch_remote_shards(self_ptr self) {
  auto& st = self->state;
  for (auto& p : st.opts.ps) {
    auto a = p.address();
    if (!p || a.node() == self->node() || st.watched.count(a)) continue;
    st.watched.insert(a);
    self->monitor(p);
  }
}

// Every step of the current task is computed (its pushes may still be in flight).
void finish_task(self_ptr self) {
  auto& st = self->state;
  st.busy = false;
  st.params.release();
  auto id = st.current_record;
  if (auto i = st.records.find(id); i != st.records.end()) i->second.computed = true;
  maybe_answer(self, id);
  start_waiting(self);
}

// Pushes each shard its slices for `group` (the current step, or the steps whose mean
// gradient st.grads holds); the steps are done when every shard acknowledged.
void push(self_ptr self, std::vector<step_result> group) {
  auto& st = self->state;
  const int nps = st.opts.placement->num_ps();
  push_header h;
  h.f = st.task.f;
  for (auto& g : group) {
    h.steps.push_back(g.step);
    h.example_count += g.example_count;
    h.digests.push_back(g.digest);
  }
  h.watermark = st.task.watermark;
  h.attempt = st.seq;
  auto reqs = slice_gradients(*st.opts.placement, st.grads, st.read_version, st.sent, h);
  // The step's acknowledgements are collected on the side while the next step runs.
  struct acks {
    std::vector<step_result> results;
    size_t remaining = 0;
    clock_type::time_point sent;
  };
  auto a = std::make_shared<acks>();
  a->results = std::move(group);
  a->sent = clock_type::now();
  for (auto& r : reqs)
    if (!r.dense.empty() || !r.sparse.empty()) ++a->remaining;
  auto id = st.current_record;
  auto& rec = st.records[id];
  // Test-only defects, at every attempt of step 2 of pipeline 0 (so a re-run or a
  // roll-back does not heal them): reported applied without its push, or pushed under a
  // step id that is not its own (a position past the data).
  if (auto* plant = st.opts.plant.get()) {
    bool target = false;
    for (auto& r : a->results) target = target || (r.step.pipeline == 0 && r.step.position == 2);
    if (target && plant->which == planted_defect::skip_step) {
      plant->fired();
      a->remaining = 0;
    } else if (target && plant->which == planted_defect::foreign_step) {
      plant->fired();
      for (auto& r : reqs) r.step.position += 1000000;
    }
  }
  if (a->remaining == 0) {
    for (auto& r : a->results) rec.result.steps.push_back(std::move(r));
    run_next(self);
    return;
  }
  rec.pending += a->remaining;
  for (int p = 0; p < nps; ++p) {
    auto& r = reqs[static_cast<size_t>(p)];
    if (r.dense.empty() && r.sparse.empty()) continue;
    st.opts.seam->request(self, st.opts.ps[static_cast<size_t>(p)], st.opts.timeout, push_atom::value, std::move(r))
      .then(
        [self, id, a](push_reply& rep) {
          auto& st = self->state;
          auto i = st.records.find(id);
          if (i == st.records.end()) return;  // the task failed already
          for (auto& r : a->results) r.max_staleness = std::max(r.max_staleness, rep.max_staleness);
          --i->second.pending;
          if (--a->remaining == 0) {
            for (auto& r : a->results) {
              r.timings.push_us = micros_since(a->sent);
              i->second.result.steps.push_back(std::move(r));
            }
            if (!st.opts.overlap_push && st.busy && st.current_record == id) run_next(self);
          }
          maybe_answer(self, id);
        },
        [self, id, p](caf::error& e) { fail_record(self, id, shard_error(self->state, p, std::move(e))); });
  }
  if (st.opts.overlap_push) run_next(self);
}

void push_group(self_ptr self);

// push_every > 1: adds this step's gradients (weighted by its examples) to the group's;
// pushes their mean once the group is full or the task has no step left.
void accumulate(self_ptr self) {
  auto& st = self->state;
  if (auto f = st.acc.add(*st.opts.placement, st.grads, st.current.example_count, st.read_version)) {
    fail(self, make_error(f.code, fmt::format("worker {}: {}", st.opts.id, f.what)));
    return;
  }
  st.acc_steps.push_back(std::move(st.current));
  if (static_cast<int>(st.acc_steps.size()) < st.opts.push_every && st.next < st.task.steps.size()) {
    run_next(self);
    return;
  }
  push_group(self);
}

// Pushes the mean of the group's gradients (push_every > 1).
void push_group(self_ptr self) {
  auto& st = self->state;
  st.acc.take(st.grads, st.read_version);
  auto group = std::move(st.acc_steps);
  st.acc_steps.clear();
  push(self, std::move(group));
}

std::string check_gradients(const worker_state& st) {
  const auto& specs = st.opts.structure.variables();
  for (size_t v = 0; v < specs.size(); ++v) {
    bool finite = st.grads.is_sparse[v] ? model::all_finite(st.grads.sparse[v].rows) : model::all_finite(st.grads.dense[v]);
    if (!finite) return fmt::format("gradient of {} is not finite", specs[v].name);
  }
  return {};
}

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

void compute(self_ptr self) {
  auto& st = self->state;
  st.current.timings.pull_us = micros_since(st.phase_start);
  auto t = clock_type::now();
  const auto& out = st.exec->forward(st.params, st.batch.features, st.task.training,
                                     model::draw(st.opts.seed, st.current.step.position, st.current.step.pipeline));
  st.current.example_count = st.batch.rows();
  if (st.task.outputs) {
    st.current.outputs = tensor{model::matrix(out)};  // predict: the data may have no labels
  } else {
    st.current.loss = st.opts.loss->compute(out, st.batch.labels, st.task.training ? &st.d_out : nullptr);
    st.current.metric_states.clear();
    for (auto& m : st.metrics) {
      m->reset();
      m->update(out, st.batch.labels);
      st.current.metric_states.push_back(m->state());
    }
  }
  if (!st.task.training) {
    st.params.release();
    st.current.timings.compute_us = micros_since(t);
    st.records[st.current_record].result.steps.push_back(std::move(st.current));
    run_next(self);
    return;
  }
  st.grads.zero();
  st.exec->backward(st.params, st.d_out, st.grads);
  st.params.release();  // let the shards write in place
  st.current.timings.compute_us = micros_since(t);
  auto problem = check_gradients(st);
  if (!problem.empty()) {
    fail(self, make_error(error_code::invalid_gradient,
                          fmt::format("worker {}, step {}: {}", st.opts.id, to_string(st.current.step), problem)));
    return;
  }
  if (st.opts.local_learning_rate > 0 && st.reuses_left > 0) local_step(st);
  if (st.opts.push_every > 1) {
    accumulate(self);
    return;
  }
  std::vector<step_result> one;
  one.push_back(std::move(st.current));
  push(self, std::move(one));
}

bool same_fence(const fence& a, const fence& b) {
  return a.coordinator_epoch == b.coordinator_epoch && a.recovery_epoch == b.recovery_epoch &&
         a.worker_generation == b.worker_generation && a.worker == b.worker;
}

// The step after the current one and its fence, if one is known (this task's next
// step, or the first of the next queued task).
std::optional<std::pair<fence, step_id>> next_step(const worker_state& st) {
  if (st.next < st.task.steps.size()) return std::make_pair(st.task.f, st.task.steps[st.next]);
  if (!st.waiting.empty()) return std::make_pair(st.waiting.front().first.f, st.waiting.front().first.steps.front());
  return std::nullopt;
}

// Makes the round's values the step's parameters, asks ahead for the next step's (with
// pull_ahead), and computes.
void install_round(self_ptr self) {
  auto& st = self->state;
  st.round.active = false;
  st.params = std::move(st.round.values);
  st.read_version = std::move(st.round.read_version);
  if (st.opts.pull_every > 1 && st.task.training && !st.round.reused) {
    st.last_pulled = st.params;  // shares the matrices
    st.last_read_version = st.read_version;
    st.last_fence = st.task.f;
    st.reuses_left = st.opts.pull_every - 1;
  }
  if (st.opts.pull_ahead)
    if (auto n = next_step(st)) send_round(self, n->first, n->second);
  compute(self);
}

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

// Pulls every variable from the shards that hold it, in parallel, as one round.
void send_round(self_ptr self, const fence& f, const step_id& step) {
  auto& st = self->state;
  const auto& pl = *st.opts.placement;
  const int nps = pl.num_ps();
  std::vector<pull_request> reqs(static_cast<size_t>(nps));
  for (auto& vp : pl.variables()) {
    if (st.by_rows[static_cast<size_t>(vp.variable)]) continue;  // by row, once the batch is known
    for (auto& part : vp.partitions)
      reqs[static_cast<size_t>(part.ps)].partitions.push_back(partition_key{vp.variable, part.index});
  }
  auto& rd = st.round;
  rd = worker_state::pull_round{};
  rd.active = true;
  rd.id = ++st.round_id;
  rd.f = f;
  rd.step = step;
  rd.values = model::parameter_store{st.opts.structure.variables().size()};
  rd.read_version.assign(st.opts.structure.variables().size(), 0);
  for (auto& r : reqs)
    if (!r.partitions.empty()) ++rd.outstanding;
  for (int p = 0; p < nps; ++p) {
    auto& r = reqs[static_cast<size_t>(p)];
    if (r.partitions.empty()) continue;
    r.f = f;
    st.opts.seam->request(self, st.opts.ps[static_cast<size_t>(p)], st.opts.timeout, pull_atom::value, std::move(r))
      .then(
        [self, id = rd.id](pull_reply& rep) {
          auto& st = self->state;
          auto& rd = st.round;
          if (!rd.active || rd.id != id || rd.outstanding == 0) return;
          const auto& pl = *st.opts.placement;
          for (auto& pv : rep.values) {
            auto v = static_cast<size_t>(pv.key.variable);
            rd.read_version[v] = std::max(rd.read_version[v], pv.version);
            store_partition(rd.values, pl, pv, /*share=*/true);  // whole variables: zero copy
          }
          if (--rd.outstanding == 0 && rd.awaited && rd.seq == st.seq) install_round(self);
        },
        [self, id = rd.id, p](caf::error& e) { round_failed(self, id, p, std::move(e)); });
  }
}

// Adds to the round the rows of the current batch of every table pulled by row: the ids
// in its feeds (values that are no valid id are left to the embedding layer to report),
// asked of the shards that hold them.
void send_rows(self_ptr self) {
  auto& st = self->state;
  auto& rd = st.round;
  const auto& pl = *st.opts.placement;
  const auto& feeds = st.opts.structure.row_feeds();
  for (size_t v = 0; v < st.by_rows.size(); ++v) {
    if (!st.by_rows[v]) continue;
    auto vid = static_cast<model::variable_id>(v);
    const auto& vp = pl.variable(vid);
    auto& table = st.tables[v];
    if (!table) table = std::make_shared<model::matrix>(model::matrix::Zero(vp.shape.rows, vp.shape.cols));
    rd.values.adopt(vid, table);
    std::vector<int64_t> ids;
    for (auto slot : feeds[v]) {
      if (static_cast<size_t>(slot) >= st.batch.features.size()) continue;
      const auto& x = st.batch.features[static_cast<size_t>(slot)];
      for (Eigen::Index i = 0; i < x.size(); ++i) {
        double id = x.data()[i];
        if (id >= 0 && id < static_cast<double>(vp.shape.rows) && std::floor(id) == id) ids.push_back(static_cast<int64_t>(id));
      }
    }
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    if (ids.empty()) continue;
    for (auto& grp : pl.group_rows(vid, ids)) {
      pull_rows_request req;
      req.f = st.task.f;
      req.variable = vid;
      for (auto p : grp.positions) req.ids.push_back(ids[p]);
      ++rd.outstanding;
      auto p = grp.ps;
      st.opts.seam->request(self, st.opts.ps[static_cast<size_t>(p)], st.opts.timeout, pull_rows_atom::value, std::move(req))
        .then(
          [self, id = rd.id, v](rows_reply& rep) {
            auto& st = self->state;
            auto& rd = st.round;
            if (!rd.active || rd.id != id || rd.outstanding == 0) return;
            auto& table = *st.tables[v];
            if (!rep.rows.value || rep.rows.rows() != static_cast<int64_t>(rep.ids.size()) ||
                rep.rows.cols() != table.cols()) {
              rd = worker_state::pull_round{};
              fail(self, make_error(error_code::invalid_request,
                                    fmt::format("worker {}: a ps shard answered {} ids of {} with rows of [{} x {}]",
                                                st.opts.id, rep.ids.size(), st.opts.structure.variables()[v].name,
                                                rep.rows.rows(), rep.rows.cols())));
              return;
            }
            for (size_t j = 0; j < rep.ids.size(); ++j)
              if (rep.ids[j] >= 0 && rep.ids[j] < table.rows())
                table.row(static_cast<Eigen::Index>(rep.ids[j])) = rep.rows.value->row(static_cast<Eigen::Index>(j));
            rd.read_version[v] = std::max(rd.read_version[v], rep.version);
            if (--rd.outstanding == 0 && rd.awaited && rd.seq == st.seq) install_round(self);
          },
          [self, id = rd.id, p](caf::error& e) { round_failed(self, id, p, std::move(e)); });
    }
  }
}

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
    send_rows(self);
    if (rd.outstanding == 0) {
      install_round(self);
      return;
    }
    rd.awaited = true;
    rd.seq = st.seq;
    return;
  }
  st.reuses_left = 0;
  if (!rd.active || !same_fence(rd.f, st.task.f) || rd.step != st.current.step)
    send_round(self, st.task.f, st.current.step);
  send_rows(self);
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
  prefetch_next(self);
  // The ledgers record which batch each applied step used (ledger.hpp).
  if (st.task.training) st.current.digest = dataset::element_digest(st.batch);
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

void run_next(self_ptr self) {
  auto& st = self->state;
  if (st.next >= st.task.steps.size()) {
    finish_task(self);
    return;
  }
  ++st.seq;
  st.current = step_result{};
  st.current.step = st.task.steps[st.next++];
  st.current.worker = st.opts.id;
  st.current.generation = st.task.f.worker_generation;
  st.phase_start = clock_type::now();
  auto& pf = st.prefetch;
  if (pf.active && pf.step == st.current.step && pf.epoch == st.task.epoch && pf.epoch_begin == st.task.epoch_begin &&
      pf.source == st.task.source) {
    if (pf.arrived) {
      pf.active = false;
      auto r = std::move(pf.reply);
      on_batch(self, r);
    } else {
      pf.awaited = true;
      pf.seq = st.seq;
    }
    return;
  }
  pf.active = false;
  st.opts.seam
    ->request(self, st.task.source, st.opts.timeout, batch_atom::value,
              batch_request{st.task.f, st.current.step, st.task.epoch, st.task.epoch_begin})
    .then(
      [self, seq = st.seq](batch_reply& r) {
        if (self->state.seq == seq) on_batch(self, r);
      },
      [self, seq = st.seq](caf::error& e) {
        if (self->state.seq == seq) fail(self, batch_error(self->state, std::move(e)));
      });
}

worker_actor::behavior_type worker_impl(self_ptr self, worker_options opts) {
  if (opts.detached) detail::name_this_thread(fmt::format("at.worker{}", opts.id));
  model::enable_flush_to_zero();
  model::tune_gemm_blocking();
  auto& st = self->state;
  st.opts = std::move(opts);
  st.exec = std::make_unique<model::executor>(st.opts.structure);
  st.params = model::parameter_store{st.opts.structure.variables().size()};
  st.grads = model::gradient_store{st.opts.structure.variables()};
  st.read_version.assign(st.opts.structure.variables().size(), 0);
  st.sent.resize(st.opts.structure.variables().size());
  st.tables.resize(st.opts.structure.variables().size());
  st.by_rows.assign(st.opts.structure.variables().size(), false);
  for (size_t v = 0; v < st.by_rows.size(); ++v)
    st.by_rows[v] = st.opts.pull_rows && !st.opts.structure.row_feeds()[v].empty();
  for (auto& m : st.opts.metrics) st.metrics.push_back(m->clone());
  self->set_exception_handler([self](caf::scheduled_actor*, std::exception_ptr& eptr) -> caf::error {
    auto what = exception_text(eptr);
    auto err = make_error(error_code::user_error,
                          fmt::format("worker {}, step {}: {}", self->state.opts.id, to_string(self->state.current.step), what));
    // CAF ends the actor after an exception; answer the task first so the coordinator
    // learns what failed (an application error, which fails the run fast).
    auto& st = self->state;
    for (auto& w : st.waiting) w.second.deliver(err);
    st.waiting.clear();
    for (auto& [id, rec] : st.records) rec.rp.deliver(err);
    st.records.clear();
    return err;
  });
  watch_remote_shards(self);
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    st.watched.erase(dm.source);
    st.lost.insert(dm.source);
    for (size_t p = 0; p < st.opts.ps.size(); ++p)
      if (st.opts.ps[p].address() == dm.source) {
        fail_all(self, make_error(error_code::shard_lost,
                                  fmt::format("worker {}: ps shard {} is gone ({})", st.opts.id, p, describe(dm.reason))));
        return;
      }
  });
  return {
    [self](pull_atom) -> caf::result<uint64_t> {
      auto& st = self->state;
      const auto& pl = *st.opts.placement;
      auto rp = self->make_response_promise<uint64_t>();
      auto store = std::make_shared<model::parameter_store>(st.opts.structure.variables().size());
      auto remaining = std::make_shared<int>(0);
      auto failed = std::make_shared<bool>(false);
      std::vector<pull_request> reqs(static_cast<size_t>(pl.num_ps()));
      for (auto& vp : pl.variables())
        for (auto& part : vp.partitions)
          reqs[static_cast<size_t>(part.ps)].partitions.push_back(partition_key{vp.variable, part.index});
      for (auto& r : reqs)
        if (!r.partitions.empty()) ++*remaining;
      if (*remaining == 0) {
        rp.deliver(model::parameters_digest(*store));
        return rp;
      }
      for (int p = 0; p < pl.num_ps(); ++p) {
        auto& r = reqs[static_cast<size_t>(p)];
        if (r.partitions.empty()) continue;
        r.f = fence{};  // an observer's read: passes any fence, raises none
        st.opts.seam->request(self, st.opts.ps[static_cast<size_t>(p)], st.opts.timeout, pull_atom::value, std::move(r))
          .then(
            [self, store, remaining, failed, rp](pull_reply& rep) mutable {
              if (*failed) return;
              for (auto& pv : rep.values) store_partition(*store, *self->state.opts.placement, pv, /*share=*/false);
              if (--*remaining == 0) rp.deliver(model::parameters_digest(*store));
            },
            [failed, rp](caf::error& e) mutable {
              if (*failed) return;
              *failed = true;
              rp.deliver(std::move(e));
            });
      }
      return rp;
    },
    [self](step_atom, step_task& task) -> caf::result<task_result> {
      auto& st = self->state;
      if (task.steps.empty()) return make_error(error_code::invalid_request, "step task without steps");
      if (!task.source) return make_error(error_code::invalid_request, "step task without a dataset shard");
      // A training task's batches come from this worker's replica of the pipeline when it
      // has one (every step of a task is of one pipeline).
      if (task.training && task.steps.front().pipeline < st.opts.sources.size())
        task.source = st.opts.sources[task.steps.front().pipeline];
      if (task.f.worker != st.opts.id)
        return make_error(error_code::invalid_request,
                          fmt::format("worker {} got a task addressed to worker {}", st.opts.id, task.f.worker));
      if (epochs_older(task.f, st.newest))
        return make_error(error_code::fenced_out,
                          fmt::format("worker {}: a task of epochs ({}, {}) after ({}, {})", st.opts.id,
                                      task.f.coordinator_epoch, task.f.recovery_epoch, st.newest.coordinator_epoch,
                                      st.newest.recovery_epoch));
      // A task of newer epochs comes from after the coordinator's recovery: the shards it
      // names are the restored ones (a shard that was only unreachable may be back under
      // its old handle).
      if (epochs_older(st.newest, task.f)) {
        st.lost.clear();
        // Queued tasks of older epochs were given up by the coordinator (a restore, or a
        // failed run, came between): computing them would only delay this one.
        for (auto w = st.waiting.begin(); w != st.waiting.end();)
          if (epochs_older(w->first.f, task.f)) {
            w->second.deliver(make_error(error_code::fenced_out,
                                         fmt::format("worker {}: a queued task of older epochs was dropped", st.opts.id)));
            w = st.waiting.erase(w);
          } else {
            ++w;
          }
      }
      st.newest.coordinator_epoch = task.f.coordinator_epoch;
      st.newest.recovery_epoch = task.f.recovery_epoch;
      // The shards as the coordinator knows them (a lost one is respawned elsewhere).
      if (task.ps.size() == st.opts.ps.size())
        for (size_t i = 0; i < task.ps.size(); ++i) st.opts.ps[i] = caf::actor_cast<ps_shard_actor>(task.ps[i]);
      watch_remote_shards(self);
      // Sent before the coordinator learned of a lost shard: its requests would never
      // be answered (only time out).
      for (size_t p = 0; p < st.opts.ps.size(); ++p)
        if (st.lost.count(st.opts.ps[p].address()))
          return make_error(error_code::shard_lost, fmt::format("worker {}: ps shard {} is gone", st.opts.id, p));
      auto rp = self->make_response_promise<task_result>();
      if (st.busy) {
        st.waiting.emplace_back(std::move(task), rp);
        // The current task is on its last step: this one is next, fetch its batch now.
        if (st.waiting.size() == 1 && st.next >= st.task.steps.size() && !st.prefetch.active) prefetch_next(self);
      } else
        start(self, std::move(task), rp);
      return rp;
    },
  };
}

}  // namespace

worker_actor spawn_worker(caf::actor_system& sys, worker_options opts) {
  if (opts.structure.empty()) throw std::invalid_argument("spawn_worker: empty model");
  if (!opts.loss) throw std::invalid_argument("spawn_worker: no loss");
  if (!opts.placement) throw std::invalid_argument("spawn_worker: no placement");
  if (static_cast<int>(opts.ps.size()) != opts.placement->num_ps())
    throw std::invalid_argument(fmt::format("spawn_worker: {} ps shards for a placement over {}", opts.ps.size(),
                                            opts.placement->num_ps()));
  if (!opts.seam) throw std::invalid_argument("spawn_worker: no send seam");
  bool detached = opts.detached;
  if (detached) return sys.spawn<caf::detached>(worker_impl, std::move(opts));
  return sys.spawn(worker_impl, std::move(opts));
}

}  // namespace actortrain
