#include <actortrain/model/checkpoint/fault_file_system.hpp>

#include <algorithm>

#include <fmt/format.h>

namespace actortrain::model {

namespace {

constexpr size_t num_ops = 8;

io_status injected(std::errc error, const char* name, const std::string& path) {
  const auto code = std::make_error_code(error);
  return io_status(code, fmt::format("{} '{}': {} (injected)", name, path, code.message()));
}

}  // namespace

fault_file_system::fault_file_system(file_system& base) : base_(base), calls_(num_ops, 0) {
}

void fault_file_system::set_write_budget(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  budget_ = bytes;
}

void fault_file_system::fail_nth(op o, uint64_t n, std::errc error) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (n == 0) return;
  nth_.push_back({o, calls_[static_cast<size_t>(o)] + n, error});
}

void fault_file_system::fail_path(op o, std::string substring, std::errc error) {
  std::lock_guard<std::mutex> lock(mutex_);
  paths_.push_back({o, std::move(substring), error});
}

void fault_file_system::clear_faults() {
  std::lock_guard<std::mutex> lock(mutex_);
  nth_.clear();
  paths_.clear();
  budget_.reset();
}

uint64_t fault_file_system::calls(op o) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return calls_[static_cast<size_t>(o)];
}

uint64_t fault_file_system::bytes_written() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_written_;
}

std::optional<io_status> fault_file_system::inject(op o, const char* name, const std::string& path,
                                                   const std::string& other) {
  const uint64_t call = ++calls_[static_cast<size_t>(o)];
  for (auto it = nth_.begin(); it != nth_.end(); ++it) {
    if (it->target == o && it->at_call == call) {
      const auto error = it->error;
      nth_.erase(it);
      return injected(error, name, path);
    }
  }
  for (const auto& f : paths_) {
    if (f.target != o) continue;
    if (path.find(f.substring) != std::string::npos ||
        (!other.empty() && other.find(f.substring) != std::string::npos))
      return injected(f.error, name, path);
  }
  return std::nullopt;
}

io_status fault_file_system::create_dir(const std::string& path) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto st = inject(op::create_dir, "create_dir", path)) return *st;
  }
  return base_.create_dir(path);
}

io_status fault_file_system::create_dirs(const std::string& path) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto st = inject(op::create_dir, "create_dirs", path)) return *st;
  }
  return base_.create_dirs(path);
}

io_status fault_file_system::write_file(const std::string& path,
                                        const std::vector<std::string_view>& chunks) {
  std::vector<std::string_view> fitting = chunks;
  bool full = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto st = inject(op::write, "write", path)) return *st;
    uint64_t total = 0;
    for (const auto& c : chunks) total += c.size();
    if (budget_ && total > *budget_) {
      // Keep only the prefix that fits, then report the disk full.
      uint64_t room = *budget_;
      fitting.clear();
      for (const auto& c : chunks) {
        if (room == 0) break;
        const auto take = std::min<uint64_t>(room, c.size());
        fitting.push_back(c.substr(0, static_cast<size_t>(take)));
        room -= take;
      }
      total = *budget_;
      full = true;
    }
    if (budget_) *budget_ -= total;
    bytes_written_ += total;
  }
  auto st = base_.write_file(path, fitting);
  if (!st.ok()) return st;
  if (full) return injected(std::errc::no_space_on_device, "write", path);
  return {};
}

io_status fault_file_system::sync_file(const std::string& path) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto st = inject(op::sync_file, "sync_file", path)) return *st;
  }
  return base_.sync_file(path);
}

io_status fault_file_system::sync_dir(const std::string& path) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto st = inject(op::sync_dir, "sync_dir", path)) return *st;
  }
  return base_.sync_dir(path);
}

io_status fault_file_system::rename(const std::string& from, const std::string& to) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto st = inject(op::rename, "rename", from, to)) return *st;
  }
  return base_.rename(from, to);
}

io_status fault_file_system::remove_all(const std::string& path) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto st = inject(op::remove, "remove_all", path)) return *st;
  }
  return base_.remove_all(path);
}

io_status fault_file_system::list_dir(const std::string& path, std::vector<std::string>& names) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto st = inject(op::list, "list_dir", path)) return *st;
  }
  return base_.list_dir(path, names);
}

io_status fault_file_system::read_file(const std::string& path, std::string& out) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto st = inject(op::read, "read", path)) return *st;
  }
  return base_.read_file(path, out);
}

bool fault_file_system::exists(const std::string& path) {
  return base_.exists(path);
}

}  // namespace actortrain::model
