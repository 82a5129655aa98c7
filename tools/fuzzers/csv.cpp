// Fuzzes the CSV source (dataset/csv.hpp): any file is a dataset whose every element can
// be read, or a file_error naming the line and column. The bytes are a memfd.
#include <actortrain/dataset/csv.hpp>
#include <actortrain/dataset/error.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int fd = ::memfd_create("csv", MFD_CLOEXEC);
  if (fd < 0) std::abort();
  if (size > 0 && ::write(fd, data, size) != static_cast<ssize_t>(size)) std::abort();
  try {
    auto ds = actortrain::dataset::from_csv("/proc/self/fd/" + std::to_string(fd));
    auto it = ds.iterate();
    for (int i = 0; i < 10000 && it->next(); ++i) {
    }
  } catch (const actortrain::dataset::file_error&) {
  }
  ::close(fd);
  return 0;
}
