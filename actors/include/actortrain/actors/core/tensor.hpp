#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// The tensor payload of messages: a shared, immutable matrix. In-process a message moves
// or shares it and nothing is copied; its wire form (raw little-endian floats, lengths
// checked before allocating) is in core/wire.hpp.

#include <actortrain/model/tensor.hpp>

#include <cstdint>
#include <memory>
#include <vector>

namespace actortrain {

/// A shared, immutable row-major float matrix in a message (null = absent).
struct tensor {
  std::shared_ptr<const model::matrix> value;
  /// The sender allows it to travel rounded (bfloat16) on a data-plane link between
  /// hosts whose job asked for it ("wire_floats": "bf16", data_plane.hpp): set on
  /// gradients and on the values a training step pulls (a worker computes with them, and
  /// with pull_every > 1 trains its local copy from them), never on what the ps tasks
  /// keep, checkpoint or restore, nor on what is evaluated. Not sent: a received tensor
  /// has it false.
  bool reducible = false;

  tensor() = default;
  // The object itself is never const (only the handle is), so take() may move out of it.
  explicit tensor(model::matrix m) : value(std::make_shared<model::matrix>(std::move(m))) {}
  explicit tensor(std::shared_ptr<const model::matrix> p) : value(std::move(p)) {}
  int64_t rows() const { return value ? value->rows() : 0; }
  int64_t cols() const { return value ? value->cols() : 0; }
  /// The matrix, moved out when this is its only owner, else copied.
  model::matrix take();
};

/// Largest tensor a peer may announce (2^31 floats): bounds allocations from the wire.
constexpr uint64_t max_wire_floats = uint64_t{1} << 31;

namespace detail {
/// Tensors that travel beside a serialized message instead of inside it (the data plane,
/// data_plane.hpp): while a thread has one installed, inspect() writes a tensor as its
/// rows and cols only and appends its matrix to `out` (shared, not copied), and reads
/// one by taking the next matrix of `in`, which must have the announced shape. A null or
/// 0x0 tensor travels as 0x0 and takes no entry. Elsewhere (BASP) nothing changes.
struct tensor_side_channel {
  std::vector<std::shared_ptr<const model::matrix>> out;
  std::vector<bool> out_reducible;  ///< tensor::reducible of each of `out`
  std::vector<std::shared_ptr<model::matrix>> in;
  size_t next = 0;
};
/// This thread's side channel (null: tensors travel inline).
tensor_side_channel*& side_channel();
}  // namespace detail

}  // namespace actortrain
