#pragma once
// Embedding lookup (Keras's Embedding, with Flatten or a pooling combiner after it).
//
// Input: an [n x k] batch of ids (each an integer in [0, vocab_size)), as floats or as
// 64-bit ids (model::batch::ids, which a step renumbers to rows of its table first).
// Variable "embeddings" E {vocab_size x dim}, declared sparse: its gradient is the touched
// rows only (ctx.grads->sparse[id], ids sorted and unique, repeats summed).
//
//   concat:  out_r = [E[x_r1], E[x_r2], ..., E[x_rk]]      [n x (k * dim)]
//   sum:     out_r = sum_j E[x_rj]                          [n x dim]
//   mean:    out_r = (1/k) sum_j E[x_rj]                    [n x dim]
//
// Backward, with G = dLoss/dout: row E[i] receives the sum over every occurrence (r, j) of
// id i of G_r's j-th dim-wide segment (concat), G_r (sum) or G_r / k (mean). Ids have no
// gradient: inputs_differentiable() is false and d_inputs are left untouched.

#include <actortrain/model/initializer.hpp>
#include <actortrain/model/layer.hpp>

#include <cstdint>
#include <string>

namespace actortrain::model::layers {

/// How the k embeddings of one row combine into the output.
enum class combiner { concat, sum, mean };

/// "concat", "sum", "mean".
std::string to_string(combiner c);

/// An embedding table of `vocab_size` rows of width `dim`, initialized by `init` (Keras's
/// default U(-0.05, 0.05)). kind() is "embedding"; describe() gives vocabulary, width,
/// combiner and initializer, e.g. "embedding(1000, 8, concat, init=uniform(-0.05, 0.05))".
///
/// Throws std::invalid_argument: here when vocab_size or dim <= 0 (or vocab_size > 2^24,
/// past which float ids are no longer exact); from build() unless there is exactly one
/// input of positive width; from forward() when the batch width differs from the built
/// width, or when an id is not an integer in [0, vocab_size) or is past the rows of the
/// table it was given (a worker gives it its batch's rows alone: exchange_options::
/// pull_rows) — the message names the layer, the row, the column and the value.
layer_ptr embedding(int64_t vocab_size, int64_t dim, combiner c = combiner::concat,
                    initializer init = uniform(-0.05f, 0.05f));

/// Ids are floats: below 2^24 every integer is exact.
constexpr int64_t max_float_id = int64_t{1} << 24;

/// What a dynamic table does with rare and idle ids (model/dynamic_table.hpp).
struct dynamic_rows {
  /// An id gets a row at the admit_after-th step with a gradient for it; before, it
  /// reads its initial values and its gradients are dropped (0 and 1: at once).
  uint64_t admit_after = 0;
  /// Rows not updated during this many steps are dropped (0: never).
  uint64_t evict_after = 0;
};

/// An embedding table keyed by the raw id instead of a row number: no vocabulary, a row
/// per id seen (variable_spec::dynamic), initialized by `init` seeded by the id, kept by
/// a model::dynamic_table (the local trainer's, or the ps shards' in a cluster). Ids are
/// any integers >= 0 when the input is given as 64-bit ids (model::batch::ids), and
/// below max_float_id when it is given as floats. The table must be
/// applied straight to model inputs that nothing else reads (model::compact_rows): the
/// step computes on its batch's rows alone. Each row is filled as a 1 x dim matrix, so
/// an initializer that scales by the shape (glorot_uniform, he_normal) is refused.
/// describe() gives e.g.
/// "dynamic_embedding(16, sum, init=uniform(-0.05, 0.05), admit_after=0, evict_after=0)".
/// Throws std::invalid_argument for dim <= 0 or an empty or shape-scaled initializer,
/// and from forward() as embedding().
layer_ptr dynamic_embedding(int64_t dim, combiner c = combiner::concat, initializer init = uniform(-0.05f, 0.05f),
                            dynamic_rows rows = {});

}  // namespace actortrain::model::layers
