// Fuzzes the IDX reader (dataset/idx.hpp), gzip included: any file is an array whose
// dimensions match its bytes, or a file_error. The bytes are a memfd, not a disk file.
#include <actortrain/dataset/error.hpp>
#include <actortrain/dataset/idx.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int fd = ::memfd_create("idx", MFD_CLOEXEC);
  if (fd < 0) std::abort();
  if (size > 0 && ::write(fd, data, size) != static_cast<ssize_t>(size)) std::abort();
  try {
    auto a = actortrain::dataset::read_idx("/proc/self/fd/" + std::to_string(fd));
    int64_t n = 1;
    for (auto d : a.dims) n *= d;
    if (n != a.data.size()) std::abort();  // the matrix holds what the header says
  } catch (const actortrain::dataset::file_error&) {
  }
  ::close(fd);
  return 0;
}
