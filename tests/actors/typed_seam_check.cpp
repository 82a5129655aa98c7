// Compiled, never run: requests and sends through the send seam are checked against the
// receiver's typed interface when they are compiled. Built as is with the suite (every
// well-typed use compiles); tests/actors/CMakeLists.txt builds it again with
// TYPED_SEAM_CASE = 1, 2 or 3, each planting one ill-typed use, and expects the build
// to fail with the seam's own message.

#include <actortrain/actors/core/send_seam.hpp>
#include <actortrain/actors/data/handle.hpp>
#include <actortrain/actors/ps/handle.hpp>

#ifndef TYPED_SEAM_CASE
#define TYPED_SEAM_CASE 0
#endif

namespace at = actortrain;

void typed_seam_uses(caf::event_based_actor* self, at::send_seam& seam, const at::ps_shard_actor& ps,
                     const at::dataset_shard_actor& data, const caf::actor& untyped) {
  auto timeout = caf::timespan{1};
#if TYPED_SEAM_CASE == 1  // a reply handler for what a pull does not answer
  seam.request(self, ps, timeout, at::pull_atom::value, at::pull_request{})
    .then([](at::push_reply&) {}, [](caf::error&) {});
#else
  seam.request(self, ps, timeout, at::pull_atom::value, at::pull_request{})
    .then([](at::pull_reply&) {}, [](caf::error&) {});
#endif
#if TYPED_SEAM_CASE == 2  // a request the receiver's interface does not take
  seam.request(self, data, timeout, at::pull_atom::value, at::pull_request{})
    .then([](at::pull_reply&) {}, [](caf::error&) {});
#else
  seam.request(self, data, timeout, at::batch_atom::value, at::batch_request{})
    .then([](const at::batch_reply&) {}, [](caf::error&) {});
#endif
#if TYPED_SEAM_CASE == 3  // a one-way message the receiver's interface does not take
  seam.send(self, data, at::push_atom::value, at::push_request{});
#else
  seam.send(self, data, at::fill_atom::value);
#endif
  // An untyped handle is checked only at run time.
  seam.request(self, untyped, timeout, at::stats_atom::value).then([](at::ps_stats&) {}, [](caf::error&) {});
}
