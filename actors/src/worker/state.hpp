#pragma once
// The worker actor's state and the functions its files share (private to
// actors/src/worker/): worker.cpp (the behaviour, tasks, compute and push), inputs.cpp
// (what a step needs before it computes: its batch, prefetched, and its parameters,
// pulled, pulled ahead or reused). The gradients' way to the shards is CAF-free in
// gradient_slices.hpp.
#include <actortrain/actors/core/errors.hpp>
#include <actortrain/actors/worker/worker.hpp>
#include <actortrain/dataset/digest.hpp>
#include <actortrain/model/batch_rows.hpp>
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


namespace actortrain::worker_detail {

using clock_type = std::chrono::steady_clock;

inline uint64_t micros_since(clock_type::time_point t) {
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
    dataset_shard_actor source;
    batch_reply reply;
    /// Asked for step `s` of `t` (the batch it serves, or is asked for already).
    bool is_for(const step_task& t, const step_id& s) const {
      return active && step == s && epoch == t.epoch && epoch_begin == t.epoch_begin && source == t.source;
    }
  };
  prefetch_slot prefetch;
  uint64_t prefetch_id = 0;
  // The step in progress.
  dataset::element batch;
  step_result current;
  clock_type::time_point phase_start;
  std::vector<uint64_t> read_version;  // per variable (max over its partitions)
  // One set of pulls to every shard. With pull_ahead the next step's round is sent when
  // a step starts computing, and its answers wait in the mailbox until that step; with
  // pull_with_push it rides on the step's pushes (push_request::then_pull).
  struct pull_round {
    bool active = false;   // requests are out (or their answers are kept)
    bool awaited = false;  // a step waits for the answers
    uint64_t id = 0;
    uint64_t seq = 0;  // the step attempt that waits
    fence f;           // asked under this fence,
    step_id step;      // for this step: used by no other (it may have been asked before
                       // the other was dispatched, which the consistency modes forbid)
    bool training = false;  // a training step's (the shard may answer a compensated view)
    size_t outstanding = 0;
    std::vector<std::vector<partition_key>> asked;  // by ps index: what each shard must answer
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
  // Per variable: pulled by row (an embedding table fed by model inputs); with a compact
  // table (model::compact_rows) or not; the worker's buffer of it: the current step's
  // rows alone when compact (row i is id row_ids[v][i]), else the whole table (only the
  // rows of the current step are current); the current step's distinct ids.
  std::vector<bool> by_rows;
  std::vector<bool> compact;
  // Per model input: it feeds a compact table pulled by row, so ids given there stay ids
  // until install_round renumbers them (the layers read other id inputs as floats).
  std::vector<bool> ids_kept;
  std::vector<std::shared_ptr<model::matrix>> tables;
  std::vector<std::vector<int64_t>> row_ids;
  // The rows of the current batch were asked for compact tables: the batch's ids are
  // renumbered when they are installed.
  bool renumber = false;
  // Shards in other processes that this worker monitors: a request to one that died is
  // never answered (CAF 0.17 fails it only at its timeout), so the down message fails it.
  std::set<caf::actor_addr> watched;
  // Remote shards that went down: a task naming one fails at once, until a task of
  // newer epochs (after the coordinator's recovery) arrives.
  std::set<caf::actor_addr> lost;
  static inline const char* name = "worker";
};

using self_ptr = worker_actor::stateful_pointer<worker_state>;

// Where a tensor request to shard `p` goes (worker_options::routes), null: to the shard.
inline caf::actor via(const worker_state& st, int p) {
  return st.opts.routes ? st.opts.routes->to(st.opts.ps[static_cast<size_t>(p)]) : caf::actor{};
}

// worker.cpp
void run_next(self_ptr self);
void compute(self_ptr self);
void fail(self_ptr self, caf::error err);
void fail_record(self_ptr self, uint64_t id, caf::error err);
void finish_task(self_ptr self);
void push_group(self_ptr self);
caf::error batch_error(const worker_state& st, caf::error e);
caf::error shard_error(const worker_state& st, int p, caf::error e);

// inputs.cpp
void prefetch_next(self_ptr self);
void on_batch(self_ptr self, batch_reply& r);
void send_round(self_ptr self, const fence& f, const step_id& step, bool training);
std::vector<std::vector<partition_key>> open_round(self_ptr self, const fence& f, const step_id& step, bool training);
void round_values(self_ptr self, uint64_t id, int p, std::vector<partition_value>& values);
void round_failed(self_ptr self, uint64_t id, int p, caf::error e);
void pull(self_ptr self);
void local_step(worker_state& st);

}  // namespace actortrain::worker_detail
