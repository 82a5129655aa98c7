#include "file_bytes.hpp"

#include <actortrain/dataset/error.hpp>

#include <fmt/format.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>

namespace actortrain::dataset::detail {

std::vector<unsigned char> read_file_bytes(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) throw file_error(path, fmt::format("cannot open: {}", std::strerror(errno)));
  std::vector<unsigned char> bytes;
  unsigned char chunk[1 << 16];
  size_t got = 0;
  while ((got = std::fread(chunk, 1, sizeof chunk, f.get())) > 0)
    bytes.insert(bytes.end(), chunk, chunk + got);
  if (std::ferror(f.get()))
    throw file_error(path, fmt::format("read error after {} bytes: {}", bytes.size(),
                                       std::strerror(errno)));
  return bytes;
}

bool is_gzip(const std::vector<unsigned char>& bytes) {
  return bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b;
}

gunzip_result gunzip(const std::vector<unsigned char>& compressed, const std::string& path) {
  gunzip_result result;
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK)
    throw file_error(path, "cannot initialize zlib");
  std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&zs, &inflateEnd);

  size_t in_offset = 0;
  auto& out = result.bytes;
  out.resize(std::max<size_t>(compressed.size() * 2, 1 << 16));
  size_t out_used = 0;
  constexpr size_t max_chunk = std::numeric_limits<uInt>::max();
  while (true) {
    if (zs.avail_in == 0 && in_offset < compressed.size()) {
      const size_t n = std::min(max_chunk, compressed.size() - in_offset);
      zs.next_in = const_cast<Bytef*>(compressed.data() + in_offset);
      zs.avail_in = static_cast<uInt>(n);
      in_offset += n;
    }
    if (out_used == out.size()) out.resize(out.size() * 2);
    const size_t room = std::min(max_chunk, out.size() - out_used);
    zs.next_out = out.data() + out_used;
    zs.avail_out = static_cast<uInt>(room);
    const int rc = inflate(&zs, Z_NO_FLUSH);
    out_used += room - zs.avail_out;
    if (rc == Z_STREAM_END) {
      if (zs.avail_in == 0 && in_offset == compressed.size()) break;
      // Another gzip member follows.
      if (inflateReset(&zs) != Z_OK) throw file_error(path, "cannot reset zlib");
      continue;
    }
    if (rc == Z_OK) continue;
    if (rc == Z_BUF_ERROR && zs.avail_in == 0 && in_offset == compressed.size()) {
      result.truncated = true;  // input used up before the end of the stream
      break;
    }
    if (rc == Z_BUF_ERROR) continue;  // no progress possible without more output space
    if (rc == Z_MEM_ERROR) throw std::bad_alloc();
    throw file_error(path, fmt::format("corrupt gzip data after {} compressed bytes: {}",
                                       in_offset - zs.avail_in,
                                       zs.msg ? zs.msg : "invalid data"));
  }
  out.resize(out_used);
  return result;
}

}  // namespace actortrain::dataset::detail
