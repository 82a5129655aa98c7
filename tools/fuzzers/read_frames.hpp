#pragma once
// What a ps task's data plane does with a member's connection after the greeting, for
// the data-plane harnesses (data_plane.cpp, tls_data_plane.cpp): frames read within the
// job's bounds (1 MiB per frame, a budget of 4 MiB) until one is refused or the bytes
// end; every frame gives its share of the budget back (else abort: a leak the fuzzer
// reports).
#include "../../actors/src/net/data_plane_wire.hpp"

#include <caf/actor_system.hpp>

#include <chrono>
#include <cstdlib>
#include <exception>
#include <memory>

namespace actortrain::fuzzing {

inline void read_frames(caf::actor_system& sys, data_plane::wire::socket_link& link) {
  namespace wire = data_plane::wire;
  link.max_frame_bytes = 1 << 20;
  link.budget = std::make_shared<wire::byte_budget>(4 << 20);
  link.budget_wait = std::chrono::milliseconds(10);
  for (int frames = 0; frames < 64; ++frames) {
    wire::frame f;
    // CAF's types that allocate without bound on bad bytes are refused before CAF reads
    // them (refused_caf_content in basp_check.hpp); an exception closes the connection,
    // as the server's reader does (libFuzzer reports an allocation too big before it).
    try {
      if (!wire::receive(sys, link, f).empty()) break;  // refused, or the end: fine
    } catch (const std::exception&) {
      break;
    }
  }
  if (link.budget->left() != link.budget->total()) std::abort();  // every frame gave its share back
}

}  // namespace actortrain::fuzzing
