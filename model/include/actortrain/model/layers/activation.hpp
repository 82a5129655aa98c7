#pragma once
// Element-wise and row-wise activations: the `activation` enum that dense() fuses into
// its output pass, the kernels both dense() and the stand-alone activation layers run,
// and the stand-alone layers relu(), tanh(), sigmoid(), softmax() (Keras's Activation).
//
// Maths (z = pre-activation, y = act(z), g = dLoss/dy):
//   linear   y = z                         dLoss/dz = g
//   relu     y = max(z, 0)                 dLoss/dz = g .* [y > 0]   (0 at the kink)
//   tanh     y = tanh(z)                   dLoss/dz = g .* (1 - y^2)
//   sigmoid  y = 1 / (1 + exp(-z))         dLoss/dz = g .* y .* (1 - y)
//   softmax  y_ij = exp(z_ij - m_i) / sum_k exp(z_ik - m_i), m_i = max_k z_ik (row-wise)
//            dLoss/dz_i = y_i .* (g_i - <g_i, y_i>)   (the Jacobian-vector product)
// Every derivative is computed from y alone, so backward needs only the layer's output.
//
// Shapes: a batch [n x k] in, a batch [n x k] out.

#include <actortrain/model/layer.hpp>
#include <actortrain/model/tensor.hpp>

#include <string>

namespace actortrain::model {

enum class activation { linear, relu, tanh, sigmoid, softmax };

/// "linear", "relu", "tanh", "sigmoid", "softmax".
std::string to_string(activation a);

namespace layers {

using ::actortrain::model::activation;

/// y <- act(z + bias), in one pass over z. `y` is resized to z's shape and may be the
/// same object as `z` (computed in place, as dense() does on its product). `bias` is
/// null or a [1 x z.cols()] row added to every row of z (the caller guarantees the width).
/// Allocates nothing when y already has z's shape.
void activate(activation a, const matrix& z, matrix& y, const matrix* bias = nullptr);

/// d <- g .* act'(z) expressed through y = act(z) (see the table above). `d` is resized
/// to y's shape and may be the same object as `g` (computed in place); y and g have the
/// same shape (the caller guarantees it). Allocates nothing when d already has y's shape.
void activation_backward(activation a, const matrix& y, const matrix& g, matrix& d);

/// A stand-alone activation layer of one input; kind() and describe() are to_string(a).
/// Throws std::invalid_argument from build() unless there is exactly one input, and from
/// forward() unless there is exactly one input of the width built for.
layer_ptr activation_layer(activation a);

/// max(x, 0). Its gradient at exactly 0 is taken as 0.
layer_ptr relu();
/// tanh(x).
layer_ptr tanh();
/// The logistic function 1 / (1 + exp(-x)).
layer_ptr sigmoid();
/// Row-wise softmax (each row sums to 1), computed with the row max subtracted so
/// logits of any magnitude stay finite.
layer_ptr softmax();

}  // namespace layers
}  // namespace actortrain::model
