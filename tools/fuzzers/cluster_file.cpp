// Fuzzes the cluster file and TF_CONFIG parser (actors/net/cluster_file.hpp): any text is
// a cluster definition or a cluster_file_error naming what is wrong; any other exception
// escaping is a defect, and so is a definition that breaks the parser's own promises.
#include <actortrain/actors/net/cluster_file.hpp>

#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  for (const char* source : {"cluster.json", "TF_CONFIG"}) {
    try {
      auto def = actortrain::parse_cluster_def(text, source);
      if (def.worker.empty()) std::abort();  // refused: a cluster needs a worker
      for (auto& w : def.worker)
        if (w.port == 0) std::abort();
    } catch (const actortrain::cluster_file_error& e) {
      if (std::string(e.what()).empty()) std::abort();
    }
  }
  return 0;
}
