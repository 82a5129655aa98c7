// Fuzzes the wire form of every ActorTrain message (actors/core/wire.hpp), as BASP reads a
// peer's message: a caf::message deserialized from any bytes, whatever type ids they
// name, is either refused with an error or decoded, within the sanitizers' eyes. The
// wire's inspect functions are templates, so they are compiled here by clang with
// coverage; CAF itself is Debian's (no coverage, not instrumented).
//
// What it found: a message re-serialized after decoding hung in CAF 0.17's pack754,
// which never returns for +-infinity. ActorTrain's messages now carry every double as its
// bits (exact() in wire.hpp; wire_test checks infinities and NaNs round trip). A bare
// float or double element of a caf::message (a type of CAF's own, which none of
// ActorTrain's messages has) still goes through pack754, so decoded messages are not
// written back here. It also found CAF's std::vector<char> allocating whatever length the
// bytes announce (4 GiB from 21 bytes): both guards now refuse it, and the other types of
// CAF's that are unsafe on a peer's bytes (refused_caf_content in basp_check.hpp).
#include <actortrain/actors/core/configure.hpp>
#include <actortrain/actors/core/messages.hpp>

#include "../../actors/src/net/basp_check.hpp"

#include <caf/all.hpp>
#include <caf/io/middleman.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {
caf::actor_system* sys = nullptr;  // never deleted: ~actor_system at exit is not the code under test
}

namespace {

// Writes one well-formed message of several kinds as seeds into `dir` (how the corpus in
// tools/fuzzers/corpus/messages was made: ACTORTRAIN_FUZZ_SEEDS=DIR build-fuzz/fuzz_messages).
void write_seeds(const char* dir) {
  namespace at = actortrain;
  auto t = at::tensor{std::make_shared<const at::model::matrix>(at::model::matrix::Constant(2, 3, 0.5f))};
  at::pull_request pull;
  pull.partitions.push_back(at::partition_key{0, 1});
  at::push_request push;
  push.step = at::step_id{1, 0, 7};
  push.dense.push_back(at::dense_slice{at::partition_key{0, 0}, 3, t});
  at::step_task task;
  task.steps.push_back(at::step_id{1, 0, 3});
  task.watermark = {2};
  at::batch_reply batch;
  std::vector<caf::message> seeds = {caf::make_message(at::pull_atom::value, pull),
                                     caf::make_message(at::push_atom::value, push),
                                     caf::make_message(at::step_atom::value, task),
                                     caf::make_message(batch),
                                     caf::make_message(at::fence{})};
  int k = 0;
  for (auto& m : seeds) {
    std::vector<char> bytes;
    caf::binary_serializer sink{*sys, bytes};
    if (sink(m)) std::abort();
    auto path = std::string(dir) + "/seed" + std::to_string(k++);
    auto* f = std::fopen(path.c_str(), "wb");
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  auto* cfg = new caf::actor_system_config;
  actortrain::configure(*cfg);
  cfg->load<caf::io::middleman>();  // its message types too, as every node of a cluster has them
  cfg->set("scheduler.max-threads", 1);
  sys = new caf::actor_system(*cfg);
  if (const char* dir = std::getenv("ACTORTRAIN_FUZZ_SEEDS")) {
    write_seeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // What BASP's guard and the data plane do first: bytes holding a type of CAF's that
  // CAF 0.17.6 cannot read safely never reach its deserializer (refused_caf_content in
  // basp_check.hpp; tools/fuzzers/known/ holds an input for each). Anything else that
  // throws (on BASP, that ends the node), crashes or allocates without bound is a finding.
  if (actortrain::detail::refused_caf_content(std::string_view(reinterpret_cast<const char*>(data), size))) return 0;
  caf::message m;
  caf::binary_deserializer source{*sys, reinterpret_cast<const char*>(data), size};
  try {
    if (auto err = source(m)) return 0;  // refused: fine
    // What CAF does with a message no handler takes (print_and_drop): it prints it.
    volatile size_t printed = to_string(m).size();
    (void)printed;
  } catch (const std::runtime_error& e) {
    // Known and open (docs/security.md; tools/fuzzers/known/caf_node_uri): a node id of
    // CAF's uri kind whose host has an unknown variant index, which no name refuses.
    static const std::string_view uri_kind("\0\0\0\0\0\x3f\xad\xee", 8);
    if (std::string(e.what()) != "invalid type found" ||
        std::string_view(reinterpret_cast<const char*>(data), size).find(uri_kind) == std::string_view::npos)
      throw;
  }
  return 0;
}
