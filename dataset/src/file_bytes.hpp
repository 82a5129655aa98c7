#pragma once
// Internal: reading whole files, gunzipping in memory.

#include <cstdint>
#include <string>
#include <vector>

namespace actortrain::dataset::detail {

/// The bytes of a file. Throws file_error when it cannot be opened or read.
std::vector<unsigned char> read_file_bytes(const std::string& path);

/// Result of gunzip().
struct gunzip_result {
  std::vector<unsigned char> bytes;
  /// The compressed data ended before the end of the gzip stream (bytes holds what could
  /// be decompressed).
  bool truncated = false;
};

/// True when `bytes` start with the gzip magic 1f 8b.
bool is_gzip(const std::vector<unsigned char>& bytes);

/// Decompresses gzip data (several concatenated members allowed). Throws file_error
/// naming `path` for corrupt data; reports a truncated stream in the result.
gunzip_result gunzip(const std::vector<unsigned char>& compressed, const std::string& path);

}  // namespace actortrain::dataset::detail
