// Fuzzes the checkpoint manifest reader (model/checkpoint/checkpoint.hpp): the input is
// a manifest beside one small array file; any manifest is read whole or refused with a
// checkpoint_error naming the problem.
#include <actortrain/model/checkpoint/checkpoint.hpp>
#include <actortrain/model/checkpoint/checkpoint_error.hpp>
#include <actortrain/model/checkpoint/memory_file_system.hpp>
#include <actortrain/model/checkpoint/npy.hpp>

#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  actortrain::model::memory_file_system fs;
  if (!fs.create_dirs("/ck")) std::abort();  // the harness's own set-up, not the input
  actortrain::model::matrix m(2, 3);
  m.setConstant(1.5f);
  actortrain::model::write_npy(fs, "/ck/v0.npy", m);
  if (!fs.write_file("/ck/manifest.json", std::string_view(reinterpret_cast<const char*>(data), size))) std::abort();
  try {
    actortrain::model::read_manifest(fs, "/ck");
    actortrain::model::read_checkpoint(fs, "/ck");
  } catch (const actortrain::model::checkpoint_error&) {
  }
  return 0;
}
