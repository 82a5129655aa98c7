// The pure parts of run_node: fingerprints and what differs between two, the node
// flags, and how a cluster definition and task are resolved from a file or TF_CONFIG.

#include <boost/test/unit_test.hpp>

#include <actortrain/actors/cli/flags.hpp>

#include <actortrain/actors/net/process.hpp>
#include <actortrain/model/all.hpp>

#include "../../actors/src/net/node_internals.hpp"

#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include <fstream>

namespace at = actortrain;
namespace md = actortrain::model;

namespace {

at::job linear_job(int64_t inputs) {
  at::job j;
  j.name = "probe";
  j.structure = md::model::sequential(inputs, {md::layers::dense(1)});
  j.optimizer = md::make_sgd({0.1});
  j.loss = md::mean_squared_error();
  return j;
}

at::cluster_def two_workers() {
  return at::parse_cluster_def(R"({"cluster": {"worker": ["localhost:1", "localhost:2"]}})", "test");
}

std::vector<char*> argv_of(std::vector<std::string>& args) {
  std::vector<char*> v;
  for (auto& a : args) v.push_back(a.data());
  return v;
}

}  // namespace

BOOST_AUTO_TEST_CASE(fingerprints_name_what_differs) {
  auto def = two_workers();
  auto a = at::job_fingerprint(linear_job(5), def);
  BOOST_CHECK_EQUAL(at::fingerprint_difference(a, a), "");
  auto b = at::job_fingerprint(linear_job(6), def);
  auto diff = at::fingerprint_difference(a, b);
  BOOST_CHECK(diff.find("model '") != std::string::npos);
  BOOST_CHECK(diff.find("optimizer") == std::string::npos);  // only what differs
  // A worker-only cluster runs sync whatever the job's spec says, and the fingerprint
  // records the mode the cluster will run.
  auto sync = at::job_fingerprint(linear_job(5), def);
  bool found = false;
  for (auto& [k, v] : sync)
    if (k == "consistency") found = v == "sync";
  BOOST_CHECK(found);
  auto j2 = linear_job(5);
  j2.optimizer = md::make_sgd({0.2});
  BOOST_CHECK(at::fingerprint_difference(a, at::job_fingerprint(j2, def)).find("optimizer 'sgd(") !=
              std::string::npos);
  // Tasks that round their floats differently ("wire_floats") do not make one job.
  auto bf16 = def;
  bf16.wire_bf16 = true;
  BOOST_CHECK(at::fingerprint_difference(a, at::job_fingerprint(linear_job(5), bf16)).find("wire floats") !=
              std::string::npos);
  // A field one side lacks (another version of the library) is named too.
  auto shorter = a;
  shorter.pop_back();
  BOOST_CHECK(at::fingerprint_difference(a, shorter).find("none there") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(node_flags_parse_and_refuse) {
  std::vector<std::string> args{"prog",     "--cluster", "c.json", "--task=ps:1", "--threads",
                                 "3",        "--resume",  "--caf.scheduler.max-threads=1"};
  auto v = argv_of(args);
  auto f = at::parse_node_flags(static_cast<int>(v.size()), v.data());
  BOOST_CHECK_EQUAL(f.cluster_file, "c.json");
  BOOST_CHECK_EQUAL(f.task, "ps:1");
  BOOST_CHECK_EQUAL(f.threads, 3);
  BOOST_CHECK(f.resume);
  BOOST_TEST(f.caf_options == std::vector<std::string>{"--caf.scheduler.max-threads=1"});
  for (std::vector<std::string> bad :
       {std::vector<std::string>{"prog", "--nope"}, {"prog", "--cluster"}, {"prog", "--threads", "0"},
        {"prog", "--threads", "x"}, {"prog", "stray"}, {"prog", "--caf.scheduler.max-threads"}}) {
    auto bv = argv_of(bad);
    BOOST_CHECK_THROW(at::parse_node_flags(static_cast<int>(bv.size()), bv.data()), actortrain::cli::usage_error);
  }
}

// A job's secret for the plain clusters below, removed at the end of the test.
struct secret_file {
  std::string path = std::string("/tmp/actortrain-node-test-secret-") + std::to_string(::getpid());
  secret_file() {
    std::remove(path.c_str());
    at::write_job_secret(path);
  }
  ~secret_file() { std::remove(path.c_str()); }
};

BOOST_AUTO_TEST_CASE(tf_config_resolves_cluster_and_task) {
  ::setenv("TF_CONFIG", R"({"cluster": {"worker": ["localhost:1", "localhost:2"]}, "task": {"type": "worker", "index": 1}})",
           1);
  at::node_flags f;
  // A plain cluster needs the job's secret (TF_CONFIG verbatim: --secret names it).
  try {
    at::resolve_node(f);
    BOOST_ERROR("a plain cluster without a secret was accepted");
  } catch (const at::cluster_file_error& e) {
    BOOST_TEST(std::string(e.what()).find("a cluster without TLS needs the job's secret") != std::string::npos, e.what());
  }
  secret_file secret;
  f.secret = secret.path;
  auto o = at::resolve_node(f);
  BOOST_TEST(o.cluster.secret_file == secret.path);
  BOOST_CHECK(o.task == (at::task_id{at::task_type::worker, 1}));
  BOOST_CHECK(o.cluster.worker_only());
  f.task = "worker:0";  // --task wins over TF_CONFIG's
  BOOST_CHECK(at::resolve_node(f).task == (at::task_id{at::task_type::worker, 0}));
  f.task = "worker:2";
  BOOST_CHECK_THROW(at::resolve_node(f), at::cluster_file_error);
  f.task.clear();
  // CAF's own options: a good one is kept, one CAF does not know or cannot read is refused by name.
  f.caf_options = {"--caf.scheduler.max-threads=1"};
  BOOST_TEST(at::resolve_node(f).caf_options == f.caf_options);
  for (std::string bad : {"--caf.scheduler.bogus=1", "--caf.scheduler.max-threads=many"}) {
    f.caf_options = {bad};
    try {
      at::resolve_node(f);
      BOOST_ERROR("accepted " << bad);
    } catch (const at::cluster_file_error& e) {
      BOOST_TEST(std::string(e.what()).find(bad) == 0u);
    }
  }
  f.caf_options.clear();
  f.resume = true;  // nothing to resume from
  BOOST_CHECK_THROW(at::resolve_node(f), at::cluster_file_error);
  ::unsetenv("TF_CONFIG");
  at::node_flags none;
  BOOST_CHECK_THROW(at::resolve_node(none), at::cluster_file_error);
}

BOOST_AUTO_TEST_CASE(a_shared_checkpoint_directory_is_taken) {
  auto path = std::string("/tmp/actortrain-node-test-") + std::to_string(::getpid()) + ".json";
  {
    std::ofstream out(path);
    out << R"({"cluster": {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]},
               "checkpoint": {"dir": "/tmp/x", "shared": true}})";
  }
  at::node_flags f;
  f.cluster_file = path;
  f.task = "chief:0";
  secret_file secret;
  f.secret = secret.path;
  auto o = at::resolve_node(f);
  BOOST_CHECK(o.cluster.checkpoint_shared);
  BOOST_CHECK_EQUAL(o.cluster.checkpoint_dir, "/tmp/x");
  std::remove(path.c_str());
}

// A node's log lines carry the time (UTC, milliseconds) and a level.
BOOST_AUTO_TEST_CASE(node_log_lines_are_stamped_with_the_time_and_a_level) {
  using namespace std::chrono;
  const auto t = system_clock::time_point{milliseconds{1764906000123}};  // 2025-12-05T03:40:00.123Z
  BOOST_TEST(actortrain::detail::log_stamp("data plane: 3 request(s) served", t) == "2025-12-05T03:40:00.123Z INFO  ");
  BOOST_TEST(actortrain::detail::log_stamp("warning: 2 actor(s) still running", t) == "2025-12-05T03:40:00.123Z WARN  ");
  BOOST_TEST(actortrain::detail::log_stamp("data plane: closed a connection from 127.0.0.1:5: bad token", t) ==
             "2025-12-05T03:40:00.123Z WARN  ");
  BOOST_TEST(actortrain::detail::log_stamp("error: the run failed", t) == "2025-12-05T03:40:00.123Z ERROR ");
}
