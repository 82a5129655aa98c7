#pragma once
// A file_system held in memory: directories and files in two ordered maps, durable from
// the moment they are written (sync calls only check that the path exists). For the
// fault simulator, whose checkpoints must be fast, leave nothing on disk and be the same
// in every process; wrap it in a fault_file_system to fail it.
//
// Paths are compared as strings: use one spelling per path (join_path builds them).
// "/", "." and "" always exist as directories. Thread-safe (one mutex).

#include <actortrain/model/checkpoint/file_system.hpp>

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace actortrain::model {

class memory_file_system final : public file_system {
 public:
  io_status create_dir(const std::string& path) override;
  io_status create_dirs(const std::string& path) override;
  io_status write_file(const std::string& path, const std::vector<std::string_view>& chunks) override;
  using file_system::write_file;
  io_status sync_file(const std::string& path) override;
  io_status sync_dir(const std::string& path) override;
  io_status rename(const std::string& from, const std::string& to) override;
  io_status remove_all(const std::string& path) override;
  io_status list_dir(const std::string& path, std::vector<std::string>& names) override;
  io_status read_file(const std::string& path, std::string& out) override;
  bool exists(const std::string& path) override;

  /// Bytes held in files (for tests).
  size_t bytes() const;

 private:
  bool is_dir(const std::string& path) const;
  std::set<std::string> dirs_;
  std::map<std::string, std::string> files_;
  mutable std::mutex mtx_;
};

}  // namespace actortrain::model
