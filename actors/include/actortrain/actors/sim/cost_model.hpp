#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// What the simulator charges for time (sim_options::costs): a discrete-event model of
// CPU cores, links and single-threaded actors that gives every message between a
// cluster's tasks the moment it reaches its receiver's handler. The simulator runs the
// real coordinator, ps and worker logic on CAF's test coordinator and delays each
// message by what this model says, so the protocol's own decisions (dispatch, pull,
// apply, staleness) play out on simulated time.
//
// What costs what:
//   - CPU. Every host has `cores` cores (this machine's 2 are shared by a chief, ps and
//     worker processes), shared as a time-sharing kernel shares them: a piece of work
//     runs from the moment it is ready at a fair share of the cores beside the pieces
//     already there (all of a core while there are no more pieces than cores; with n
//     others, cores / (n + 1), or what the cores leave free if that is more). A piece
//     timed earlier is not slowed after the fact (its message's time was given
//     already), so what a later piece takes beyond the cores is owed by the earlier
//     pieces' actors, in proportion to their shares, and added to each one's next
//     work: no CPU is lost or made up. An actor does one thing at a time, and what
//     one handler does (a step, then its pushes, then the next pull) in order;
//     messages are handled in the order they arrive, not the order they were sent (a
//     calendar per actor).
//   - A worker's training step: `step_seconds` of CPU (batch, forward, backward) once
//     its pulls have arrived, before its first push of the step leaves.
//   - A ps shard's apply: `apply_seconds_per_float` per float of the push.
//   - A message between two processes: `message_seconds + bytes * byte_seconds` of CPU
//     at each end (dispatch, serialization, copies), `background_seconds + bytes *
//     background_byte_seconds` more at each end that takes a share of the cores but
//     holds nothing up (I/O threads' copies, wake-ups), `latency_seconds` one way, and with
//     `bandwidth` > 0 the bytes queue on the sender's outgoing and the receiver's
//     incoming link (as `tc tbf` on both directions of each veth does). With
//     `streamed` (between hosts: no shared memory, the data plane writes and reads a
//     TCP stream record by record) a message's bytes leave as the sender writes them
//     (the last not before it wrote it) and the receiver reads them as they come: the
//     CPU per byte at each end and the time on the link overlap. Otherwise (shared
//     memory, as the calibration on one host's loopback) the message is written
//     whole, then carried, then read. Within a
//     process (a worker and its own dataset replica, the chief's coordinator) only
//     `message_seconds` at the receiver. Links belong to processes.
//   - The replies that carry data (a pull's values, a batch) are timed when their
//     request is: the shard's reply leaves after it served the request, and the
//     requester's next step waits for it. Other replies are not timed.
//
// Hosts: with `one_host` every task shares one host's cores (this machine); otherwise
// every process has `cores` of its own (the scaling predictions' assumption).
//
// Deterministic: the same calls in the same order give the same answers.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace actortrain {

struct cost_params {
  double step_seconds = 0;             ///< a worker's CPU per training step
  double apply_seconds_per_float = 0;  ///< a ps shard's CPU per gradient float applied
  double message_seconds = 0;          ///< CPU per message at each end between processes
  double byte_seconds = 0;             ///< CPU per byte at each end between processes
  /// CPU per message at each end between processes that no actor waits for: a core of
  /// the host is taken (I/O threads, wake-ups, polling schedulers), the message is not
  /// held up.
  double background_seconds = 0;
  /// CPU per byte at each end between processes that no actor waits for (the data
  /// plane's reader and writer threads' copies), as `background_seconds`.
  double background_byte_seconds = 0;
  double latency_seconds = 0;          ///< one way, between processes
  double bandwidth = 0;                ///< bytes/s of each process's link, each way; 0: unlimited
  int cores = 2;                       ///< per host
  bool one_host = true;                ///< every process on one host (else one host each)
  /// Bytes between processes stream over a socket (between hosts) instead of going
  /// through shared memory: their CPU at each end and their time on the link overlap.
  bool streamed = false;

  /// {"step_seconds": ..., ...} with every field above; keys not given keep the
  /// defaults. Throws std::invalid_argument naming `where` and the key for unknown keys,
  /// non-numbers, negatives and cores < 1.
  static cost_params parse(const std::string& json, const std::string& where);
  std::string to_json() const;
};

/// What a message is to the model.
struct message_cost {
  double request_bytes = 0;
  /// Bytes of a reply the requester waits for before its next step (0: none timed).
  double reply_bytes = 0;
  /// The receiver's handler's CPU besides receiving (a ps apply).
  double work_seconds = 0;
  /// The sender's CPU before the message leaves (a worker's step, before its push).
  double before_seconds = 0;
  /// The sender waits for the replies it is owed (reply_bytes of earlier requests)
  /// before `before_seconds` starts.
  bool after_replies = false;
};

class cost_model {
 public:
  enum class role : uint8_t { coordinator, worker, ps, dataset };
  struct task {
    role r = role::worker;
    uint32_t index = 0;
  };

  explicit cost_model(cost_params p);

  /// A message from `from` to `to` leaving its sender's handler at `now` (seconds):
  /// when the receiver's handler runs (>= now).
  double deliver(task from, task to, const message_cost& m, double now);

  /// When the reply of the last deliver() reaches its requester (with reply_bytes), and
  /// when that request set off.
  double reply_at() const { return reply_at_; }
  double sent_at() const { return sent_at_; }

  /// CPU seconds each ps shard's process has burnt (its applies, receiving and
  /// replying, and the background CPU of its messages).
  const std::vector<double>& ps_busy() const { return ps_busy_; }
  const cost_params& params() const { return p_; }

 private:
  // When a resource is busy: intervals start -> end, those over before `now` pruned.
  struct calendar {
    std::map<double, double> busy;
    // The first gap of length d at or after t.
    double earliest(double t, double d) const;
    void reserve(double start, double d) { busy.emplace(start, start + d); }
    // Marks [start, end) busy, joined to an interval that ends at `start` exactly (an
    // actor's work runs in pieces, one per change of its host's load): the next free
    // moment is then one lookup away, not one per piece.
    void extend(double start, double end);
    void prune(double now);
    // Whether t falls in a busy interval, and where that ends (t when free).
    double free_from(double t) const;
    // The start of the first busy interval after t (infinity: none).
    double next_busy(double t) const;

  };
  // A host's cores over time: from each key on (to the next), the cores' worth of work
  // that runs there and how many pieces of work share them.
  struct actor_state;
  struct load {
    double cores = 0;
    int jobs = 0;
    std::vector<std::pair<actor_state*, double>> who;  // each piece's actor (or none) and rate
  };
  struct host_load {
    std::map<double, load> at;
    // Makes `t` a key (with the load that held there) and returns it.
    std::map<double, load>::iterator split(double t);
    void prune(double now);
    double debt = 0;  // CPU seconds later work took from work of no actor
  };
  struct actor_state {
    calendar cal;             // an actor does one thing at a time
    double handler_end = 0;   // when what its handlers sent so far has left
    double replies = 0;       // when the replies it waits for have arrived
    double lag = 0;           // CPU seconds later work took from it: added to its next work
  };
  struct links {  // a process's link, each way
    calendar out, in;
  };
  // The process a task runs in: a dataset replica lives in its worker's; the rest alone.
  std::pair<int, uint32_t> process_of(task t) const;
  int host_of(task t) const;
  actor_state& state(task t);
  // Runs `d` seconds of `actor`'s work (nullptr: no actor's) on `host`, at or after
  // `ready`, while the actor is free, sharing the cores; returns when it ends.
  // `repay`: then what work of no actor owes on `host` (a piece of no actor that is
  // slowed has no next work of its own to do it in).
  double run(actor_state* actor, int host, double ready, double d, double now, bool repay = true);
  // The bytes of a message between two processes on their links, written by the sender
  // from `start` to `written`: when the first and the last arrive (streamed, they leave
  // as they are written; otherwise all at `written`).
  std::pair<double, double> link(task from, task to, double start, double written, double bytes, double now);
  // The receiver's CPU for a message of `bytes` (0: within a process) arriving over
  // `arrives` (first and last byte), then `work`; returns when its handler is done.
  double receive(actor_state& b, int host, std::pair<double, double> arrives, double bytes, double work, double now);
  // Work of no actor on `host`: d seconds of CPU at a share of its cores, at or after `ready`.
  void background(int host, double ready, double d, double now);
  host_load& host(int h);

  cost_params p_;
  std::map<std::pair<int, uint32_t>, actor_state> actors_;
  std::map<std::pair<int, uint32_t>, int> hosts_;
  std::map<std::pair<int, uint32_t>, links> links_;  // per process
  std::vector<host_load> hosts_load_;
  std::vector<double> ps_busy_;
  double reply_at_ = 0, sent_at_ = 0;
};

}  // namespace actortrain
