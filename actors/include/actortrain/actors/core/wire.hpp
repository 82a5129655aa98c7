#pragma once
// The wire form of every message type: inspect() for CAF's serializers. Tensors travel
// as rows, cols and raw little-endian floats (or beside the message on the data plane,
// data_plane.hpp); row ids as one raw block. Every reader checks an announced length
// against the bytes that remain before allocating anything. Included by messages.hpp.

#include <actortrain/actors/coordinator/protocol.hpp>
#include <actortrain/actors/core/fence.hpp>
#include <actortrain/actors/core/step_id.hpp>
#include <actortrain/actors/core/tensor.hpp>
#include <actortrain/actors/data/protocol.hpp>
#include <actortrain/actors/net/protocol.hpp>
#include <actortrain/actors/ps/ledger.hpp>
#include <actortrain/actors/ps/protocol.hpp>
#include <actortrain/actors/worker/protocol.hpp>

#include <caf/all.hpp>
#include <caf/binary_deserializer.hpp>

#include <cstdint>
#include <cstring>
#include <optional>
#include <type_traits>
#include <utility>

namespace actortrain {

// -- identity -------------------------------------------------------------------------

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, fence& x) {
  return f(caf::meta::type_name("fence"), x.coordinator_epoch, x.recovery_epoch, x.worker_generation,
           x.worker);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_id& x) {
  return f(caf::meta::type_name("step_id"), x.run, x.pipeline, x.position);
}

// -- tensors (core/tensor.hpp) -------------------------------------------------------

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tensor& x) {
  if constexpr (std::is_same<Inspector, caf::serializer>::value) {
    uint64_t rows = static_cast<uint64_t>(x.rows()), cols = static_cast<uint64_t>(x.cols());
    if (auto* side = detail::side_channel()) {
      if (rows == 0 && cols == 0) return f(rows, cols);
      side->out.push_back(x.value);
      side->out_reducible.push_back(x.reducible);
      return f(rows, cols);
    }
    size_t n = static_cast<size_t>(rows * cols);
    return caf::error::eval([&] { return f(rows, cols); }, [&] { return f.begin_sequence(n); },
                            [&]() -> caf::error {
                              if (n == 0) return caf::none;
                              return f.apply_raw(n * sizeof(float), const_cast<float*>(x.value->data()));
                            },
                            [&] { return f.end_sequence(); });
  } else if constexpr (std::is_same<Inspector, caf::deserializer>::value) {
    uint64_t rows = 0, cols = 0;
    size_t n = 0;
    if (auto* side = detail::side_channel()) {
      if (auto err = f(rows, cols)) return err;
      if (rows == 0 && cols == 0) {
        x.value.reset();
        return caf::none;
      }
      if (side->next >= side->in.size())
        return caf::make_error(caf::sec::invalid_argument, "tensor: more tensors than the frame announced");
      auto& m = side->in[side->next++];
      if (!m || static_cast<uint64_t>(m->rows()) != rows || static_cast<uint64_t>(m->cols()) != cols)
        return caf::make_error(caf::sec::invalid_argument, "tensor: shape differs from the frame's table");
      x.value = std::move(m);
      return caf::none;
    }
    return caf::error::eval(
      [&] { return f(rows, cols); }, [&] { return f.begin_sequence(n); },
      [&]() -> caf::error {
        // Check every announced length before allocating: a crafted header must not
        // make us reserve gigabytes.
        if (rows > max_wire_floats || cols > max_wire_floats || (cols != 0 && rows > max_wire_floats / cols) ||
            rows * cols != n)
          return caf::make_error(caf::sec::invalid_argument, "tensor: inconsistent dimensions");
        if (auto* bin = dynamic_cast<caf::binary_deserializer*>(&f))
          if (bin->remaining() < n * sizeof(float))
            return caf::make_error(caf::sec::end_of_stream, "tensor: length exceeds the message");
        if (rows == 0 && cols == 0) {
          x.value.reset();
          return caf::none;
        }
        auto m = std::make_shared<model::matrix>(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(cols));
        if (n > 0)
          if (auto err = f.apply_raw(n * sizeof(float), m->data())) return err;
        x.value = std::move(m);
        return caf::none;
      },
      [&] { return f.end_sequence(); });
  } else {
    auto r = x.rows(), c = x.cols();
    return f(caf::meta::type_name("tensor"), r, c);
  }
}

/// Floating-point values of a message (doubles, alone or in vectors and pairs) on the wire
/// as their IEEE-754 bits. CAF 0.17's binary format writes a double through pack754,
/// which never returns for +-infinity (it halves the value until it is below 2) and loses
/// NaN payloads: a diverged loss would hang the thread that sends it. Found by fuzzing
/// (tools/fuzzers/messages.cpp).
template <class T>
struct exact_ref {
  T* x;
};
template <class T>
exact_ref<T> exact(T& x) {
  return {&x};
}

namespace detail {

template <class Inspector>
caf::error exact_io(Inspector& f, double& x) {
  uint64_t bits = 0;
  std::memcpy(&bits, &x, sizeof bits);
  if (auto err = f(bits)) return err;
  if constexpr (std::is_same<Inspector, caf::deserializer>::value) std::memcpy(&x, &bits, sizeof bits);
  return caf::none;
}

template <class Inspector>
caf::error exact_io(Inspector& f, std::string& x) {
  return f(x);
}

template <class Inspector, class A, class B>
caf::error exact_io(Inspector& f, std::pair<A, B>& x) {
  if (auto err = exact_io(f, x.first)) return err;
  return exact_io(f, x.second);
}

// The fewest bytes one value takes on the wire (a double its 8, a string or a vector at
// least its length's byte).
template <class T>
struct least_wire_bytes {
  static constexpr size_t value = 1;
};
template <>
struct least_wire_bytes<double> {
  static constexpr size_t value = sizeof(uint64_t);
};
template <class A, class B>
struct least_wire_bytes<std::pair<A, B>> {
  static constexpr size_t value = least_wire_bytes<A>::value + least_wire_bytes<B>::value;
};

template <class Inspector, class T>
caf::error exact_io(Inspector& f, std::vector<T>& x) {
  size_t n = x.size();
  if (auto err = f.begin_sequence(n)) return err;
  if constexpr (std::is_same<Inspector, caf::deserializer>::value) {
    // An announced count the message cannot hold is refused before anything is
    // allocated: a double or a pair of string and double stays within 5 times its wire
    // bytes; an element that is itself a vector may be 1 byte for 24 (CAF's own
    // containers of strings are 1 for 32), bounded by the guard's payload limit.
    if (auto* bin = dynamic_cast<caf::binary_deserializer*>(&f))
      if (bin->remaining() / least_wire_bytes<T>::value < n)
        return caf::make_error(caf::sec::end_of_stream, "a sequence longer than the message");
    x.clear();
    x.resize(n);
  }
  for (auto& e : x)
    if (auto err = exact_io(f, e)) return err;
  return f.end_sequence();
}

}  // namespace detail

template <class Inspector, class T>
typename Inspector::result_type inspect(Inspector& f, exact_ref<T>& x) {
  if constexpr (std::is_same<Inspector, caf::serializer>::value || std::is_same<Inspector, caf::deserializer>::value)
    return detail::exact_io(f, *x.x);
  else
    return f(*x.x);
}

/// Row ids (a vector<int64_t> of a message) on the wire as one block of raw
/// little-endian bytes: CAF's stock vector serializer goes element by element, which
/// made a pull of 1M rows 10x slower than the same bytes over TCP. The reader checks the
/// announced count against the bytes that remain before allocating.
struct raw_ids {
  std::vector<int64_t>* v;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, raw_ids& x) {
  if constexpr (std::is_same<Inspector, caf::serializer>::value) {
    size_t n = x.v->size();
    return caf::error::eval([&] { return f.begin_sequence(n); },
                            [&]() -> caf::error {
                              return n == 0 ? caf::none : f.apply_raw(n * sizeof(int64_t), x.v->data());
                            },
                            [&] { return f.end_sequence(); });
  } else if constexpr (std::is_same<Inspector, caf::deserializer>::value) {
    size_t n = 0;
    return caf::error::eval([&] { return f.begin_sequence(n); },
                            [&]() -> caf::error {
                              if (n > max_wire_floats) return caf::make_error(caf::sec::invalid_argument, "ids: too many");
                              if (auto* bin = dynamic_cast<caf::binary_deserializer*>(&f))
                                if (bin->remaining() < n * sizeof(int64_t))
                                  return caf::make_error(caf::sec::end_of_stream, "ids: length exceeds the message");
                              x.v->resize(n);
                              return n == 0 ? caf::none : f.apply_raw(n * sizeof(int64_t), x.v->data());
                            },
                            [&] { return f.end_sequence(); });
  } else {
    return f(*x.v);
  }
}

/// A std::optional member (which CAF 0.17 does not know) on the wire: a flag, then the
/// value only when there is one. A reader fills a fresh value and puts it in place once
/// the whole member was read, so a failed read leaves no half-read value behind.
template <class T>
struct optional_field {
  std::optional<T>* v;
};

namespace detail {
// The value part of an optional_field: read or written only when `present` (read
// before it, in the same call) says so.
template <class T>
struct optional_payload {
  const bool& present;
  T& value;
  template <class Inspector>
  friend typename Inspector::result_type inspect(Inspector& f, optional_payload& x) {
    return x.present ? f(x.value) : f();
  }
};
}  // namespace detail

template <class Inspector, class T>
typename Inspector::result_type inspect(Inspector& f, optional_field<T>& x) {
  if constexpr (Inspector::writes_state) {
    bool present = false;
    T loaded{};
    detail::optional_payload<T> payload{present, loaded};
    auto put = [&]() -> caf::error {
      if (present)
        *x.v = std::move(loaded);
      else
        x.v->reset();
      return caf::none;
    };
    return f(present, payload, caf::meta::load_callback(put));
  } else {
    bool present = x.v->has_value();
    T none{};
    detail::optional_payload<T> payload{present, present ? **x.v : none};
    return f(present, payload);
  }
}

// -- ledgers (ps/ledger.hpp) ---------------------------------------------------------

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ledger_segment& x) {
  return f(caf::meta::type_name("ledger_segment"), x.run, x.pipeline, x.begin, x.end, x.checksum);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ledger_violation& x) {
  return f(caf::meta::type_name("ledger_violation"), x.run, x.pipeline, x.position, x.digest);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ledger_data& x) {
  return f(caf::meta::type_name("ledger_data"), x.segments, x.violations);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, partition_ledger& x) {
  return f(caf::meta::type_name("partition_ledger"), x.shard, x.variable, x.row_begin, x.row_end, x.ledger);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ps_ledgers& x) {
  return f(caf::meta::type_name("ps_ledgers"), x.shard, x.partitions);
}

// -- parameter servers (ps/protocol.hpp) ---------------------------------------------

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, partition_key& x) {
  return f(caf::meta::type_name("partition_key"), x.variable, x.index);
}

namespace model {  // found by argument-dependent lookup

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, waiting_id& x) {
  return f(caf::meta::type_name("waiting_id"), x.id, x.count, x.last);
}

}  // namespace model

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, partition_state::kept_state& x) {
  raw_ids ids{&x.ids}, last_update{&x.last_update};
  return f(caf::meta::type_name("kept_state"), x.value, x.slots, x.iterations, ids, last_update, x.waiting);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, partition_state& x) {
  optional_field<partition_state::kept_state> kept{&x.kept};
  raw_ids ids{&x.ids}, last_update{&x.last_update}, removed{&x.removed};
  return f(caf::meta::type_name("partition_state"), x.key, x.name, x.row_begin, x.row_end, x.sparse, x.dynamic,
           x.partitions, x.seed, x.version, x.iterations, x.value, x.slot_names, x.slots, x.ledger, ids, last_update,
           x.waiting, x.base, removed, kept);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, init_request& x) {
  return f(caf::meta::type_name("init_request"), x.f, x.partitions, x.run, x.watermark, x.min_generations, x.base);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, pull_request& x) {
  return f(caf::meta::type_name("pull_request"), x.f, x.partitions, x.training);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, partition_value& x) {
  return f(caf::meta::type_name("partition_value"), x.key, x.version, x.value);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, pull_reply& x) {
  return f(caf::meta::type_name("pull_reply"), x.values);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, pull_rows_request& x) {
  raw_ids ids{&x.ids};
  return f(caf::meta::type_name("pull_rows_request"), x.f, x.variable, ids, x.training);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rows_reply& x) {
  raw_ids ids{&x.ids};
  return f(caf::meta::type_name("rows_reply"), x.variable, x.version, ids, x.rows);
}

// A gradient is applied once and kept nowhere: it may travel rounded (tensor::reducible).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, dense_slice& x) {
  if constexpr (std::is_same<Inspector, caf::serializer>::value) x.grad.reducible = true;
  return f(caf::meta::type_name("dense_slice"), x.key, x.read_version, x.grad);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sparse_slice& x) {
  if constexpr (std::is_same<Inspector, caf::serializer>::value) x.rows.reducible = true;
  raw_ids ids{&x.ids};
  return f(caf::meta::type_name("sparse_slice"), x.variable, x.read_version, ids, x.rows);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, push_request& x) {
  return f(caf::meta::type_name("push_request"), x.f, x.step, x.example_count, x.dense, x.sparse, x.watermark,
           x.attempt, x.more_steps, x.digests, x.then_pull);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, applied_by& x) {
  return f(caf::meta::type_name("applied_by"), x.step, x.worker, x.generation, x.attempt);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, push_reply& x) {
  auto s = static_cast<uint8_t>(x.status);
  auto restore = [&]() -> caf::error {
    if (s > static_cast<uint8_t>(push_status::held))
      return caf::make_error(caf::sec::invalid_argument, "push_reply: bad status");
    x.status = static_cast<push_status>(s);
    return caf::none;
  };
  return f(caf::meta::type_name("push_reply"), s, x.max_staleness, x.pulled, caf::meta::load_callback(restore));
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, round_request& x) {
  return f(caf::meta::type_name("round_request"), x.f, x.round, x.steps, x.example_count);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, round_reply& x) {
  return f(caf::meta::type_name("round_reply"), x.round, x.applied, x.max_staleness);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, hyperparams_request& x) {
  return f(caf::meta::type_name("hyperparams_request"), x.f, exact(x.values), x.id);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, table_stats& x) {
  return f(caf::meta::type_name("table_stats"), x.key, x.rows, x.created, x.evicted, x.waiting, x.unadmitted_reads,
           x.dropped_gradients, x.bytes, x.payload_bytes);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ps_stats& x) {
  return f(caf::meta::type_name("ps_stats"), x.shard, x.applied, x.base, x.duplicates, x.rejected, x.fenced, x.undone,
           x.remembered, x.held, x.rows_pulled, x.uncompensated, x.staleness_histogram, x.versions, x.tables,
           x.apply_log, x.seen, x.min_generations);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ps_snapshot& x) {
  return f(caf::meta::type_name("ps_snapshot"), x.shard, x.partitions);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, checkpoint_target& x) {
  return f(caf::meta::type_name("checkpoint_target"), x.dir);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, snapshot_basis& x) {
  return f(caf::meta::type_name("snapshot_basis"), x.step, x.base, x.increments);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, file_entry& x) {
  return f(caf::meta::type_name("file_entry"), x.name, x.bytes, x.crc32);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, written_partition& x) {
  return f(caf::meta::type_name("written_partition"), x.header, x.values, x.slots, x.tables);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ps_files& x) {
  return f(caf::meta::type_name("ps_files"), x.shard, x.partitions);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, fence_request& x) {
  return f(caf::meta::type_name("fence_request"), x.f, x.id);
}

// -- dataset shards (data/protocol.hpp) ----------------------------------------------

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, id_block& x) {
  raw_ids values{&x.values};
  if constexpr (std::is_same<Inspector, caf::deserializer>::value) {
    if (auto e = f(caf::meta::type_name("id_block"), x.rows, x.cols, values)) return e;
    // rows x cols must be the values read (and must not overflow on the way).
    const bool fits = x.cols == 0 ? x.values.empty() && x.rows <= max_wire_floats
                                  : x.cols <= max_wire_floats && x.rows <= x.values.size() / x.cols &&
                                      x.rows * x.cols == x.values.size();
    if (!fits) return caf::make_error(caf::sec::invalid_argument, "id_block: the shape does not match the ids sent");
    return caf::none;
  } else {
    return f(caf::meta::type_name("id_block"), x.rows, x.cols, values);
  }
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, batch_data& x) {
  return f(caf::meta::type_name("batch_data"), x.features, x.labels, x.ids);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, batch_request& x) {
  return f(caf::meta::type_name("batch_request"), x.f, x.step, x.epoch, x.epoch_begin);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, batch_reply& x) {
  return f(caf::meta::type_name("batch_reply"), x.step, x.end_of_data, x.batch);
}

// -- workers (worker/protocol.hpp) ---------------------------------------------------

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_task& x) {
  return f(caf::meta::type_name("step_task"), x.f, x.source, x.steps, x.epoch, x.epoch_begin, x.training,
           x.outputs, x.watermark, x.ps, x.step_fn, x.ticket);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, phase_timings& x) {
  return f(caf::meta::type_name("phase_timings"), x.batch_us, x.pull_us, x.compute_us, x.push_us);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_result& x) {
  return f(caf::meta::type_name("step_result"), x.step, x.worker, x.generation, x.end_of_data, exact(x.loss),
           x.example_count, exact(x.metric_states), x.max_staleness, x.timings, x.outputs, x.digest,
           exact(x.logs));
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, task_result& x) {
  return f(caf::meta::type_name("task_result"), x.steps);
}

// -- coordinator (coordinator/protocol.hpp) ------------------------------------------

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, run_spec& x) {
  return f(caf::meta::type_name("run_spec"), x.pipelines, x.eval_pipelines, x.epochs, x.steps_per_epoch,
           x.visitation_log, x.resume_from, x.epoch_gate, exact(x.hyperparams), x.initial_epoch, x.validation_freq,
           x.validation_epochs, x.step_begin_events, x.on_demand);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_grants& x) {
  return f(caf::meta::type_name("step_grants"), x.loop, x.first, x.steps, x.replicas, x.end);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, gate_decision& x) {
  return f(caf::meta::type_name("gate_decision"), x.gate, x.stop, x.keep, x.restore_at_end, exact(x.hyperparams));
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, visit& x) {
  return f(caf::meta::type_name("visit"), x.run, x.pipeline, x.position, x.worker, x.generation);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, run_summary& x) {
  return f(caf::meta::type_name("run_summary"), x.run, x.keys, exact(x.values), x.steps, x.ran_out, x.visits, x.stopped_epoch,
           x.restored_epoch);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, eval_spec& x) {
  return f(caf::meta::type_name("eval_spec"), x.pipelines, x.outputs, x.batch_events);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, eval_summary& x) {
  return f(caf::meta::type_name("eval_summary"), x.keys, exact(x.values), x.outputs);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, worker_report& x) {
  return f(caf::meta::type_name("worker_report"), x.id, x.generation, x.alive, x.busy, x.steps, exact(x.steps_per_second),
           exact(x.mean_staleness));
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, partition_report& x) {
  return f(caf::meta::type_name("partition_report"), x.variable, x.index, x.row_begin, x.row_end, x.cols, x.version);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, shard_report& x) {
  return f(caf::meta::type_name("shard_report"), x.shard, x.error, x.applied, x.base, x.partitions);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, status_report& x) {
  return f(caf::meta::type_name("status_report"), x.run, x.training, x.epoch, x.steps_applied, exact(x.uptime), x.workers,
           x.shards, x.checkpoint_step, x.checkpoint_dir, exact(x.checkpoint_age), exact(x.recent));
}

// -- processes (net/protocol.hpp) ----------------------------------------------------

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_registration& x) {
  return f(caf::meta::type_name("node_registration"), x.worker, x.fingerprint, x.replica, x.node, x.task);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, shard_contact& x) {
  return f(caf::meta::type_name("shard_contact"), x.shard, x.data_port, x.data_token, x.data_host);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_outcome& x) {
  return f(caf::meta::type_name("job_outcome"), x.summary, x.error, x.retryable);
}

}  // namespace actortrain
