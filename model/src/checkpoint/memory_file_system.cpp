#include <actortrain/model/checkpoint/memory_file_system.hpp>

#include <cerrno>

namespace actortrain::model {

namespace {

bool under(const std::string& path, const std::string& dir) {
  return path.size() > dir.size() + 1 && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/';
}

}  // namespace

bool memory_file_system::is_dir(const std::string& path) const {
  return path.empty() || path == "/" || path == "." || dirs_.count(path) > 0;
}

io_status memory_file_system::create_dir(const std::string& path) {
  std::lock_guard<std::mutex> lock{mtx_};
  if (is_dir(path) || files_.count(path)) return io_status::from_errno(EEXIST, "create_dir", path);
  if (!is_dir(parent_path(path))) return io_status::from_errno(ENOENT, "create_dir", path);
  dirs_.insert(path);
  return {};
}

io_status memory_file_system::create_dirs(const std::string& path) {
  std::lock_guard<std::mutex> lock{mtx_};
  std::vector<std::string> chain;
  for (auto p = path; !is_dir(p); p = parent_path(p)) {
    if (files_.count(p)) return io_status::from_errno(ENOTDIR, "create_dirs", path);
    chain.push_back(p);
  }
  dirs_.insert(chain.begin(), chain.end());
  return {};
}

io_status memory_file_system::write_file(const std::string& path, const std::vector<std::string_view>& chunks) {
  std::lock_guard<std::mutex> lock{mtx_};
  if (!is_dir(parent_path(path))) return io_status::from_errno(ENOENT, "write", path);
  if (is_dir(path)) return io_status::from_errno(EISDIR, "write", path);
  auto& f = files_[path];
  f.clear();
  for (auto c : chunks) f.append(c.data(), c.size());
  return {};
}

io_status memory_file_system::sync_file(const std::string& path) {
  std::lock_guard<std::mutex> lock{mtx_};
  return files_.count(path) ? io_status{} : io_status::from_errno(ENOENT, "sync_file", path);
}

io_status memory_file_system::sync_dir(const std::string& path) {
  std::lock_guard<std::mutex> lock{mtx_};
  return is_dir(path) ? io_status{} : io_status::from_errno(ENOENT, "sync_dir", path);
}

io_status memory_file_system::rename(const std::string& from, const std::string& to) {
  std::lock_guard<std::mutex> lock{mtx_};
  if (!is_dir(parent_path(to))) return io_status::from_errno(ENOENT, "rename", to);
  if (auto f = files_.find(from); f != files_.end()) {
    if (is_dir(to)) return io_status::from_errno(EISDIR, "rename", to);
    auto data = std::move(f->second);
    files_.erase(f);
    files_[to] = std::move(data);
    return {};
  }
  if (!dirs_.count(from)) return io_status::from_errno(ENOENT, "rename", from);
  if (files_.count(to)) return io_status::from_errno(ENOTDIR, "rename", to);
  for (auto& f : files_)
    if (under(f.first, to)) return io_status::from_errno(ENOTEMPTY, "rename", to);
  std::map<std::string, std::string> moved_files;
  for (auto i = files_.begin(); i != files_.end();)
    if (under(i->first, from)) {
      moved_files[to + i->first.substr(from.size())] = std::move(i->second);
      i = files_.erase(i);
    } else {
      ++i;
    }
  std::set<std::string> moved_dirs{to};
  for (auto i = dirs_.begin(); i != dirs_.end();)
    if (*i == from || under(*i, from)) {
      if (*i != from) moved_dirs.insert(to + i->substr(from.size()));
      i = dirs_.erase(i);
    } else {
      ++i;
    }
  files_.merge(moved_files);
  dirs_.merge(moved_dirs);
  return {};
}

io_status memory_file_system::remove_all(const std::string& path) {
  std::lock_guard<std::mutex> lock{mtx_};
  files_.erase(path);
  dirs_.erase(path);
  for (auto i = files_.begin(); i != files_.end();) i = under(i->first, path) ? files_.erase(i) : std::next(i);
  for (auto i = dirs_.begin(); i != dirs_.end();) i = under(*i, path) ? dirs_.erase(i) : std::next(i);
  return {};
}

io_status memory_file_system::list_dir(const std::string& path, std::vector<std::string>& names) {
  std::lock_guard<std::mutex> lock{mtx_};
  if (!is_dir(path)) return io_status::from_errno(ENOENT, "list_dir", path);
  std::set<std::string> out;
  auto child = [&path](const std::string& p) -> bool { return parent_path(p) == path && p != path; };
  for (auto& [p, data] : files_)
    if (child(p)) out.insert(p.substr(p.rfind('/') + 1));
  for (auto& d : dirs_)
    if (child(d)) out.insert(d.substr(d.rfind('/') + 1));
  names.assign(out.begin(), out.end());
  return {};
}

io_status memory_file_system::read_file(const std::string& path, std::string& out) {
  std::lock_guard<std::mutex> lock{mtx_};
  auto f = files_.find(path);
  if (f == files_.end()) return io_status::from_errno(ENOENT, "read", path);
  out = f->second;
  return {};
}

bool memory_file_system::exists(const std::string& path) {
  std::lock_guard<std::mutex> lock{mtx_};
  return is_dir(path) || files_.count(path) > 0;
}

size_t memory_file_system::bytes() const {
  std::lock_guard<std::mutex> lock{mtx_};
  size_t n = 0;
  for (auto& [p, data] : files_) n += data.size();
  return n;
}

}  // namespace actortrain::model
