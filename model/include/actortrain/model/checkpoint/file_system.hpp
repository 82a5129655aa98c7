#pragma once
// The file-system seam (leveldb's Env, reduced to what checkpoints need). Checkpoint code
// does all its I/O through a `file_system&`, so tests inject faults — a full disk, the
// n-th write failing — deterministically through `fault_file_system`, never by filling a
// real disk or sleeping.
//
// Contract for every implementation:
//  - No call throws for an I/O failure: each returns an `io_status` whose message names
//    the operation, the path and the cause ("write '/x/a.npy': No space left on device").
//  - Paths are plain strings ('/'-separated); relative paths are relative to the process's
//    working directory.
//  - Durability is explicit: write_file's data is durable only after sync_file; a new or
//    removed directory entry only after sync_dir of its parent. rename is the exception:
//    it returns only after the directory entries it changed are durable.

#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace actortrain::model {

/// Outcome of a file-system call: ok, or an error code plus a message.
class [[nodiscard]] io_status {
 public:
  /// ok.
  io_status() = default;
  io_status(std::error_code code, std::string message)
    : code_(code), message_(std::move(message)) {}

  /// "<op> '<path>': <strerror(err)>".
  static io_status from_errno(int err, std::string_view op, const std::string& path);

  bool ok() const { return !code_; }
  explicit operator bool() const { return ok(); }
  std::error_code code() const { return code_; }
  /// Empty when ok.
  const std::string& message() const { return message_; }
  bool is_not_found() const { return code_ == std::errc::no_such_file_or_directory; }
  bool is_no_space() const { return code_ == std::errc::no_space_on_device; }

 private:
  std::error_code code_;
  std::string message_;
};

class file_system {
 public:
  virtual ~file_system() = default;

  /// Creates one directory; fails (file_exists) if `path` exists, not_found if the parent
  /// does not.
  virtual io_status create_dir(const std::string& path) = 0;
  /// Creates `path` and any missing parents (mkdir -p); ok if it already is a directory.
  virtual io_status create_dirs(const std::string& path) = 0;

  /// Creates or truncates `path` and writes the concatenation of `chunks` (a gather
  /// write: header and payload need not be copied together). On failure the file may
  /// exist with part of the data; the caller removes it. Not durable until sync_file.
  virtual io_status write_file(const std::string& path,
                               const std::vector<std::string_view>& chunks) = 0;
  io_status write_file(const std::string& path, std::string_view data) {
    return write_file(path, std::vector<std::string_view>{data});
  }

  /// Makes the contents of an existing file durable (fsync).
  virtual io_status sync_file(const std::string& path) = 0;
  /// Makes the entries of a directory durable (fsync of the directory).
  virtual io_status sync_dir(const std::string& path) = 0;

  /// Atomically replaces `to` with `from` (POSIX rename: readers see the old or the new
  /// file, never a mix) and makes the change durable (syncs the parent directories)
  /// before returning.
  virtual io_status rename(const std::string& from, const std::string& to) = 0;

  /// Removes a file or a directory tree; ok if `path` does not exist.
  virtual io_status remove_all(const std::string& path) = 0;

  /// Names (not paths) of the entries of a directory, sorted, without "." and "..".
  /// not_found if it does not exist.
  virtual io_status list_dir(const std::string& path, std::vector<std::string>& names) = 0;

  /// The whole contents of a file into `out` (replaced). not_found if absent.
  virtual io_status read_file(const std::string& path, std::string& out) = 0;

  /// True if something exists at `path` (false on any error).
  virtual bool exists(const std::string& path) = 0;
};

/// The real file system: POSIX open/write/fsync/rename, retrying EINTR and short
/// writes, fsyncing the parent directory after rename. Stateless and thread-safe: the
/// returned object is shared by every caller and lives as long as the program.
file_system& posix_file_system();

/// "a/b" + "c" -> "a/b/c" (no separator doubled).
std::string join_path(const std::string& dir, const std::string& name);

/// The directory part of a path: "a/b/c" -> "a/b", "c" -> ".", "/c" -> "/".
std::string parent_path(const std::string& path);

}  // namespace actortrain::model
