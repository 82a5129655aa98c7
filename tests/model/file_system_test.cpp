// The file-system seam: the POSIX implementation's contract and the fault injector's
// deterministic failures (disk full after a budget, the n-th call, matching paths).
#include <actortrain/model/checkpoint/fault_file_system.hpp>
#include <actortrain/model/checkpoint/file_system.hpp>

#include "optim/temp_dir.hpp"

#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

using namespace actortrain::model;
using actortrain::test::temp_dir;
using fop = fault_file_system::op;

BOOST_AUTO_TEST_SUITE(file_systems)

BOOST_AUTO_TEST_CASE(paths_join_and_split) {
  BOOST_TEST(join_path("a/b", "c") == "a/b/c");
  BOOST_TEST(join_path("a/b/", "c") == "a/b/c");
  BOOST_TEST(join_path("", "c") == "c");
  BOOST_TEST(parent_path("a/b/c") == "a/b");
  BOOST_TEST(parent_path("a/b/c/") == "a/b");
  BOOST_TEST(parent_path("c") == ".");
  BOOST_TEST(parent_path("/c") == "/");
  BOOST_TEST(parent_path("/") == "/");
}

BOOST_AUTO_TEST_CASE(posix_writes_reads_renames_lists_and_removes) {
  temp_dir dir;
  file_system& fs = posix_file_system();
  BOOST_TEST(fs.create_dirs(dir / "x/y/z").ok());
  BOOST_TEST(fs.create_dirs(dir / "x/y/z").ok());  // already there: fine
  BOOST_TEST((fs.create_dir(dir / "x").code() == std::errc::file_exists));
  BOOST_TEST(fs.create_dir(dir / "nope/deeper").is_not_found());

  BOOST_TEST(fs.write_file(dir / "x/a.tmp", std::vector<std::string_view>{"hello ", "world"}).ok());
  BOOST_TEST(fs.sync_file(dir / "x/a.tmp").ok());
  BOOST_TEST(fs.rename(dir / "x/a.tmp", dir / "x/a").ok());
  BOOST_TEST(!fs.exists(dir / "x/a.tmp"));
  std::string content;
  BOOST_TEST(fs.read_file(dir / "x/a", content).ok());
  BOOST_TEST(content == "hello world");
  BOOST_TEST(fs.write_file(dir / "x/a", "short").ok());  // truncates
  BOOST_TEST(fs.read_file(dir / "x/a", content).ok());
  BOOST_TEST(content == "short");
  BOOST_TEST(fs.sync_dir(dir / "x").ok());

  std::vector<std::string> names;
  BOOST_TEST(fs.list_dir(dir / "x", names).ok());
  BOOST_TEST(names == (std::vector<std::string>{"a", "y"}));

  BOOST_TEST(fs.remove_all(dir / "x").ok());
  BOOST_TEST(!fs.exists(dir / "x"));
  BOOST_TEST(fs.remove_all(dir / "x").ok());  // absent: fine
}

BOOST_AUTO_TEST_CASE(posix_errors_are_values_naming_op_and_path) {
  temp_dir dir;
  file_system& fs = posix_file_system();
  std::string content;
  const auto st = fs.read_file(dir / "missing", content);
  BOOST_TEST(!st.ok());
  BOOST_TEST(st.is_not_found());
  BOOST_TEST(st.message().find("read") != std::string::npos);
  BOOST_TEST(st.message().find("missing") != std::string::npos);
  std::vector<std::string> names;
  BOOST_TEST(fs.list_dir(dir / "missing", names).is_not_found());
  BOOST_TEST(fs.write_file(dir / "no/such/dir/file", "x").is_not_found());
  BOOST_TEST(!fs.sync_file(dir / "missing").ok());
  BOOST_TEST(!fs.rename(dir / "missing", dir / "other").ok());
}

BOOST_AUTO_TEST_CASE(write_budget_fills_the_disk_with_a_partial_file) {
  temp_dir dir;
  fault_file_system fs(posix_file_system());
  fs.set_write_budget(10);
  BOOST_TEST(fs.write_file(dir / "a", "123456").ok());
  const auto st = fs.write_file(dir / "b", std::vector<std::string_view>{"abc", "defgh"});
  BOOST_TEST(st.is_no_space());
  BOOST_TEST(st.message().find(dir / "b") != std::string::npos);
  std::string content;
  BOOST_TEST(fs.read_file(dir / "b", content).ok());
  BOOST_TEST(content == "abcd");  // the 4 bytes that fitted
  BOOST_TEST(fs.write_file(dir / "c", "x").is_no_space());
  BOOST_TEST(fs.write_file(dir / "d", "").ok());  // nothing to write, nothing to fail
  BOOST_TEST(fs.bytes_written() == 10u);
  fs.clear_faults();
  BOOST_TEST(fs.write_file(dir / "c", "x").ok());
}

BOOST_AUTO_TEST_CASE(fail_nth_fails_exactly_that_call) {
  temp_dir dir;
  fault_file_system fs(posix_file_system());
  fs.fail_nth(fop::write, 2, std::errc::io_error);
  BOOST_TEST(fs.write_file(dir / "1", "a").ok());
  const auto st = fs.write_file(dir / "2", "b");
  BOOST_TEST((st.code() == std::errc::io_error));
  BOOST_TEST(!fs.exists(dir / "2"));  // failed before touching the disk
  BOOST_TEST(fs.write_file(dir / "3", "c").ok());
  BOOST_TEST(fs.calls(fop::write) == 3u);
  fs.fail_nth(fop::sync_file, 1);
  BOOST_TEST(!fs.sync_file(dir / "1").ok());
  BOOST_TEST(fs.sync_file(dir / "1").ok());
}

BOOST_AUTO_TEST_CASE(fail_path_fails_matching_calls_until_cleared) {
  temp_dir dir;
  fault_file_system fs(posix_file_system());
  fs.fail_path(fop::rename, "manifest");
  BOOST_TEST(fs.write_file(dir / "manifest.tmp", "m").ok());
  BOOST_TEST(!fs.rename(dir / "manifest.tmp", dir / "manifest").ok());
  BOOST_TEST(fs.write_file(dir / "a", "m").ok());
  BOOST_TEST(fs.rename(dir / "a", dir / "b").ok());
  fs.clear_faults();
  BOOST_TEST(fs.rename(dir / "manifest.tmp", dir / "manifest").ok());
}

BOOST_AUTO_TEST_SUITE_END()
