#pragma once
// Fully connected layer (Keras's Dense).
//
//   out = act(X W + b)
//
// Shapes: X [n x in], W "kernel" [in x units], b "bias" [1 x units] (added to every row),
// out [n x units]. Backward, with G = dLoss/dout and D = G .* act'(.) (for softmax the
// row-wise Jacobian-vector product, see activation.hpp):
//   dW += X^T D,   db += column sums of D,   dX = D W^T   (dX only when requested).
//
// This is the hot path of MLP training: forward is one GEMM plus one fused pass for bias
// and activation over the output; backward is two GEMMs (one if dX is not requested), D is
// computed into a scratch buffer of the node_state, and nothing is allocated once the
// batch shape is stable.

#include <actortrain/model/initializer.hpp>
#include <actortrain/model/layer.hpp>
#include <actortrain/model/layers/activation.hpp>

#include <cstdint>

namespace actortrain::model::layers {

/// A dense layer of `units` outputs. Variables: "<name>/kernel" {in x units} initialized
/// by `kernel` (Glorot uniform by default, as Keras) and, when `use_bias`, "<name>/bias"
/// {1 x units} initialized by `bias` (zeros). kind() is "dense"; describe() gives units,
/// activation, use_bias and the initializers, e.g. "dense(256, relu, use_bias=true,
/// kernel=glorot_uniform, bias=zeros)".
///
/// Throws std::invalid_argument: here when units <= 0; from build() unless there is
/// exactly one input of positive width; from forward() when the batch width differs from
/// the kernel's rows. Every message names the layer and the widths.
layer_ptr dense(int64_t units, activation act = activation::linear, bool use_bias = true,
                initializer kernel = glorot_uniform(), initializer bias = zeros());

}  // namespace actortrain::model::layers
