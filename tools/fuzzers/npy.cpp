// Fuzzes the .npy reader of checkpoints (model/checkpoint/npy.hpp): any file is a matrix
// of the shape its header gives, or a checkpoint_error.
#include <actortrain/model/checkpoint/checkpoint_error.hpp>
#include <actortrain/model/checkpoint/memory_file_system.hpp>
#include <actortrain/model/checkpoint/npy.hpp>

#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  actortrain::model::memory_file_system fs;
  if (!fs.write_file("/a.npy", std::string_view(reinterpret_cast<const char*>(data), size))) std::abort();
  try {
    auto m = actortrain::model::read_npy(fs, "/a.npy");
    volatile float sink = m.size() > 0 ? m.data()[m.size() - 1] : 0.f;  // every float is there
    (void)sink;
  } catch (const actortrain::model::checkpoint_error&) {
  }
  return 0;
}
