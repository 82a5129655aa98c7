#pragma once
// Internal: CRC-32 as zlib computes it (the gzip / PNG polynomial), so a manifest records
// a checksum that `python3 -c "import zlib; zlib.crc32(data)"` reproduces. zlib's own
// crc32 (slice-by-N tables), fed in chunks its 32-bit length takes.

#include <cstdint>
#include <string_view>

#include <zlib.h>

namespace actortrain::model::detail {

/// Continues a CRC over more bytes; start with crc = 0.
inline uint32_t crc32_update(uint32_t crc, std::string_view bytes) {
  uLong c = crc;
  constexpr size_t chunk = 1u << 30;
  while (!bytes.empty()) {
    const size_t n = bytes.size() < chunk ? bytes.size() : chunk;
    c = ::crc32(c, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(n));
    bytes.remove_prefix(n);
  }
  return static_cast<uint32_t>(c);
}

}  // namespace actortrain::model::detail
