// from_files: the concatenation of one dataset per file, read lazily and remembered as a
// list of files so that auto_shard can give each input pipeline its own files.

#include "node.hpp"

#include <actortrain/dataset/sources.hpp>

#include <fmt/format.h>

#include <mutex>

namespace actortrain::dataset {
namespace detail {
namespace {

/// One file and, once read, its dataset. Shared by a files node and the nodes sharded from
/// it, so a file is read at most once.
struct lazy_file {
  explicit lazy_file(std::string p) : path(std::move(p)) {}
  const std::string path;
  std::mutex mutex;
  node_ptr loaded;  // guarded by mutex
};

class files_node final : public node {
 public:
  files_node(std::vector<std::shared_ptr<lazy_file>> files, file_reader_fn reader)
      : files_(std::move(files)), reader_(std::move(reader)) {}

  node_kind kind() const override { return node_kind::files; }
  cardinality_info cardinality() const override { return contents()->cardinality(); }

  std::string label() const override {
    std::string s = "files(";
    const size_t n = files_.size();
    auto name = [&](size_t i) { return base_name(files_[i]->path); };
    if (n <= 4) {
      for (size_t i = 0; i < n; ++i) s += (i > 0 ? ", " : "") + name(i);
    } else {
      s += fmt::format("{} files: {}, {}, ..., {}", n, name(0), name(1), name(n - 1));
    }
    return s + ")";
  }

  std::unique_ptr<accessor> access(uint64_t epoch) const override {
    return contents()->access(epoch);
  }

  size_t size() const { return files_.size(); }

  node_ptr shard(uint64_t num_shards, uint64_t index) const {
    std::vector<std::shared_ptr<lazy_file>> mine;
    for (size_t i = index; i < files_.size(); i += num_shards) mine.push_back(files_[i]);
    return std::make_shared<files_node>(std::move(mine), reader_);
  }

 protected:
  std::unique_ptr<iterator> stream(uint64_t epoch, uint64_t start) const override {
    return contents()->iterate(epoch, start);
  }

 private:
  /// The concatenation of every file's dataset, reading the files not yet read.
  node_ptr contents() const {
    std::lock_guard<std::mutex> guard(mutex_);
    if (contents_) return contents_;
    std::vector<node_ptr> parts;
    parts.reserve(files_.size());
    for (const auto& f : files_) parts.push_back(load(*f));
    contents_ = make_concat_node(std::move(parts));
    return contents_;
  }

  node_ptr load(lazy_file& f) const {
    std::lock_guard<std::mutex> guard(f.mutex);
    if (!f.loaded) f.loaded = reader_(f.path).root();
    return f.loaded;
  }

  std::vector<std::shared_ptr<lazy_file>> files_;
  file_reader_fn reader_;
  mutable std::mutex mutex_;
  mutable node_ptr contents_;  // guarded by mutex_
};

const files_node& as_files(const node& n) {
  if (n.kind() != node_kind::files)
    throw std::logic_error("dataset node '" + n.label() + "' is not a files node");
  return static_cast<const files_node&>(n);
}

}  // namespace

node_ptr make_files_node(std::vector<std::string> files, file_reader_fn reader) {
  std::vector<std::shared_ptr<lazy_file>> lazy;
  lazy.reserve(files.size());
  for (auto& f : files) lazy.push_back(std::make_shared<lazy_file>(std::move(f)));
  return std::make_shared<files_node>(std::move(lazy), std::move(reader));
}

size_t file_count(const node& files) { return as_files(files).size(); }

node_ptr shard_files(const node& files, uint64_t num_shards, uint64_t index) {
  return as_files(files).shard(num_shards, index);
}

}  // namespace detail

dataset from_files(std::vector<std::string> files, file_reader_fn reader) {
  if (files.empty()) throw std::invalid_argument("from_files: the list of files is empty");
  if (!reader) throw std::invalid_argument("from_files: the reader is empty");
  return dataset(detail::make_files_node(std::move(files), std::move(reader)));
}

}  // namespace actortrain::dataset
