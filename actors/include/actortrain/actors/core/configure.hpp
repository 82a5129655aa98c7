#pragma once
// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// actortrain::configure: the one call an application makes on its actor_system_config
// before building its actor_system. It registers every ActorTrain message type (one
// type-ID block), the "actortrain" error category, and a thread hook that turns on
// flush-to-zero / denormals-are-zero in every thread CAF starts (scheduler workers,
// detached actors); optionally loads the middleman for clusters of processes.
//
// example[system]:
//   caf::actor_system_config cfg;
//   actortrain::configure(cfg);
//   caf::actor_system sys{cfg};
//
// An application with message types of its own starts its type-ID block where ours
// ends: CAF_BEGIN_TYPE_ID_BLOCK(my_app, actortrain::first_app_type_id) — the value is
// caf::id_block::actortrain::end, re-exported by actortrain/actors/core/messages.hpp.
//
// fit() and the spawn functions check that configure() ran on the system's config and
// fail with error_code::not_configured otherwise.

#include <cstdint>

namespace caf {
class actor_system_config;
class actor_system;
}  // namespace caf

namespace actortrain {

struct configure_options {
  /// Load caf::io::middleman (needed only for clusters of processes).
  bool load_middleman = false;
  /// Install the flush-to-zero thread hook (leave on: denormals cost ~40% on an MLP).
  bool flush_to_zero = true;
  /// Scheduler threads without work wait for the next job (CAF's relaxed stage, woken
  /// by the enqueue) after a short spin, instead of CAF's default of 500 more polls
  /// 50 us apart (work-stealing.moderate-poll-attempts = 0). On a machine with few cores
  /// those polls take the CPU from the maths and delay other processes' messages:
  /// `actortrain bench cluster` ran 5 processes at 34-49k samples/s with them and 56-65k
  /// without; a 4 KiB request round trip between two processes fell from 0.55 to 0.2 ms.
  bool sleep_when_idle = true;
};

/// Registers ActorTrain's types and hooks on `cfg`. Call once per config, before the
/// actor_system is constructed. Throws std::logic_error if called twice on one config.
void configure(caf::actor_system_config& cfg, const configure_options& opts = {});

/// True when configure() ran on the config `sys` was built from.
bool is_configured(const caf::actor_system& sys);

}  // namespace actortrain
