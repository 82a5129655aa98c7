#pragma once
// Internal: the built-in training step without its logs map, for the trainer's hot path
// (default_train_step wraps it).
#include <actortrain/model/train_step.hpp>

namespace actortrain::model::detail {

/// Forward, the compiled loss, the metrics, backward; returns the loss.
double builtin_step(step_context& ctx);

}  // namespace actortrain::model::detail
