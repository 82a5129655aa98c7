#include <actortrain/model/checkpoint/file_system.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <fmt/format.h>

namespace actortrain::model {

io_status io_status::from_errno(int err, std::string_view op, const std::string& path) {
  return io_status(std::error_code(err, std::generic_category()),
                   fmt::format("{} '{}': {}", op, path, std::strerror(err)));
}

std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

std::string parent_path(const std::string& path) {
  auto end = path.find_last_not_of('/');
  if (end == std::string::npos) return path.empty() ? "." : "/";
  auto slash = path.find_last_of('/', end);
  if (slash == std::string::npos) return ".";
  auto keep = path.find_last_not_of('/', slash);
  if (keep == std::string::npos) return "/";
  return path.substr(0, keep + 1);
}

namespace {

/// Closes on scope exit (errors of close on a read-only or already-synced fd are moot).
struct fd_guard {
  int fd;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
};

int open_retry(const char* path, int flags, mode_t mode = 0) {
  int fd;
  do {
    fd = ::open(path, flags | O_CLOEXEC, mode);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

io_status fsync_path(const std::string& path, int flags, const char* op) {
  const int fd = open_retry(path.c_str(), flags);
  if (fd < 0) return io_status::from_errno(errno, op, path);
  fd_guard guard{fd};
  int rc;
  do {
    rc = ::fsync(fd);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) return io_status::from_errno(errno, op, path);
  return {};
}

class posix_fs final : public file_system {
 public:
  io_status create_dir(const std::string& path) override {
    if (::mkdir(path.c_str(), 0755) != 0) return io_status::from_errno(errno, "create_dir", path);
    return {};
  }

  io_status create_dirs(const std::string& path) override {
    // Walk the components, creating each; an existing directory is fine.
    for (size_t pos = 0; pos != std::string::npos;) {
      pos = path.find('/', pos + 1);
      const std::string prefix = path.substr(0, pos);
      if (prefix.empty()) continue;
      if (::mkdir(prefix.c_str(), 0755) != 0) {
        const int err = errno;
        struct stat st;
        if (err != EEXIST || ::stat(prefix.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
          return io_status::from_errno(err == EEXIST ? ENOTDIR : err, "create_dirs", prefix);
      }
    }
    return {};
  }

  io_status write_file(const std::string& path,
                       const std::vector<std::string_view>& chunks) override {
    const int fd = open_retry(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return io_status::from_errno(errno, "write", path);
    for (const auto& chunk : chunks) {
      const char* p = chunk.data();
      size_t left = chunk.size();
      while (left > 0) {
        const ssize_t n = ::write(fd, p, left);
        if (n < 0) {
          if (errno == EINTR) continue;
          const int err = errno;
          ::close(fd);
          return io_status::from_errno(err, "write", path);
        }
        p += n;  // a short write: continue with the rest
        left -= static_cast<size_t>(n);
      }
    }
    // close() reports delayed write errors (NFS, quota); on Linux it must not be retried.
    if (::close(fd) != 0 && errno != EINTR) return io_status::from_errno(errno, "write", path);
    return {};
  }

  io_status sync_file(const std::string& path) override {
    return fsync_path(path, O_RDONLY, "sync_file");
  }

  io_status sync_dir(const std::string& path) override {
    return fsync_path(path, O_RDONLY | O_DIRECTORY, "sync_dir");
  }

  io_status rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0)
      return io_status::from_errno(errno, "rename", from + "' -> '" + to);
    const auto to_dir = parent_path(to);
    if (auto st = sync_dir(to_dir); !st.ok()) return st;
    if (const auto from_dir = parent_path(from); from_dir != to_dir) return sync_dir(from_dir);
    return {};
  }

  io_status remove_all(const std::string& path) override {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
    if (ec) return io_status(ec, fmt::format("remove_all '{}': {}", path, ec.message()));
    return {};
  }

  io_status list_dir(const std::string& path, std::vector<std::string>& names) override {
    names.clear();
    DIR* dir = ::opendir(path.c_str());
    if (!dir) return io_status::from_errno(errno, "list_dir", path);
    errno = 0;
    while (const dirent* e = ::readdir(dir)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
      errno = 0;
    }
    const int err = errno;
    ::closedir(dir);
    if (err != 0) return io_status::from_errno(err, "list_dir", path);
    std::sort(names.begin(), names.end());
    return {};
  }

  io_status read_file(const std::string& path, std::string& out) override {
    out.clear();
    const int fd = open_retry(path.c_str(), O_RDONLY);
    if (fd < 0) return io_status::from_errno(errno, "read", path);
    fd_guard guard{fd};
    struct stat st;
    if (::fstat(fd, &st) == 0 && st.st_size > 0) out.reserve(static_cast<size_t>(st.st_size));
    char buf[1 << 16];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0) {
        if (errno == EINTR) continue;
        return io_status::from_errno(errno, "read", path);
      }
      if (n == 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return {};
  }

  bool exists(const std::string& path) override {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0;
  }
};

}  // namespace

file_system& posix_file_system() {
  static posix_fs instance;  // stateless: sharing it shares no state
  return instance;
}

}  // namespace actortrain::model
