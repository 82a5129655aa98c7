#pragma once
// Internal: reading whole files, gunzipping in memory.

#include <cstddef>
#include <cstdint>
#include <string>

namespace actortrain::dataset::detail {

/// Bytes in anonymous memory of their own: never cleared by the process before it is
/// written (the kernel gives zeroed pages), grown in place where it can (mremap), and in
/// 2 MiB pages where the kernel has them (MADV_HUGEPAGE) once 2 MiB or larger. A page
/// fault here costs about 10 us on these machines: reading Fashion-MNIST's 47 MB of
/// training images into 4 KiB pages took twice as long as inflating them. Move-only.
class byte_buffer {
 public:
  byte_buffer() = default;
  byte_buffer(byte_buffer&& other) noexcept { swap(other); }
  byte_buffer& operator=(byte_buffer&& other) noexcept {
    byte_buffer gone(std::move(other));
    swap(gone);
    return *this;
  }
  byte_buffer(const byte_buffer&) = delete;
  byte_buffer& operator=(const byte_buffer&) = delete;
  ~byte_buffer();

  unsigned char* data() { return data_; }
  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }
  unsigned char& operator[](size_t i) { return data_[i]; }
  unsigned char operator[](size_t i) const { return data_[i]; }

  /// Grows or shrinks to `size` bytes, keeping the first min(size, size()) bytes; bytes
  /// beyond the old size are zero only where they were never written. Throws
  /// std::bad_alloc when the memory cannot be had.
  void resize(size_t size);

 private:
  void swap(byte_buffer& other) noexcept;

  unsigned char* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;  // the mapping's length
};

/// The bytes of a file. Throws file_error when it cannot be opened or read.
byte_buffer read_file_bytes(const std::string& path);

/// Result of gunzip().
struct gunzip_result {
  byte_buffer bytes;
  /// The compressed data ended before the end of the gzip stream (bytes holds what could
  /// be decompressed).
  bool truncated = false;
};

/// True when `bytes` start with the gzip magic 1f 8b.
bool is_gzip(const byte_buffer& bytes);

/// Deflate's largest ratio of output to input bytes.
inline constexpr size_t max_deflate_ratio = 1032;

/// What gzip data of `size` bytes says its output is: the last member's trailer (ISIZE,
/// the length mod 2^32: exact for one member under 4 GiB), at most max_deflate_ratio
/// times `size` (a hostile trailer gets no more than honest data of that size could
/// take); 0 when too short to have a trailer. A hint for sizing the output once.
size_t gunzip_size_hint(const unsigned char* compressed, size_t size);

/// Decompresses gzip data (several concatenated members allowed). Throws file_error
/// naming `path` for corrupt data; reports a truncated stream in the result.
gunzip_result gunzip(const byte_buffer& compressed, const std::string& path);

}  // namespace actortrain::dataset::detail
