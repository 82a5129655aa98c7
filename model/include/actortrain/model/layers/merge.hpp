#pragma once
// Layers that merge several inputs (Keras's Concatenate and Add). Every input is a batch
// with the same number of rows.
//
//   concatenate:  out = [X_1, X_2, ..., X_m]      [n x (w_1 + ... + w_m)]
//                 dX_i = the columns of d_out that X_i filled
//   add:          out = X_1 + X_2 + ... + X_m     [n x w], every X_i [n x w], m >= 2
//                 dX_i = d_out

#include <actortrain/model/layer.hpp>

namespace actortrain::model::layers {

/// Joins its inputs (one or more) along columns, in input order. kind() and describe()
/// are "concatenate". Throws std::invalid_argument from build() when there is no input or
/// a width is not positive, and from forward() when the inputs' count, widths or row
/// counts differ from what was built (the message names the layer and the shapes).
layer_ptr concatenate();

/// Element-wise sum of two or more inputs of equal width. kind() and describe() are "add".
/// Throws std::invalid_argument from build() with fewer than two inputs or unequal widths
/// (the message names the layer and lists the widths), and from forward() when the
/// inputs' shapes differ from what was built.
layer_ptr add();

}  // namespace actortrain::model::layers
