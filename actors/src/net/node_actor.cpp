// The node actor: one per process, published at the task's address. It admits worker
// tasks in id order, hands out this process's ps shards, relays the status report,
// watches the coordinator's task and carries the end of the job to every task.
#include <iostream>

#include "node_internals.hpp"

namespace actortrain::detail {

namespace {

struct pending_join {
  node_registration reg;
  caf::response_promise rp;
};


struct node_state : node_init {
  // ps shards this process holds, by index (ps_handle requests wait until they exist).
  std::map<uint32_t, shard_contact> shards;
  bool shards_final = false;
  std::vector<std::pair<uint32_t, caf::response_promise>> shard_waiters;
  // The coordinator's task: admissions in worker-id order (the coordinator's join wants
  // ids without gaps), held until the coordinator exists.
  coordinator_actor coordinator;
  uint32_t next_id = 0;
  std::map<uint32_t, pending_join> waiting;
  std::map<uint32_t, caf::actor> worker_nodes;
  std::vector<caf::actor> ps_nodes;
  std::vector<caf::actor> evaluators;  // told the outcome, never waited for
  // A worker task: its replica, which pulls the final parameters when the job ends.
  worker_actor replica;
  // Other tasks: the coordinator's node, whose loss ends this task.
  caf::actor watched;
  std::string watched_name;
  // ps tasks outlive a lost coordinator for orphan_wait (a chief restarted with
  // --resume finds them); watch_epoch tells a stale deadline from the current one.
  uint64_t watch_epoch = 0;
};

using node_ptr = node_actor::stateful_pointer<node_state>;

void answer_shard_waiters(node_ptr self) {
  auto& st = self->state;
  std::vector<std::pair<uint32_t, caf::response_promise>> still;
  for (auto& [index, rp] : st.shard_waiters) {
    auto i = st.shards.find(index);
    if (i != st.shards.end())
      rp.deliver(i->second);
    else if (st.shards_final)
      rp.deliver(make_error(error_code::invalid_request,
                            fmt::format("{} holds no ps shard {}", to_string(st.task), index)));
    else
      still.emplace_back(index, std::move(rp));
  }
  st.shard_waiters = std::move(still);
}

void admit(node_ptr self, pending_join pj) {
  auto& st = self->state;
  auto id = pj.reg.worker;
  auto name = pj.reg.task;
  auto rp = pj.rp;
  auto node = pj.reg.node;
  self->request(st.coordinator, st.timeout, join_atom::value, pj.reg.replica, id)
    .then(
      [self, rp, id, node, name](uint64_t generation) mutable {
        auto& st = self->state;
        st.worker_nodes[id] = node;
        self->monitor(node);
        st.box->update([](node_box& b) { ++b.joined; });
        rp.deliver(generation);
      },
      [rp, name](caf::error& e) mutable {
        rp.deliver(make_error(error_code::invalid_request, fmt::format("{} cannot join: {}", name, describe(e))));
      });
}

// Admits the held registrations whose turn it is.
void admit_in_order(node_ptr self) {
  auto& st = self->state;
  if (!st.coordinator) return;
  for (auto i = st.waiting.find(st.next_id); i != st.waiting.end(); i = st.waiting.find(st.next_id)) {
    auto pj = std::move(i->second);
    st.waiting.erase(i);
    ++st.next_id;
    admit(self, std::move(pj));
  }
}


node_actor::behavior_type node_behavior(node_ptr self, node_init init) {
  auto& st = self->state;
  static_cast<node_init&>(st) = std::move(init);
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    if (st.watched && dm.source == st.watched.address()) {
      auto text = fmt::format("lost the coordinator ({}): {}", st.watched_name, describe(dm.reason));
      st.watched = nullptr;
      if (st.task.type == task_type::ps) {
        // A new chief may come back and take this shard over; if none does in time, go.
        self->delayed_send(self, st.orphan_wait, retry_atom::value, ++st.watch_epoch, text);
        return;
      }
      st.box->update([&](node_box& b) {
        if (!b.outcome && !b.stopped) b.fatal = text;
      });
      return;
    }
    for (auto i = st.worker_nodes.begin(); i != st.worker_nodes.end(); ++i)
      if (i->second.address() == dm.source) {
        st.worker_nodes.erase(i);  // the coordinator handles the loss of its replica
        return;
      }
  });
  return {
    // The coordinator's task: the live status, from the coordinator.
    [self](report_atom) -> caf::result<status_report> {
      auto& st = self->state;
      if (!st.coordinator)
        return make_error(error_code::invalid_request,
                          fmt::format("{} hosts no coordinator (ask the chief, or worker 0 of a worker-only cluster)",
                                      to_string(st.task)));
      auto rp = self->make_response_promise<status_report>();
      self->request(st.coordinator, st.timeout, report_atom::value)
        .then([rp](status_report& r) mutable { rp.deliver(std::move(r)); },
              [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
      return rp;
    },
    // Any task: a handle to ps shard `index` held here.
    [self](ps_handle_atom, uint32_t index) -> caf::result<shard_contact> {
      auto rp = self->make_response_promise<shard_contact>();
      self->state.shard_waiters.emplace_back(index, rp);
      answer_shard_waiters(self);
      return rp;
    },
    // This process's own runner: the shards it holds (final: no more will come).
    [self](caf::put_atom, std::map<uint32_t, shard_contact> shards) {
      auto& st = self->state;
      st.shards = std::move(shards);
      st.shards_final = true;
      answer_shard_waiters(self);
    },
    // The coordinator's task: ps task `index` came back as a new process (the job's
    // end is told to this one).
    [self](caf::put_atom, uint32_t index, caf::actor ps_node) {
      auto& nodes = self->state.ps_nodes;
      if (index < nodes.size()) nodes[index] = std::move(ps_node);
    },
    // The coordinator's task: the coordinator exists; `local` workers are its own.
    [self](host_atom, coordinator_actor coordinator, uint32_t local, std::vector<caf::actor> ps_nodes) {
      auto& st = self->state;
      st.coordinator = std::move(coordinator);
      st.next_id = local;
      st.ps_nodes = std::move(ps_nodes);
      admit_in_order(self);
    },
    [self](register_atom, node_registration& reg) -> caf::result<uint64_t> {
      auto& st = self->state;
      if (auto diff = fingerprint_difference(st.fp, reg.fingerprint); !diff.empty()) {
        auto text = fmt::format("{} belongs to another job: {}", reg.task, diff);
        std::cerr << fmt::format("{}: refused a registration: {}\n", to_string(st.task), text);
        return make_error(error_code::invalid_request, std::move(text));
      }
      if (reg.worker >= st.num_workers)
        return make_error(error_code::invalid_request,
                          fmt::format("{}: the cluster has {} worker task(s)", reg.task, st.num_workers));
      if (!reg.replica || !reg.node) return make_error(error_code::invalid_request, reg.task + ": no replica");
      auto rp = self->make_response_promise<uint64_t>();
      if (st.coordinator && reg.worker < st.next_id) {
        admit(self, pending_join{std::move(reg), rp});  // a restarted task joins again
      } else {
        auto id = reg.worker;
        st.waiting[id] = pending_join{std::move(reg), rp};
        admit_in_order(self);
      }
      return rp;
    },
    // Other tasks: whose loss ends this one.
    // A ps task whose coordinator went away and did not come back in time.
    [self](retry_atom, uint64_t epoch, const std::string& text) {
      auto& st = self->state;
      if (epoch != st.watch_epoch || st.watched) return;  // a new coordinator came
      auto why = fmt::format("{}; no coordinator came back within {} s", text,
                             std::chrono::duration_cast<std::chrono::seconds>(st.orphan_wait).count());
      st.box->update([&](node_box& b) {
        if (!b.stopped) b.fatal = why;
      });
    },
    [self](watch_atom, caf::actor coordinator_node, std::string name) {
      auto& st = self->state;
      ++st.watch_epoch;
      st.watched = std::move(coordinator_node);
      st.watched_name = std::move(name);
      self->monitor(st.watched);
    },
    // The coordinator's task: an evaluator wants to learn when the job ends.
    [self](done_atom, caf::actor evaluator_node) { self->state.evaluators.push_back(std::move(evaluator_node)); },
    [self](replica_atom, worker_actor w) { self->state.replica = std::move(w); },
    [self](done_atom, job_outcome& out) -> caf::result<caf::ok_atom> {
      auto& st = self->state;
      if (!st.replica) {
        st.box->update([&](node_box& b) { b.outcome = std::move(out); });
        return caf::ok_atom::value;
      }
      // A worker's own evidence of the values the run ended with: its replica pulls them
      // before this task says goodbye (the ps tasks are stopped only after every worker
      // did).
      auto rp = self->make_response_promise<caf::ok_atom>();
      self->request(st.replica, farewell_timeout - std::chrono::seconds(1), pull_atom::value)
        .then(
          [self, rp, out](uint64_t d) mutable {
            self->state.box->update([&](node_box& b) {
              b.digest = d;
              b.outcome = std::move(out);
            });
            rp.deliver(caf::ok_atom::value);
          },
          [self, rp, out](caf::error& e) mutable {
            self->state.box->update([&](node_box& b) {
              b.digest_error = describe(e);
              b.outcome = std::move(out);
            });
            rp.deliver(caf::ok_atom::value);
          });
      return rp;
    },
    [self](stop_atom, job_outcome& out) -> caf::result<caf::ok_atom> {
      self->state.box->update([&](node_box& b) {
        b.stopped = true;
        b.outcome = std::move(out);
      });
      return caf::ok_atom::value;
    },
    // The coordinator's task at the end: tell every worker task the outcome and stop
    // every ps task, each acknowledging within farewell_timeout; answers when all did
    // (or timed out: a task that went away needs no farewell).
    [self](finish_atom, job_outcome& out) -> caf::result<caf::ok_atom> {
      auto& st = self->state;
      // One-way: the chief never waits for an evaluator (TensorFlow's did, forever).
      for (auto& e : st.evaluators) caf::anon_send(e, done_atom::value, out);
      auto rp = self->make_response_promise<caf::ok_atom>();
      // The workers first (each pulls the final parameters before it answers), then the
      // ps tasks (each writes its ledger as it stops).
      auto ps_nodes = st.ps_nodes;
      auto stop_ps = [self, rp, ps_nodes, out]() mutable {
        auto left = std::make_shared<size_t>(ps_nodes.size());
        if (*left == 0) {
          rp.deliver(caf::ok_atom::value);
          return;
        }
        for (auto& node : ps_nodes)
          self->request(node, farewell_timeout, stop_atom::value, out)
            .then([rp, left](caf::ok_atom) mutable { if (--*left == 0) rp.deliver(caf::ok_atom::value); },
                  [rp, left](caf::error&) mutable { if (--*left == 0) rp.deliver(caf::ok_atom::value); });
      };
      auto workers_left = std::make_shared<size_t>(st.worker_nodes.size());
      if (*workers_left == 0) {
        stop_ps();
        return rp;
      }
      auto one = [stop_ps, workers_left]() mutable {
        if (--*workers_left == 0) stop_ps();
      };
      for (auto& [id, node] : st.worker_nodes)
        self->request(node, farewell_timeout, done_atom::value, out)
          .then([one](caf::ok_atom) mutable { one(); }, [one](caf::error&) mutable { one(); });
      return rp;
    },
  };
}

}  // namespace

node_actor spawn_node_actor(caf::actor_system& sys, node_init init) { return sys.spawn(node_behavior, std::move(init)); }

}  // namespace actortrain::detail
