#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// How workers move parameters and gradients: one set of options that cluster_spec
// (which checks them against the consistency mode) and worker_options (which a worker
// runs with) share as a base, so the cluster hands them on whole.

namespace actortrain {

struct exchange_options {
  /// Workers start a step's successor as soon as its pushes are sent, instead of
  /// waiting for the shards' acknowledgements (faster; with several workers, slightly
  /// more asynchronous: other workers' updates interleave differently).
  bool overlap_push = true;
  /// Workers ask for the next step's parameters while a step computes, so they never
  /// wait for a pull; each step then reads parameters without its predecessor's update
  /// (staleness one higher: 1 with a single worker instead of 0).
  bool pull_ahead = false;
  /// A worker's push of a step asks each shard for the next step's parameters as well
  /// (push_request::then_pull), when that step is of the same task: the shard answers
  /// them with the acknowledgement, read right after it applied the push, which is when
  /// a pull sent after the push would be served. The same reads, half the messages: no
  /// pull request and no separate reply (row pulls still follow the batch). Async and
  /// bounded staleness; sync rounds, pull_ahead and pull_every > 1 pull as before.
  bool pull_with_push = true;
  /// Downpour-style fetching (async only, not with pull_ahead): workers pull the dense
  /// variables every pull_every training steps and reuse them in between, moving about
  /// 1/pull_every of the parameter bytes; every push's staleness counts the versions it
  /// missed (metrics, progress line, fit_result). 1: every step pulls. A change of
  /// epochs (recovery) and a non-training task pull afresh; row pulls stay per step.
  int pull_every = 1;
  /// Downpour's local update (Dean et al. 2012, the client's w' -= alpha * dw'), with
  /// pull_every > 1: after each training step a worker moves its copy of the dense
  /// variables by -local_learning_rate x the step's gradient, so the steps that reuse a
  /// pull compute at values that carry the group's earlier steps instead of the pulled
  /// ones. The shards still get the gradients (their mean with push_every) and apply them
  /// with the cluster's optimizer; the next pull replaces the copy. Plain SGD, whatever
  /// that optimizer is (~0.3 suits the main job's MLP under Adam). 0: the copy stays as
  /// pulled. Embedding rows pulled by row are not moved.
  double local_learning_rate = 0;
  /// Downpour's n_push (async only, dense variables only; steps_per_execution a multiple
  /// of it): workers add up the gradients of push_every consecutive steps of a task and
  /// push their example-weighted mean once, which the shards apply as one update (so
  /// 1/push_every of the gradient bytes and of the optimizer's work). Each step counts as
  /// applied; staleness is the push's, measured from the first step's read. 1: every
  /// step pushes.
  int push_every = 1;
  /// Embedding tables fed straight by a model input (model::row_feeds) are pulled by
  /// row: each step pulls only the rows its batch touches, once the batch is there (and
  /// pushes only those rows' gradients). A table whose inputs nothing else reads
  /// (model::compact_rows, the usual case) is held as those rows alone, one per distinct
  /// id, so a worker's memory does not grow with the table: the step computes on that
  /// compact table with the batch's ids renumbered to its rows (a custom train_step sees
  /// both), and its gradient rows get the table's ids back before the push. Another
  /// table is pulled by row into a buffer of the whole table. false: every step pulls
  /// whole tables (the dense baseline of `actortrain bench sparse`).
  bool pull_rows = true;
};

}  // namespace actortrain
