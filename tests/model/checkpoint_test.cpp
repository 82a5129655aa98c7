// Checkpoint directories: round trip, commit by manifest, disk-full and other injected
// failures leaving earlier checkpoints intact, pruning, validation errors, and restoring
// a checkpoint taken with 3 partitions into 2 partitions or a whole matrix.
#include <actortrain/model/checkpoint/checkpoint.hpp>
#include <actortrain/model/checkpoint/fault_file_system.hpp>
#include <actortrain/model/checkpoint/memory_file_system.hpp>
#include <actortrain/model/checkpoint/npy.hpp>

#include "optim/temp_dir.hpp"

#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

using namespace actortrain::model;
using actortrain::test::temp_dir;
using nlohmann::json;

namespace {

matrix filled(int64_t rows, int64_t cols, float base) {
  matrix m(rows, cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) m(r, c) = base + 0.5f * static_cast<float>(r) + 0.01f * static_cast<float>(c);
  return m;
}

/// A variable of `rows` x `cols` cut into `ranges`, with Adam-like slots m and v.
variable_data make_variable(const std::string& name, int64_t rows, int64_t cols,
                            const std::vector<row_range>& ranges, float base, int64_t iterations) {
  const matrix whole = filled(rows, cols, base);
  variable_data v{name, shape2{rows, cols}, {}};
  for (const auto& r : ranges) {
    partition_data p;
    p.row_begin = r.begin;
    p.row_end = r.end;
    p.values = whole.middleRows(r.begin, r.rows());
    p.slots["m"] = p.values * 0.1f;
    p.slots["v"] = p.values.cwiseAbs() * 0.01f;
    p.iterations = iterations;
    v.partitions.push_back(std::move(p));
  }
  return v;
}

checkpoint_data make_checkpoint(int64_t step) {
  checkpoint_data d;
  d.step = step;
  d.variables.push_back(make_variable("dense/kernel", 10, 4, split_rows(10, 3), 1.0f + static_cast<float>(step), 7));
  d.variables.push_back(make_variable("dense/bias", 1, 4, split_rows(1, 1), -2.0f, 7));
  d.optimizer = "adam(learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-07)";
  d.hyperparams = {{"beta_1", 0.9}, {"beta_2", 0.999}, {"epsilon", 1e-7}, {"learning_rate", 0.001}};
  d.extra = json{{"run", 3}, {"positions", {10, 12}}, {"rng", "abc"}};
  return d;
}

void check_same(const checkpoint_data& a, const checkpoint_data& b) {
  BOOST_TEST(a.step == b.step);
  BOOST_TEST(a.optimizer == b.optimizer);
  BOOST_TEST(a.hyperparams == b.hyperparams);
  BOOST_TEST(a.extra == b.extra);
  BOOST_TEST_REQUIRE(a.variables.size() == b.variables.size());
  for (size_t i = 0; i < a.variables.size(); ++i) {
    const auto& va = a.variables[i];
    const auto& vb = b.variables[i];
    BOOST_TEST(va.name == vb.name);
    BOOST_TEST((va.shape == vb.shape));
    BOOST_TEST_REQUIRE(va.partitions.size() == vb.partitions.size());
    for (size_t k = 0; k < va.partitions.size(); ++k) {
      const auto& pa = va.partitions[k];
      const auto& pb = vb.partitions[k];
      BOOST_TEST(pa.row_begin == pb.row_begin);
      BOOST_TEST(pa.row_end == pb.row_end);
      BOOST_TEST(pa.iterations == pb.iterations);
      BOOST_TEST((pa.values == pb.values));
      BOOST_TEST_REQUIRE(pa.slots.size() == pb.slots.size());
      for (const auto& [name, m] : pa.slots) BOOST_TEST((m == pb.slots.at(name)));
    }
  }
}

std::string error_of_read(file_system& fs, const std::string& dir) {
  try {
    read_checkpoint(fs, dir);
  } catch (const checkpoint_error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

/// Rewrites dir/manifest.json through `edit`.
template <class Edit>
void edit_manifest(const std::string& dir, Edit edit) {
  file_system& fs = posix_file_system();
  std::string text;
  BOOST_TEST_REQUIRE(fs.read_file(dir + "/manifest.json", text).ok());
  json j = json::parse(text);
  edit(j);
  BOOST_TEST_REQUIRE(fs.write_file(dir + "/manifest.json", j.dump(2)).ok());
}

std::vector<int64_t> steps(const std::vector<checkpoint_info>& list) {
  std::vector<int64_t> out;
  for (const auto& c : list) out.push_back(c.step);
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(checkpoints)

BOOST_AUTO_TEST_CASE(names_follow_the_layout) {
  BOOST_TEST(checkpoint_dir_name(42) == "ckpt-000000000042");
  BOOST_TEST(partition_file_name("dense/kernel", 0) == "dense.kernel.part0.npy");
  BOOST_TEST(slot_file_name("dense/kernel", 2, "m") == "dense.kernel.part2.slot-m.npy");
}

BOOST_AUTO_TEST_CASE(round_trip_keeps_values_slots_and_metadata) {
  temp_dir root;
  file_system& fs = posix_file_system();
  const auto data = make_checkpoint(42);
  const std::string dir = write_checkpoint(fs, root.path(), data);
  BOOST_TEST(dir == root / "ckpt-000000000042");
  BOOST_TEST(fs.exists(dir + "/manifest.json"));
  BOOST_TEST(!fs.exists(dir + "/manifest.json.tmp"));
  BOOST_TEST(fs.exists(dir + "/dense.kernel.part2.slot-v.npy"));
  // Every array is a plain .npy of its partition's shape.
  BOOST_TEST(read_npy(fs, dir + "/dense.kernel.part1.npy").rows() == 3);
  check_same(read_checkpoint(fs, dir), data);
  const auto manifest = read_manifest(fs, dir);
  BOOST_TEST(manifest["format_version"] == 1);  // whole: the first version's readers take it
  BOOST_TEST(manifest["variables"][0]["partitions"][1]["row_begin"] == 4);
  BOOST_TEST(manifest["extra"]["run"] == 3);
  const auto latest = latest_checkpoint(fs, root.path());
  BOOST_TEST_REQUIRE(latest.has_value());
  BOOST_TEST(latest->step == 42);
  BOOST_TEST(latest->path == dir);
}

// The manifest's crc32 is the file's CRC-32 as Python's zlib.crc32 computes it (the
// promise in checkpoint.hpp), checked by python3, not by the code that wrote it.
BOOST_AUTO_TEST_CASE(manifest_checksums_are_what_python_zlib_computes) {
  temp_dir root;
  file_system& fs = posix_file_system();
  const std::string dir = write_checkpoint(fs, root.path(), make_checkpoint(7));
  const auto manifest = read_manifest(fs, dir);
  std::string expected;
  for (auto& v : manifest["variables"])
    for (auto& p : v["partitions"]) {
      expected += p["file"]["name"].get<std::string>() + " " + std::to_string(p["file"]["crc32"].get<uint64_t>()) + "\n";
      for (auto& [k, slot] : p["slots"].items())
        expected += slot["name"].get<std::string>() + " " + std::to_string(slot["crc32"].get<uint64_t>()) + "\n";
    }
  BOOST_REQUIRE(!expected.empty());
  const std::string list = root / "expected.txt";
  {
    std::ofstream out(list);
    out << expected;
  }
  const std::string cmd = "python3 -c \"import sys, zlib\n"
                          "bad = [l for l in open(sys.argv[2]) if zlib.crc32(open(sys.argv[1] + '/' + l.split()[0], 'rb').read()) != int(l.split()[1])]\n"
                          "sys.exit(len(bad))\" " + dir + " " + list;
  BOOST_TEST(std::system(cmd.c_str()) == 0, "python3's zlib.crc32 disagrees with the manifest: " << expected);
}

// checkpoint.shared: shards write their own partitions' arrays, the coordinator commits
// the records; the result is the checkpoint write_checkpoint makes of the same data.
BOOST_AUTO_TEST_CASE(partitions_written_apart_and_committed_by_records_read_back_whole) {
  memory_file_system fs;
  const auto data = make_checkpoint(42);
  const std::string dir = begin_checkpoint(fs, "/ck", data.step);
  BOOST_TEST(dir == "/ck/ckpt-000000000042");
  checkpoint_record r;
  r.step = data.step;
  r.optimizer = data.optimizer;
  r.hyperparams = data.hyperparams;
  r.extra = data.extra;
  for (const auto& v : data.variables) {
    variable_record vr{v.name, v.shape, {}};
    // Written last partition first, as shards answer in any order.
    std::vector<partition_record> parts(v.partitions.size());
    for (size_t k = v.partitions.size(); k-- > 0;) parts[k] = write_partition_arrays(fs, dir, v.name, k, v.partitions[k]);
    vr.partitions = std::move(parts);
    r.variables.push_back(std::move(vr));
  }
  BOOST_TEST(list_checkpoints(fs, "/ck").empty());  // nothing committed before the manifest
  BOOST_TEST(commit_checkpoint(fs, "/ck", r) == dir);
  check_same(read_checkpoint(fs, dir), data);
  // The same bytes as the one-process writer's.
  memory_file_system one;
  const auto d1 = write_checkpoint(one, "/ck", data);
  std::string a, b;
  BOOST_TEST_REQUIRE(fs.read_file(dir + "/manifest.json", a).ok());
  BOOST_TEST_REQUIRE(one.read_file(d1 + "/manifest.json", b).ok());
  BOOST_TEST(a == b);
  // A committed step is not begun again.
  BOOST_CHECK_THROW(begin_checkpoint(fs, "/ck", 42), checkpoint_error);
}

BOOST_AUTO_TEST_CASE(a_commit_with_a_missing_file_or_records_off_the_layout_fails_and_removes_the_directory) {
  memory_file_system fs;
  const auto data = make_checkpoint(7);
  auto begin_all_but = [&](size_t skip_k, checkpoint_record& r) {
    const auto dir = begin_checkpoint(fs, "/ck", 7);
    r = checkpoint_record{};
    r.step = 7;
    for (const auto& v : data.variables) {
      variable_record vr{v.name, v.shape, {}};
      for (size_t k = 0; k < v.partitions.size(); ++k) {
        auto rec = write_partition_arrays(fs, dir, v.name, k, v.partitions[k]);
        if (v.name == "dense/kernel" && k == skip_k) {
          BOOST_TEST_REQUIRE(fs.remove_all(dir + "/" + rec.values.name).ok());  // a shard that never wrote it
        }
        vr.partitions.push_back(std::move(rec));
      }
      r.variables.push_back(std::move(vr));
    }
    return dir;
  };
  checkpoint_record r;
  auto dir = begin_all_but(1, r);
  try {
    commit_checkpoint(fs, "/ck", r);
    BOOST_FAIL("a commit with a missing file succeeded");
  } catch (const checkpoint_error& e) {
    BOOST_TEST(contains(e.what(), "dense.kernel.part1.npy is missing"));
  }
  BOOST_TEST(!fs.exists(dir));
  // A gap in the rows, and a file name the layout does not give.
  dir = begin_all_but(99, r);
  auto gap = r;
  gap.variables[0].partitions.erase(gap.variables[0].partitions.begin() + 1);
  BOOST_CHECK_THROW(commit_checkpoint(fs, "/ck", gap), checkpoint_error);
  BOOST_TEST(!fs.exists(dir));
  dir = begin_all_but(99, r);
  r.variables[0].partitions[0].values.name = "elsewhere.npy";
  try {
    commit_checkpoint(fs, "/ck", r);
    BOOST_FAIL("a commit off the layout succeeded");
  } catch (const checkpoint_error& e) {
    BOOST_TEST(contains(e.what(), "file elsewhere.npy where the layout has dense.kernel.part0.npy"));
  }
  BOOST_TEST(list_checkpoints(fs, "/ck").empty());
}

BOOST_AUTO_TEST_CASE(uncommitted_directories_are_not_listed) {
  temp_dir root;
  file_system& fs = posix_file_system();
  write_checkpoint(fs, root.path(), make_checkpoint(5));
  // A write that died before its manifest, one with a torn manifest, and unrelated entries.
  BOOST_TEST(fs.create_dirs(root / "ckpt-000000000009").ok());
  write_npy(fs, root / "ckpt-000000000009/dense.kernel.part0.npy", filled(4, 4, 0));
  BOOST_TEST(fs.create_dirs(root / "ckpt-000000000010").ok());
  BOOST_TEST(fs.write_file(root / "ckpt-000000000010/manifest.json", "{\"format\": \"actortr").ok());
  BOOST_TEST(fs.create_dirs(root / "ckpt-oops").ok());
  BOOST_TEST(fs.write_file(root / "notes.txt", "hi").ok());
  BOOST_TEST(steps(list_checkpoints(fs, root.path())) == std::vector<int64_t>{5});
  BOOST_TEST(latest_checkpoint(fs, root.path())->step == 5);
  BOOST_TEST(contains(error_of_read(fs, root / "ckpt-000000000009"), "not a committed checkpoint"));
  BOOST_TEST(contains(error_of_read(fs, root / "ckpt-000000000010"), "invalid JSON"));
  BOOST_TEST(list_checkpoints(fs, root / "absent").empty());
  BOOST_TEST(!latest_checkpoint(fs, root / "absent").has_value());
}

BOOST_AUTO_TEST_CASE(a_full_disk_fails_the_write_and_keeps_the_previous_checkpoint) {
  temp_dir root;
  const auto first = make_checkpoint(1);
  write_checkpoint(posix_file_system(), root.path(), first);
  // Measure a whole checkpoint, then run out of space at many points inside it: in the
  // middle of an array, between arrays, inside the manifest.
  uint64_t total = 0;
  {
    temp_dir scratch;
    fault_file_system counting(posix_file_system());
    write_checkpoint(counting, scratch.path(), make_checkpoint(2));
    total = counting.bytes_written();
  }
  BOOST_TEST_REQUIRE(total > 1000u);
  for (uint64_t budget : {uint64_t{0}, uint64_t{1}, uint64_t{100}, total / 3, total / 2, total - 200, total - 1}) {
    fault_file_system fs(posix_file_system());
    fs.set_write_budget(budget);
    try {
      write_checkpoint(fs, root.path(), make_checkpoint(2));
      BOOST_FAIL("write_checkpoint succeeded on a full disk, budget " << budget);
    } catch (const checkpoint_error& e) {
      const std::string what = e.what();
      BOOST_TEST(contains(what, "No space left on device"), what);
      BOOST_TEST(contains(what, "ckpt-000000000002/"), what);  // names the file
    }
    BOOST_TEST(!posix_file_system().exists(root / "ckpt-000000000002"), "budget " << budget);
    BOOST_TEST(steps(list_checkpoints(posix_file_system(), root.path())) == std::vector<int64_t>{1});
  }
  check_same(read_checkpoint(posix_file_system(), root / "ckpt-000000000001"), first);
  // With room again the same write commits.
  write_checkpoint(posix_file_system(), root.path(), make_checkpoint(2));
  BOOST_TEST(steps(list_checkpoints(posix_file_system(), root.path())) == (std::vector<int64_t>{1, 2}));
}

BOOST_AUTO_TEST_CASE(failures_at_sync_or_commit_leave_no_partial_directory) {
  temp_dir root;
  write_checkpoint(posix_file_system(), root.path(), make_checkpoint(1));
  struct fault {
    fault_file_system::op op;
    const char* path;
    uint64_t nth;
  };
  for (const fault f : {fault{fault_file_system::op::sync_file, nullptr, 3},
                        fault{fault_file_system::op::sync_dir, nullptr, 1},
                        fault{fault_file_system::op::write, "manifest.json.tmp", 0},
                        fault{fault_file_system::op::rename, "manifest", 0},
                        fault{fault_file_system::op::write, nullptr, 5}}) {
    fault_file_system fs(posix_file_system());
    if (f.path)
      fs.fail_path(f.op, f.path);
    else
      fs.fail_nth(f.op, f.nth);
    BOOST_CHECK_THROW(write_checkpoint(fs, root.path(), make_checkpoint(2)), checkpoint_error);
    BOOST_TEST(!posix_file_system().exists(root / "ckpt-000000000002"));
    BOOST_TEST(steps(list_checkpoints(fs, root.path())) == std::vector<int64_t>{1});
  }
}

BOOST_AUTO_TEST_CASE(rejects_inconsistent_data_before_touching_the_disk) {
  temp_dir root;
  file_system& fs = posix_file_system();
  auto gappy = make_checkpoint(3);
  gappy.variables[0].partitions[1].row_begin = 5;
  gappy.variables[0].partitions[1].values = filled(2, 4, 0);
  BOOST_CHECK_THROW(write_checkpoint(fs, root.path(), gappy), std::invalid_argument);
  auto bad_shape = make_checkpoint(3);
  bad_shape.variables[1].partitions[0].slots["m"] = filled(2, 4, 0);
  BOOST_CHECK_THROW(write_checkpoint(fs, root.path(), bad_shape), std::invalid_argument);
  auto clash = make_checkpoint(3);
  clash.variables[1].name = "dense.kernel";  // same files as dense/kernel
  clash.variables[1].shape = {10, 4};
  clash.variables[1].partitions = clash.variables[0].partitions;
  BOOST_CHECK_THROW(write_checkpoint(fs, root.path(), clash), std::invalid_argument);
  BOOST_TEST(!fs.exists(root / "ckpt-000000000003"));
  // A committed step is never overwritten.
  write_checkpoint(fs, root.path(), make_checkpoint(3));
  BOOST_CHECK_THROW(write_checkpoint(fs, root.path(), make_checkpoint(3)), checkpoint_error);
  check_same(read_checkpoint(fs, root / "ckpt-000000000003"), make_checkpoint(3));
}

BOOST_AUTO_TEST_CASE(replaces_an_uncommitted_leftover_of_the_same_step) {
  temp_dir root;
  file_system& fs = posix_file_system();
  BOOST_TEST(fs.create_dirs(root / "ckpt-000000000004").ok());
  BOOST_TEST(fs.write_file(root / "ckpt-000000000004/junk.npy", "junk").ok());
  write_checkpoint(fs, root.path(), make_checkpoint(4));
  BOOST_TEST(!fs.exists(root / "ckpt-000000000004/junk.npy"));
  BOOST_TEST(steps(list_checkpoints(fs, root.path())) == std::vector<int64_t>{4});
}

BOOST_AUTO_TEST_CASE(prune_keeps_the_newest_and_removes_old_leftovers) {
  temp_dir root;
  file_system& fs = posix_file_system();
  for (int64_t step : {0, 10, 20, 30, 40}) write_checkpoint(fs, root.path(), make_checkpoint(step));
  BOOST_TEST(fs.create_dirs(root / "ckpt-000000000025").ok());  // a failed write
  BOOST_TEST(fs.create_dirs(root / "ckpt-000000000050").ok());  // one in progress
  const auto removed = prune_checkpoints(fs, root.path(), 2);
  BOOST_TEST(removed == (std::vector<std::string>{root / "ckpt-000000000000", root / "ckpt-000000000010",
                                                  root / "ckpt-000000000020", root / "ckpt-000000000025"}));
  BOOST_TEST(steps(list_checkpoints(fs, root.path())) == (std::vector<int64_t>{30, 40}));
  BOOST_TEST(fs.exists(root / "ckpt-000000000050"));
  BOOST_TEST(!fs.exists(root / "ckpt-000000000000"));
  BOOST_TEST(prune_checkpoints(fs, root.path(), 2).empty());
  BOOST_CHECK_THROW(prune_checkpoints(fs, root.path(), 0), std::invalid_argument);
  check_same(read_checkpoint(fs, root / "ckpt-000000000040"), make_checkpoint(40));
}

BOOST_AUTO_TEST_CASE(a_committed_checkpoints_extra_is_replaced_whole_and_nothing_else) {
  memory_file_system fs;
  write_checkpoint(fs, "/ck", make_checkpoint(10));
  json extra = make_checkpoint(10).extra;
  extra["run_starts"] = json::array({json{{"run", 4}}});
  update_checkpoint_extra(fs, "/ck/ckpt-000000000010", extra);
  auto back = read_checkpoint(fs, "/ck/ckpt-000000000010");
  BOOST_TEST(back.extra == extra);
  auto expected = make_checkpoint(10);
  expected.extra = extra;
  check_same(back, expected);
  BOOST_TEST(!fs.exists("/ck/ckpt-000000000010/manifest.json.tmp"));
  // A failed write leaves the old manifest.
  fault_file_system faulty{fs};
  faulty.fail_nth(fault_file_system::op::write, 1, std::errc::no_space_on_device);
  BOOST_CHECK_THROW(update_checkpoint_extra(faulty, "/ck/ckpt-000000000010", json::object()), checkpoint_error);
  BOOST_TEST(read_checkpoint(fs, "/ck/ckpt-000000000010").extra == extra);
  BOOST_CHECK_THROW(update_checkpoint_extra(fs, "/ck/ckpt-000000000099", extra), checkpoint_error);
  remove_checkpoint(fs, "/ck", "/ck/ckpt-000000000010");
  BOOST_TEST(list_checkpoints(fs, "/ck").empty());
  BOOST_TEST(!fs.exists("/ck/ckpt-000000000010"));
}

BOOST_AUTO_TEST_CASE(the_memory_file_system_keeps_checkpoints_as_the_disk_does) {
  memory_file_system fs;
  for (int64_t step : {0, 10, 20}) write_checkpoint(fs, "/ck", make_checkpoint(step));
  BOOST_TEST(fs.create_dirs("/ck/ckpt-000000000015").ok());  // a failed write
  BOOST_TEST(steps(list_checkpoints(fs, "/ck")) == (std::vector<int64_t>{0, 10, 20}));
  check_same(read_checkpoint(fs, "/ck/ckpt-000000000020"), make_checkpoint(20));
  prune_checkpoints(fs, "/ck", 1);
  BOOST_TEST(steps(list_checkpoints(fs, "/ck")) == std::vector<int64_t>{20});
  BOOST_TEST(!fs.exists("/ck/ckpt-000000000015"));
  std::vector<std::string> names;
  BOOST_TEST(fs.list_dir("/ck", names).ok());
  BOOST_TEST(names == std::vector<std::string>{"ckpt-000000000020"});
  // Errors name the operation and the path, as the real one's do.
  BOOST_TEST(contains(fs.write_file("/absent/x", "1").message(), "'/absent/x'"));
  BOOST_TEST(fs.create_dir("/ck").is_not_found() == false);
  BOOST_TEST(!fs.create_dir("/ck").ok());
  std::string out;
  BOOST_TEST(fs.read_file("/ck/nothing", out).is_not_found());
  // A directory renamed moves what it holds.
  BOOST_TEST(fs.rename("/ck/ckpt-000000000020", "/ck/moved").ok());
  BOOST_TEST(fs.exists("/ck/moved/manifest.json"));
  BOOST_TEST(!fs.exists("/ck/ckpt-000000000020/manifest.json"));
  // Under a fault wrapper it fills up like a disk.
  fault_file_system full(fs);
  full.set_write_budget(100);
  BOOST_CHECK_THROW(write_checkpoint(full, "/ck", make_checkpoint(30)), checkpoint_error);
  BOOST_TEST(!fs.exists("/ck/ckpt-000000000030"));
}

BOOST_AUTO_TEST_CASE(read_reports_missing_files_bad_shapes_overlaps_and_gaps) {
  temp_dir root;
  file_system& fs = posix_file_system();
  auto fresh = [&](int64_t step) { return write_checkpoint(fs, root.path(), make_checkpoint(step)); };

  const auto missing = fresh(1);
  BOOST_TEST(fs.remove_all(missing + "/dense.kernel.part1.slot-m.npy").ok());
  auto e = error_of_read(fs, missing);
  BOOST_TEST(contains(e, "dense.kernel.part1.slot-m.npy"), e);
  BOOST_TEST(contains(e, "missing"), e);

  const auto shape = fresh(2);  // the manifest claims 11 rows; the last file has 3, not 4
  edit_manifest(shape, [](json& j) {
    j["variables"][0]["shape"][0] = 11;
    j["variables"][0]["partitions"][2]["row_end"] = 11;
  });
  e = error_of_read(fs, shape);
  BOOST_TEST(contains(e, "dense.kernel.part2.npy"), e);
  BOOST_TEST(contains(e, "shape [3 x 4]"), e);

  const auto overlap = fresh(3);
  edit_manifest(overlap, [](json& j) { j["variables"][0]["partitions"][1]["row_begin"] = 3; });
  e = error_of_read(fs, overlap);
  BOOST_TEST(contains(e, "overlapping"), e);
  BOOST_TEST(contains(e, "dense/kernel"), e);

  const auto gap = fresh(4);
  edit_manifest(gap, [](json& j) { j["variables"][0]["partitions"][1]["row_begin"] = 5; });
  BOOST_TEST(contains(error_of_read(fs, gap), "rows [4, 5) are in no partition"));

  const auto corrupt = fresh(5);
  {
    std::string bytes;
    BOOST_TEST_REQUIRE(fs.read_file(corrupt + "/dense.bias.part0.npy", bytes).ok());
    bytes[bytes.size() - 2] ^= 0x10;
    BOOST_TEST_REQUIRE(fs.write_file(corrupt + "/dense.bias.part0.npy", bytes).ok());
  }
  e = error_of_read(fs, corrupt);
  BOOST_TEST(contains(e, "dense.bias.part0.npy"), e);
  BOOST_TEST(contains(e, "CRC"), e);

  const auto escape = fresh(6);
  edit_manifest(escape, [](json& j) { j["variables"][1]["partitions"][0]["file"]["name"] = "../x.npy"; });
  BOOST_TEST(contains(error_of_read(fs, escape), "unsafe file name"));

  const auto field = fresh(7);
  edit_manifest(field, [](json& j) { j["variables"][0]["partitions"][0].erase("iterations"); });
  e = error_of_read(fs, field);
  BOOST_TEST(contains(e, "variables[0].partitions[0]"), e);
  BOOST_TEST(contains(e, "iterations"), e);
}

BOOST_AUTO_TEST_CASE(restores_three_partitions_into_two_and_into_a_whole_matrix) {
  temp_dir root;
  file_system& fs = posix_file_system();
  auto data = make_checkpoint(8);
  data.variables[0].partitions[2].iterations = 9;  // a lazily-updated partition ran ahead
  const std::string dir = write_checkpoint(fs, root.path(), data);
  const auto saved = read_checkpoint(fs, dir);
  const matrix whole = assemble_variable(saved.variables[0]);
  const matrix whole_m = assemble_slot(saved.variables[0], "m");
  BOOST_TEST((whole == filled(10, 4, 9.0f)));

  // Two ps shards now: 10 rows -> 5 + 5.
  const std::vector<variable_spec> specs{{"dense/kernel", {10, 4}, zeros(), false},
                                         {"dense/bias", {1, 4}, zeros(), false}};
  fixed_shards two(2);
  const auto target = place(specs, &two, 2);
  const auto moved = repartition(saved, target);
  const auto& kernel = moved.variables[0];
  BOOST_TEST_REQUIRE(kernel.partitions.size() == 2u);
  BOOST_TEST(kernel.partitions[0].row_end == 5);
  BOOST_TEST((kernel.partitions[0].values == whole.topRows(5)));
  BOOST_TEST((kernel.partitions[1].values == whole.bottomRows(5)));
  BOOST_TEST((kernel.partitions[1].slots.at("m") == whole_m.bottomRows(5)));
  BOOST_TEST(kernel.partitions[0].iterations == 7);
  BOOST_TEST(kernel.partitions[1].iterations == 9);
  BOOST_TEST((assemble_variable(kernel) == whole));
  BOOST_TEST((assemble_slot(kernel, "v") == assemble_slot(saved.variables[0], "v")));
  // The repartitioned checkpoint writes and reads back like any other.
  auto again = moved;
  again.step = 9;
  check_same(read_checkpoint(fs, write_checkpoint(fs, root.path(), again)), again);

  // A local model: one partition per variable.
  const auto local = repartition(saved, place(specs, nullptr, 1));
  BOOST_TEST(local.variables[0].partitions.size() == 1u);
  BOOST_TEST((local.variables[0].partitions[0].values == whole));
  BOOST_TEST((local.variables[0].partitions[0].slots.at("m") == whole_m));

  // Variables must match by name and shape.
  const std::vector<variable_spec> other{{"dense/kernel", {11, 4}, zeros(), false},
                                         {"dense/bias", {1, 4}, zeros(), false}};
  BOOST_CHECK_THROW(repartition(saved, place(other, nullptr, 1)), checkpoint_error);
  const std::vector<variable_spec> fewer{{"dense/kernel", {10, 4}, zeros(), false}};
  BOOST_CHECK_THROW(repartition(saved, place(fewer, nullptr, 1)), checkpoint_error);
  BOOST_CHECK_THROW(repartition(saved.variables[0], {{0, 4}, {5, 10}}), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()
