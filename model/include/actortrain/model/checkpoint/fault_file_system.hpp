#pragma once
// A file_system wrapper for tests that injects failures deterministically (leveldb's
// fault-injection Env): a disk that fills up after a byte budget, the n-th call of an
// operation failing, or every call on matching paths failing. Everything else passes
// through to the wrapped file system. Nothing is random and nothing sleeps.
//
// Thread-safe (one mutex). The wrapped file system must outlive the wrapper.

#include <actortrain/model/checkpoint/file_system.hpp>

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

namespace actortrain::model {

class fault_file_system final : public file_system {
 public:
  /// Operations that faults can target; `calls()` counts them.
  enum class op { create_dir, write, sync_file, sync_dir, rename, remove, list, read };

  explicit fault_file_system(file_system& base);

  /// Disk full: from now on writes may add at most `bytes` more bytes in total. The write
  /// that crosses the budget writes only the bytes that still fit (leaving a partial
  /// file, as a real full disk does) and fails with no_space_on_device; so does every
  /// later write until the budget is cleared.
  void set_write_budget(uint64_t bytes);

  /// The n-th call of `o` from now on (1-based) fails with `error` without touching the
  /// wrapped file system. Several may be pending at once.
  void fail_nth(op o, uint64_t n, std::errc error = std::errc::io_error);

  /// Every call of `o` on a path containing `substring` fails with `error` (until
  /// cleared). For rename both paths are checked.
  void fail_path(op o, std::string substring, std::errc error = std::errc::io_error);

  /// Removes every fault and the write budget (counters keep counting).
  void clear_faults();

  /// Calls of `o` so far (failed ones included).
  uint64_t calls(op o) const;
  /// Bytes the wrapped file system was asked to write so far.
  uint64_t bytes_written() const;

  io_status create_dir(const std::string& path) override;
  io_status create_dirs(const std::string& path) override;
  io_status write_file(const std::string& path,
                       const std::vector<std::string_view>& chunks) override;
  using file_system::write_file;
  io_status sync_file(const std::string& path) override;
  io_status sync_dir(const std::string& path) override;
  io_status rename(const std::string& from, const std::string& to) override;
  io_status remove_all(const std::string& path) override;
  io_status list_dir(const std::string& path, std::vector<std::string>& names) override;
  io_status read_file(const std::string& path, std::string& out) override;
  bool exists(const std::string& path) override;

 private:
  struct nth_fault {
    op target;
    uint64_t at_call;  // absolute call number
    std::errc error;
  };
  struct path_fault {
    op target;
    std::string substring;
    std::errc error;
  };

  /// Counts the call and returns the injected failure, if any (mutex held by caller).
  std::optional<io_status> inject(op o, const char* name, const std::string& path,
                                  const std::string& other = {});

  file_system& base_;
  mutable std::mutex mutex_;
  std::vector<uint64_t> calls_;
  std::vector<nth_fault> nth_;
  std::vector<path_fault> paths_;
  std::optional<uint64_t> budget_;
  uint64_t bytes_written_ = 0;
};

}  // namespace actortrain::model
