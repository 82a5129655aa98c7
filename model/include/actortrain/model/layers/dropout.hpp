#pragma once
// Inverted dropout (Srivastava et al. 2014, as Keras's Dropout).
//
// Training:  out = x .* m / (1 - rate),  m_rc ~ Bernoulli(1 - rate)
// Inference: out = x
// Backward:  dx = d_out .* m / (1 - rate) after a training forward, d_out after an
//            inference one.
//
// The mask is a pure function of the step: element (r, c) of an [n x k] batch is kept
// when uniform01(draw(ctx.step_seed, ctx.node_index, r * k + c)) >= rate (random.hpp), so
// re-running a step (after a worker failure) reproduces its mask exactly, and two
// applications of one dropout object (different node indices) draw different masks.
//
// Shapes: [n x k] in, [n x k] out.

#include <actortrain/model/layer.hpp>

namespace actortrain::model::layers {

/// A dropout layer dropping a fraction `rate` of its inputs in training. kind() is
/// "dropout"; describe() is "dropout(<rate>)". Throws std::invalid_argument here unless
/// 0 <= rate < 1; from build() unless there is exactly one input; from forward() when the
/// batch width differs from the built width.
layer_ptr dropout(float rate);

}  // namespace actortrain::model::layers
