#include <actortrain/actors/data/dataset_shard.hpp>
#include <actortrain/actors/core/errors.hpp>

#include <fmt/format.h>

#include "../core/planted.hpp"
#include "../core/thread_name.hpp"
#include "ready_window.hpp"

namespace actortrain {

batch_data to_batch(dataset::element&& e) {
  batch_data b;
  b.features.reserve(e.features.size());
  for (auto& f : e.features) b.features.emplace_back(std::move(f));
  b.labels = tensor{std::move(e.labels)};
  for (size_t k = 0; k < e.ids.size(); ++k) {
    if (!e.is_ids(k)) continue;
    b.ids.resize(k + 1);
    auto& x = e.ids[k];
    b.ids[k].rows = static_cast<uint64_t>(x.rows());
    b.ids[k].cols = static_cast<uint64_t>(x.cols());
    b.ids[k].values.assign(x.data(), x.data() + x.size());
  }
  return b;
}

dataset::element to_element(batch_data&& b) {
  dataset::element e;
  e.features.reserve(b.features.size());
  for (auto& f : b.features) e.features.push_back(f.take());
  e.labels = b.labels.take();
  for (size_t k = 0; k < b.ids.size(); ++k) {
    const auto& x = b.ids[k];
    if (x.cols == 0) continue;
    e.ids.resize(k + 1);
    // The shape was checked against the values when the message was read (wire.hpp).
    e.ids[k] = Eigen::Map<const model::id_matrix>(x.values.data(), static_cast<Eigen::Index>(x.rows),
                                                  static_cast<Eigen::Index>(x.cols));
  }
  return e;
}

namespace {

struct ready_batch {
  uint64_t epoch = 0;
  uint64_t index = 0;  // position within the epoch
  bool end = false;
  batch_data batch;
};

// How far behind the newest request a prepared batch waits for its own (late) request:
// requests arrive a few positions out of order (workers pull ahead; several read one
// pipeline), and a batch dropped too early costs the pipeline a seek.
constexpr size_t late_keep = 8;

struct shard_state {
  dataset::dataset data;
  std::string build_error;  // dataset_fn threw: every request reports it
  int64_t pipeline = 0;
  std::unique_ptr<dataset::iterator> it;
  uint64_t it_epoch = 0;
  ready_window<ready_batch> ready{0, late_keep};  // batches prepared ahead (ready_window.hpp)
  bool fill_pending = false;
  std::shared_ptr<detail::defect_switch> plant;  // test-only
  static inline const char* name = "dataset_shard";
};

using self_ptr = dataset_shard_actor::stateful_pointer<shard_state>;

// Produces the element at (epoch, index), reusing the open iterator when it is there.
ready_batch produce(shard_state& st, uint64_t epoch, uint64_t index) {
  if (!st.it || st.it_epoch != epoch || st.it->position() != index) {
    st.it = st.data.iterate(epoch, index);
    st.it_epoch = epoch;
  }
  ready_batch r;
  r.epoch = epoch;
  r.index = index;
  auto e = st.it->next();
  if (!e)
    r.end = true;
  else
    r.batch = to_batch(std::move(*e));
  return r;
}

dataset_shard_actor::behavior_type shard_impl(self_ptr self, dataset::dataset_fn fn, dataset_shard_options opts) {
  if (opts.detached) detail::name_this_thread(fmt::format("at.data{}", opts.context.input_pipeline_id));
  auto& st = self->state;
  st.pipeline = opts.context.input_pipeline_id;
  st.ready = ready_window<ready_batch>{opts.prefetch, late_keep};
  st.plant = opts.plant;
  self->set_exception_handler([self](caf::scheduled_actor*, std::exception_ptr& eptr) -> caf::error {
    return make_error(error_code::user_error,
                      fmt::format("dataset shard {}: {}", self->state.pipeline, exception_text(eptr)));
  });
  try {
    if (!fn) throw std::invalid_argument("no dataset_fn");
    st.data = fn(opts.context);
  } catch (const std::exception& e) {
    st.build_error = fmt::format("dataset_fn for input pipeline {} of {} threw: {}", opts.context.input_pipeline_id,
                                 opts.context.num_input_pipelines, e.what());
  }
  return {
    [self](batch_atom, const batch_request& req) -> caf::result<batch_reply> {
      auto& st = self->state;
      if (!st.build_error.empty()) return make_error(error_code::user_error, st.build_error);
      if (req.step.position < req.epoch_begin)
        return make_error(error_code::invalid_request,
                          fmt::format("dataset shard {}: position {} before its epoch's start {}", st.pipeline,
                                      req.step.position, req.epoch_begin));
      uint64_t index = req.step.position - req.epoch_begin;
      // Served from the prepared batches when this one was prepared.
      auto prepared = st.ready.take(req.epoch, index);
      ready_batch r;
      if (prepared) {
        r = std::move(*prepared);
      } else if (st.ready.past_end(req.epoch, index)) {
        r.epoch = req.epoch;
        r.index = index;
        r.end = true;
      } else {
        r = produce(st, req.epoch, index);
      }
      if (r.end) st.ready.ends_at(req.epoch, index);
      // Test-only defects, at batch 2 of pipeline 0's first epoch of every run: a batch
      // with other values (a loader bug), or batch 1 again (its data visited twice).
      if (st.plant && st.pipeline == 0 && req.epoch == 0 && index == 2 && !r.end && req.step.run != 0) {
        if (st.plant->which == planted_defect::wrong_batch && !r.batch.features.empty()) {
          // The first input's values: its ids moved by one, or its floats scaled.
          if (!r.batch.ids.empty() && r.batch.ids[0].cols > 0) {
            for (auto& id : r.batch.ids[0].values) id += 1;
          } else {
            auto m = r.batch.features[0].take();
            m *= 1.5f;
            r.batch.features[0] = tensor{std::move(m)};
          }
          st.plant->fired();
        } else if (st.plant->which == planted_defect::visit_twice) {
          st.ready.clear();
          auto again = produce(st, req.epoch, index - 1);
          if (!again.end) {
            r.batch = std::move(again.batch);
            st.plant->fired();
          }
        }
      }
      batch_reply reply{req.step, r.end, std::move(r.batch)};
      if (st.ready.next() && !st.fill_pending) {
        st.fill_pending = true;
        self->send(self, fill_atom::value);
      }
      return reply;
    },
    [self](fill_atom) {
      auto& st = self->state;
      st.fill_pending = false;
      // One batch per message, so requests that arrive meanwhile are not kept waiting
      // behind the whole prefetch.
      auto next_index = st.ready.next();
      if (!next_index) return;
      auto r = produce(st, st.ready.epoch(), *next_index);
      const bool end = r.end;
      st.ready.put(r.epoch, r.index, std::move(r), end);
      if (st.ready.next()) {
        st.fill_pending = true;
        self->send(self, fill_atom::value);
      }
    },
  };
}

}  // namespace

dataset_shard_actor spawn_dataset_shard(caf::actor_system& sys, dataset::dataset_fn fn, dataset_shard_options opts) {
  opts.context.validate();
  if (opts.detached) return sys.spawn<caf::detached>(shard_impl, std::move(fn), std::move(opts));
  return sys.spawn(shard_impl, std::move(fn), std::move(opts));
}

}  // namespace actortrain
