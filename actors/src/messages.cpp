#include <actortrain/actors/messages.hpp>

#include <fmt/format.h>

namespace actortrain {

std::string to_string(const step_id& s) { return fmt::format("(run {}, pipeline {}, position {})", s.run, s.pipeline, s.position); }

std::string to_string(push_status s) {
  switch (s) {
    case push_status::applied: return "applied";
    case push_status::duplicate: return "duplicate";
    case push_status::held: return "held";
  }
  return "unknown";
}

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
