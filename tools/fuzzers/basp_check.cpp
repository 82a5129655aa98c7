// Fuzzes the BASP guard's stream check (actors/src/net/basp_check.hpp): any bytes, in any
// cuts, with any limits, as a client's or a server's stream. Beside the sanitizers it checks the check's own promises: a
// refusal is final and says why, and the handshake is never past before a header.
#include "../../actors/src/net/basp_check.hpp"

#include <fuzzer/FuzzedDataProvider.h>

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in{data, size};
  actortrain::detail::basp_check::limits l;
  l.max_payload = in.ConsumeIntegralInRange<uint64_t>(0, uint64_t{1} << 33);
  l.max_handshake_payload = in.ConsumeIntegralInRange<uint64_t>(0, 1 << 20);
  l.server_stream = in.ConsumeBool();  // a client's stream, or a dialed server's
  actortrain::detail::basp_check check{l};
  bool refused = false;
  while (in.remaining_bytes() > 0) {
    auto cut = in.ConsumeIntegralInRange<size_t>(1, 97);
    auto bytes = in.ConsumeBytes<char>(cut);
    bool ok = check.feed(bytes.data(), bytes.size());
    if (refused && ok) std::abort();              // a refusal is final
    if (!ok && check.why().empty()) std::abort();  // and says why
    refused = refused || !ok;
  }
  if (check.past_handshake() && check.headers() == 0) std::abort();
  return 0;
}
