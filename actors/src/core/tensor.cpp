// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
#include <actortrain/actors/core/step_id.hpp>
#include <actortrain/actors/core/tensor.hpp>

#include <fmt/format.h>

namespace actortrain {

detail::tensor_side_channel*& detail::side_channel() {
  thread_local tensor_side_channel* current = nullptr;
  return current;
}

std::string to_string(const step_id& s) { return fmt::format("(run {}, pipeline {}, position {})", s.run, s.pipeline, s.position); }

model::matrix tensor::take() {
  if (!value) return {};
  model::matrix out;
  if (value.use_count() == 1)
    out = std::move(const_cast<model::matrix&>(*value));  // sole owner: nobody can observe the move
  else
    out = *value;
  value.reset();
  return out;
}

}  // namespace actortrain
