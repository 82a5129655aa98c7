#pragma once
// Internal: CRC-32 (the zlib / PNG / gzip polynomial, reflected 0xEDB88320), so a
// manifest can record a checksum that `python3 -c "import zlib; zlib.crc32(data)"`
// reproduces. Byte-at-a-time table: ~0.5 GB/s, negligible next to fsync.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace actortrain::model::detail {

constexpr std::array<uint32_t, 256> make_crc32_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  return table;
}

inline constexpr std::array<uint32_t, 256> crc32_table = make_crc32_table();

/// Continues a CRC over more bytes; start with crc = 0.
inline uint32_t crc32_update(uint32_t crc, std::string_view bytes) {
  uint32_t c = ~crc;
  for (unsigned char b : bytes) c = crc32_table[(c ^ b) & 0xFFu] ^ (c >> 8);
  return ~c;
}

}  // namespace actortrain::model::detail
