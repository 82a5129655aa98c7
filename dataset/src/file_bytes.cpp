#include "file_bytes.hpp"

#include <actortrain/dataset/error.hpp>

#include <fmt/format.h>
#include <zlib.h>

#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <utility>

namespace actortrain::dataset::detail {

namespace {

constexpr size_t huge_page = size_t{2} << 20;

/// The mapping length for `size` bytes: whole 4 KiB pages, whole 2 MiB pages from 2 MiB.
size_t mapped_length(size_t size) {
  const size_t unit = size >= huge_page ? huge_page : 4096;
  return (size + unit - 1) / unit * unit;
}

}  // namespace

byte_buffer::~byte_buffer() {
  if (data_) ::munmap(data_, capacity_);
}

void byte_buffer::swap(byte_buffer& other) noexcept {
  std::swap(data_, other.data_);
  std::swap(size_, other.size_);
  std::swap(capacity_, other.capacity_);
}

void byte_buffer::resize(size_t size) {
  if (size > capacity_) {
    const size_t length = mapped_length(size);
    void* p = data_ ? ::mremap(data_, capacity_, length, MREMAP_MAYMOVE)
                    : ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    data_ = static_cast<unsigned char*>(p);
    capacity_ = length;
    if (length >= huge_page) ::madvise(data_, length, MADV_HUGEPAGE);  // a hint: 4 KiB pages otherwise
  }
  size_ = size;
}

byte_buffer read_file_bytes(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) throw file_error(path, fmt::format("cannot open: {}", std::strerror(errno)));
  byte_buffer bytes;
  // Sized once from the file's length when it has one, with a byte to spare so that
  // fread finds the end without growing the buffer (a pipe or /proc file reads on).
  struct stat sb;
  if (::fstat(::fileno(f.get()), &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0)
    bytes.resize(static_cast<size_t>(sb.st_size) + 1);
  size_t used = 0;
  while (true) {
    if (used == bytes.size()) bytes.resize(std::max<size_t>(bytes.size() * 2, 1 << 16));
    const size_t got = std::fread(bytes.data() + used, 1, bytes.size() - used, f.get());
    used += got;
    if (got == 0) break;
  }
  bytes.resize(used);
  if (std::ferror(f.get()))
    throw file_error(path, fmt::format("read error after {} bytes: {}", bytes.size(),
                                       std::strerror(errno)));
  return bytes;
}

bool is_gzip(const byte_buffer& bytes) {
  return bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b;
}

size_t gunzip_size_hint(const unsigned char* compressed, size_t size) {
  if (size < 18) return 0;  // shorter than a gzip header and trailer
  const unsigned char* t = compressed + size - 4;
  const size_t isize = static_cast<size_t>(t[0]) | static_cast<size_t>(t[1]) << 8 |
                       static_cast<size_t>(t[2]) << 16 | static_cast<size_t>(t[3]) << 24;
  return std::min(isize, size * max_deflate_ratio);
}

gunzip_result gunzip(const byte_buffer& compressed, const std::string& path) {
  gunzip_result result;
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK)
    throw file_error(path, "cannot initialize zlib");
  std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&zs, &inflateEnd);

  size_t in_offset = 0;
  auto& out = result.bytes;
  // One byte over the hint, so that inflate finds room to report the end of the stream;
  // a hint the host cannot reserve is dropped (the data decides, by doubling).
  const size_t floor = std::max<size_t>(compressed.size() * 2, 1 << 16);
  try {
    out.resize(std::max(gunzip_size_hint(compressed.data(), compressed.size()) + 1, floor));
  } catch (const std::bad_alloc&) {
    out.resize(floor);
  }
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
