// Cluster files and TF_CONFIG: every section round-trips; TensorFlow's worker-only
// TF_CONFIG parses with its sync default; each refusal names the source and the field;
// --task values; TLS files checked on disk.
#include <actortrain/actors/net/cluster_file.hpp>

#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

using namespace actortrain;

// So that BOOST_TEST prints task ids that differ.
namespace actortrain {
std::ostream& operator<<(std::ostream& os, const task_id& t) { return os << to_string(t); }
}  // namespace actortrain

namespace {

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const cluster_file_error& e) {
    return e.what();
  }
  return "";
}

// The error for `text` read as "cluster.json", "" when it is accepted.
std::string refusal(const std::string& text, const tls_files& flags = {}) {
  return error_of([&] { parse_cluster_def(text, "cluster.json", flags); });
}

// A cluster file that is valid but for the `extra` top-level members it adds.
std::string with_cluster(const std::string& extra) {
  return R"({"cluster": {"chief": ["127.0.0.1:7000"], "ps": ["127.0.0.1:7001"],
                         "worker": ["127.0.0.1:7002", "127.0.0.1:7003"]})" +
         (extra.empty() ? "" : ", " + extra) + "}";
}

// Only a cluster section, from its inner text.
std::string cluster_only(const std::string& inner) { return R"({"cluster": {)" + inner + "}}"; }

bool begins(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }
bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A fresh directory under /tmp, removed with its contents at the end of the test.
class temp_dir {
 public:
  temp_dir() {
    char pattern[] = "/tmp/actortrain-cluster-file-XXXXXX";
    if (!::mkdtemp(pattern)) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;

  std::string write(const std::string& name, const std::string& content) const {
    auto path = path_ + "/" + name;
    std::ofstream{path} << content;
    return path;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

const char* pem_text = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

}  // namespace

// The error must begin with `expected` (so it names the source first) / contain it.
#define CHECK_REFUSED(text, expected)                                                                         \
  do {                                                                                                        \
    const auto error_ = refusal(text);                                                                        \
    BOOST_CHECK_MESSAGE(begins(error_, expected), "expected an error starting \"" << (expected) << "\", got \"" \
                                                                                   << error_ << "\"");         \
  } while (false)
#define CHECK_ERROR_HAS(error, expected)                                                                       \
  do {                                                                                                         \
    const std::string error_ = (error);                                                                        \
    BOOST_CHECK_MESSAGE(has(error_, expected), "expected an error with \"" << (expected) << "\", got \"" << error_ \
                                                                           << "\"");                           \
  } while (false)

BOOST_AUTO_TEST_SUITE(cluster_files)

BOOST_AUTO_TEST_CASE(a_full_file_round_trips_every_field) {
  const auto def = parse_cluster_def(R"json({
    "cluster": {"chief": ["10.0.0.1:7000"],
                "ps": ["10.0.0.2:7001", "[fd00::2]:7002"],
                "worker": ["node-3.example.com:7003", "127.0.0.1:7004"],
                "evaluator": ["localhost:7005"]},
    "task": {"type": "ps", "index": 1},
    "tls": {"certificate": "certs/node.pem", "key": "certs/node.key", "ca": "ca.pem"},
    "checkpoint": {"dir": "/tmp/ckpt", "shared": true, "every_steps": 500, "interval_ms": 30000},
    "timeouts": {"heartbeat_ms": 250, "connection_ms": 3000, "request_ms": 45000, "connect_ms": 8000},
    "consistency": "bounded_staleness(3)"
  })json",
                                     "cluster.json");
  BOOST_TEST_REQUIRE(def.chief.size() == 1u);
  BOOST_TEST(def.chief[0].host == "10.0.0.1");
  BOOST_TEST(def.chief[0].port == 7000);
  BOOST_TEST_REQUIRE(def.ps.size() == 2u);
  BOOST_TEST(def.ps[0].text() == "10.0.0.2:7001");
  BOOST_TEST(def.ps[1].host == "fd00::2");  // kept without its brackets
  BOOST_TEST(def.ps[1].port == 7002);
  BOOST_TEST(def.ps[1].text() == "[fd00::2]:7002");
  BOOST_TEST_REQUIRE(def.worker.size() == 2u);
  BOOST_TEST(def.worker[0].text() == "node-3.example.com:7003");
  BOOST_TEST(def.worker[1].text() == "127.0.0.1:7004");
  BOOST_TEST_REQUIRE(def.evaluator.size() == 1u);
  BOOST_TEST(def.evaluator[0].text() == "localhost:7005");
  BOOST_TEST_REQUIRE(def.task.has_value());
  BOOST_TEST(to_string(*def.task) == "ps:1");
  BOOST_TEST(def.tls.enabled());
  BOOST_TEST(def.tls.certificate == "certs/node.pem");  // relative paths stay as given
  BOOST_TEST(def.tls.key == "certs/node.key");
  BOOST_TEST(def.tls.ca == "ca.pem");
  BOOST_TEST(def.checkpoint_dir == "/tmp/ckpt");
  BOOST_TEST(def.checkpoint_shared);
  BOOST_TEST(def.checkpoint_every == 500);
  BOOST_TEST(def.checkpoint_interval.count() == 30000);
  BOOST_TEST(def.heartbeat_interval.count() == 250);
  BOOST_TEST(def.connection_timeout.count() == 3000);
  BOOST_TEST(def.request_timeout.count() == 45000);
  BOOST_TEST(def.connect_timeout.count() == 8000);
  BOOST_TEST(def.consistency->to_string() == "bounded_staleness(3)");
  BOOST_TEST(def.effective_consistency().to_string() == "bounded_staleness(3)");
  BOOST_TEST(!def.worker_only());
  BOOST_TEST(to_string(def.coordinator_task()) == "chief:0");
  BOOST_TEST(def.address(task_id{task_type::ps, 1}).text() == "[fd00::2]:7002");
  BOOST_TEST(&def.tasks(task_type::evaluator) == &def.evaluator);
}

BOOST_AUTO_TEST_CASE(missing_sections_keep_their_defaults) {
  const auto def = parse_cluster_def(R"({"cluster": {"worker": ["127.0.0.1:7000"]}})", "cluster.json");
  BOOST_TEST(!def.task.has_value());
  BOOST_TEST(!def.tls.enabled());
  BOOST_TEST(def.checkpoint_dir.empty());
  BOOST_TEST(!def.checkpoint_shared);
  BOOST_TEST(def.checkpoint_every == 0);
  BOOST_TEST(def.checkpoint_interval.count() == 0);
  BOOST_TEST(def.heartbeat_interval.count() == 500);
  BOOST_TEST(def.connection_timeout.count() == 5000);
  BOOST_TEST(def.request_timeout.count() == 60000);
  BOOST_TEST(def.connect_timeout.count() == 10000);
  BOOST_TEST(!def.consistency);
}

BOOST_AUTO_TEST_CASE(tensorflow_multi_worker_tf_config_is_a_sync_worker_only_cluster) {
  // Exactly as in TensorFlow's MultiWorkerMirroredStrategy tutorial.
  const std::string tf_config =
    R"({"cluster": {"worker": ["localhost:12345", "localhost:23456"]}, "task": {"type": "worker", "index": 0}})";
  const auto def = parse_cluster_def(tf_config, "TF_CONFIG");
  BOOST_TEST_REQUIRE(def.worker.size() == 2u);
  BOOST_TEST(def.worker[0].text() == "localhost:12345");
  BOOST_TEST(def.worker[1].text() == "localhost:23456");
  BOOST_TEST(def.worker_only());
  BOOST_TEST(def.effective_consistency().to_string() == "sync");
  BOOST_TEST(def.coordinator_task() == (task_id{task_type::worker, 0}));
  BOOST_TEST_REQUIRE(def.task.has_value());
  BOOST_TEST(*def.task == (task_id{task_type::worker, 0}));
}

BOOST_AUTO_TEST_CASE(a_chief_ps_worker_cluster_is_async_with_the_coordinator_on_the_chief) {
  const auto def = parse_cluster_def(with_cluster(R"("task": {"type": "chief", "index": 0})"), "cluster.json");
  BOOST_TEST(!def.worker_only());
  BOOST_TEST(def.effective_consistency().to_string() == "async");
  BOOST_TEST(def.coordinator_task() == (task_id{task_type::chief, 0}));
  BOOST_TEST(def.tasks(task_type::ps).size() == 1u);
  BOOST_TEST(def.address(task_id{task_type::worker, 1}).text() == "127.0.0.1:7003");
  // An explicit mode wins over the default.
  BOOST_TEST(parse_cluster_def(with_cluster(R"("consistency": "sync")"), "c").effective_consistency().to_string() == "sync");
}

BOOST_AUTO_TEST_CASE(ps_without_a_chief_is_async_with_the_coordinator_on_worker_0) {
  const auto def =
    parse_cluster_def(cluster_only(R"("ps": ["127.0.0.1:7001"], "worker": ["127.0.0.1:7002"])"), "cluster.json");
  BOOST_TEST(!def.worker_only());
  BOOST_TEST(def.effective_consistency().to_string() == "async");
  BOOST_TEST(def.coordinator_task() == (task_id{task_type::worker, 0}));
}

BOOST_AUTO_TEST_CASE(address_refuses_a_task_the_cluster_lacks) {
  const auto def = parse_cluster_def(cluster_only(R"("worker": ["127.0.0.1:7002"])"), "cluster.json");
  CHECK_ERROR_HAS(error_of([&] { def.address(task_id{task_type::ps, 0}); }),
                  "task ps:0: no such task: the cluster has 0 ps task(s)");
  CHECK_ERROR_HAS(error_of([&] { def.address(task_id{task_type::worker, 1}); }), "task worker:1: no such task");
  CHECK_ERROR_HAS(error_of([&] { def.address(task_id{task_type::worker, -1}); }), "task worker:-1: no such task");
}

BOOST_AUTO_TEST_CASE(names_and_addresses_print_as_documented) {
  BOOST_TEST(std::string(to_string(task_type::chief)) == "chief");
  BOOST_TEST(std::string(to_string(task_type::worker)) == "worker");
  BOOST_TEST(std::string(to_string(task_type::ps)) == "ps");
  BOOST_TEST(std::string(to_string(task_type::evaluator)) == "evaluator");
  BOOST_TEST(to_string(task_id{task_type::worker, 1}) == "worker:1");
  BOOST_TEST((task_address{"127.0.0.1", 7000}.text()) == "127.0.0.1:7000");
  BOOST_TEST((task_address{"::1", 7000}.text()) == "[::1]:7000");
}

BOOST_AUTO_TEST_CASE(loopback_means_127_slash_8_ipv6_loopback_or_localhost) {
  for (const char* host : {"127.0.0.1", "127.255.255.254", "localhost", "LOCALHOST", "::1", "0:0:0:0:0:0:0:1"})
    BOOST_TEST((task_address{host, 1}.loopback()), host);
  // 127.1 is loopback to inet_aton but not a dotted quad; the safe side is "not loopback".
  for (const char* host : {"128.0.0.1", "10.0.0.5", "0.0.0.0", "127.1", "127.0.0.1.example.com", "::2",
                           "::ffff:127.0.0.1", "example.com", "localhost.example.com"})
    BOOST_TEST(!(task_address{host, 1}.loopback()), host);
}

BOOST_AUTO_TEST_CASE(malformed_json_names_the_source_and_the_byte) {
  const auto error = refusal(R"({"cluster": {"worker": ["127.0.0.1:7000",]}})");
  BOOST_TEST(begins(error, "cluster.json: not valid JSON: "), error);
  CHECK_ERROR_HAS(error, "parse error");
  CHECK_ERROR_HAS(error, "(byte 42)");  // the stray ']' after the trailing comma
  CHECK_REFUSED("", "cluster.json: not valid JSON: ");
  CHECK_REFUSED(R"([{"cluster": {}}])", "cluster.json: top level: expected a JSON object, got an array");
}

BOOST_AUTO_TEST_CASE(a_key_given_twice_is_refused_with_its_path) {
  CHECK_REFUSED(cluster_only(R"("worker": ["127.0.0.1:7000"], "worker": ["127.0.0.1:7001"])"),
                "cluster.json: cluster.worker: duplicate key");
  CHECK_REFUSED(with_cluster(R"("timeouts": {"request_ms": 100, "request_ms": 200})"),
                "cluster.json: timeouts.request_ms: duplicate key");
  // Inside an array the path carries the element's index.
  CHECK_REFUSED(cluster_only(R"("worker": ["127.0.0.1:7000", {"a": 1, "a": 2}])"),
                "cluster.json: cluster.worker[1].a: duplicate key");
  // Equal keys in different objects are fine.
  BOOST_TEST(refusal(with_cluster(R"("task": {"type": "ps", "index": 0}, "tls": {})")) == "");
}

BOOST_AUTO_TEST_CASE(unknown_keys_are_refused_at_every_level) {
  CHECK_REFUSED(with_cluster(R"("clusters": {})"),
                "cluster.json: clusters: unknown key 'clusters' (cluster, task, tls, secret, checkpoint, timeouts, consistency, "
                "wire_floats)");
  CHECK_REFUSED(cluster_only(R"("worker": ["127.0.0.1:7000"], "workers": ["127.0.0.1:7001"])"),
                "cluster.json: cluster.workers: unknown task type 'workers' (chief, master, worker, ps, evaluator)");
  CHECK_REFUSED(with_cluster(R"("task": {"type": "ps", "index": 0, "task_index": 0})"),
                "cluster.json: task.task_index: unknown key 'task_index' (type, index)");
  CHECK_REFUSED(with_cluster(R"("tls": {"cert": "a.pem"})"), "cluster.json: tls.cert: unknown key 'cert'");
  CHECK_REFUSED(with_cluster(R"("checkpoint": {"directory": "/tmp"})"),
                "cluster.json: checkpoint.directory: unknown key 'directory'");
  CHECK_REFUSED(with_cluster(R"("timeouts": {"heartbeat": 100})"),
                "cluster.json: timeouts.heartbeat: unknown key 'heartbeat' (heartbeat_ms, connection_ms, request_ms, "
                "connect_ms)");
}

BOOST_AUTO_TEST_CASE(a_cluster_needs_a_cluster_section_and_a_worker) {
  CHECK_REFUSED(R"({"task": {"type": "worker", "index": 0}})", "cluster.json: cluster: missing");
  CHECK_REFUSED(cluster_only(R"("chief": ["127.0.0.1:7000"])"),
                "cluster.json: cluster.worker: a cluster needs at least one worker");
  CHECK_REFUSED(cluster_only(R"("worker": [])"), "cluster.json: cluster.worker: a cluster needs at least one worker");
}

BOOST_AUTO_TEST_CASE(at_most_one_chief_and_one_evaluator) {
  CHECK_REFUSED(cluster_only(R"("chief": ["127.0.0.1:7000", "127.0.0.1:7001"], "worker": ["127.0.0.1:7002"])"),
                "cluster.json: cluster.chief: at most one chief, got 2");
  CHECK_REFUSED(cluster_only(R"("evaluator": ["127.0.0.1:7000", "127.0.0.1:7001"], "worker": ["127.0.0.1:7002"])"),
                "cluster.json: cluster.evaluator: at most one evaluator, got 2");
  // Empty lists are as good as none.
  BOOST_TEST(refusal(cluster_only(R"("chief": [], "evaluator": [], "worker": ["127.0.0.1:7002"])")) == "");
}

BOOST_AUTO_TEST_CASE(malformed_addresses_name_the_field_and_index) {
  auto worker1 = [](const std::string& address) {
    return cluster_only(R"("worker": ["127.0.0.1:7000", ")" + address + R"("])");
  };
  CHECK_REFUSED(worker1("127.0.0.1:99999"), "cluster.json: cluster.worker[1]: '127.0.0.1:99999': port must be in 1..65535");
  CHECK_REFUSED(worker1("127.0.0.1:0"), "cluster.json: cluster.worker[1]: '127.0.0.1:0': port must be in 1..65535");
  CHECK_REFUSED(worker1("127.0.0.1:12345678901"), "cluster.json: cluster.worker[1]: '127.0.0.1:12345678901': port must be");
  CHECK_REFUSED(worker1("127.0.0.1"), "cluster.json: cluster.worker[1]: '127.0.0.1': expected host:port");
  CHECK_REFUSED(worker1("127.0.0.1:"), "cluster.json: cluster.worker[1]: '127.0.0.1:': the port is missing");
  CHECK_REFUSED(worker1(":7001"), "cluster.json: cluster.worker[1]: ':7001': the host is empty");
  CHECK_REFUSED(worker1("127.0.0.1:7x"), "cluster.json: cluster.worker[1]: '127.0.0.1:7x': the port '7x' is not a decimal");
  CHECK_REFUSED(worker1("127.0.0.1:-7"), "cluster.json: cluster.worker[1]: '127.0.0.1:-7': the port '-7' is not a decimal");
  CHECK_REFUSED(worker1("127.0.0.1: 7001"), "cluster.json: cluster.worker[1]: '127.0.0.1: 7001': the port");
  CHECK_REFUSED(worker1("my_host:7001"), "cluster.json: cluster.worker[1]: 'my_host:7001': the host may hold only");
  CHECK_REFUSED(worker1("http://h:7001"), "cluster.json: cluster.worker[1]: 'http://h:7001': expected one ':'");
  CHECK_REFUSED(worker1("::1:7001"), "cluster.json: cluster.worker[1]: '::1:7001': expected one ':' between host and "
                                     "port (an IPv6 host goes in brackets");
  CHECK_REFUSED(worker1("[::1:7001"), "cluster.json: cluster.worker[1]: '[::1:7001': an IPv6 host needs its closing ']'");
  CHECK_REFUSED(worker1("[::1]7001"), "cluster.json: cluster.worker[1]: '[::1]7001': expected ':' and a port after ']'");
  CHECK_REFUSED(worker1("[]:7001"), "cluster.json: cluster.worker[1]: '[]:7001': the host is empty");
  CHECK_REFUSED(worker1("[localhost]:7001"), "cluster.json: cluster.worker[1]: '[localhost]:7001': 'localhost' is not an "
                                             "IPv6 address");
  // Bracketed IPv6 loopback is fine without TLS.
  const auto def = parse_cluster_def(worker1("[::1]:7001"), "cluster.json");
  BOOST_TEST(def.worker[1].host == "::1");
  BOOST_TEST(def.worker[1].port == 7001);
}

BOOST_AUTO_TEST_CASE(an_address_used_twice_names_both_fields) {
  CHECK_REFUSED(cluster_only(R"("chief": ["127.0.0.1:7000"], "worker": ["127.0.0.1:7001", "127.0.0.1:7000"])"),
                "cluster.json: cluster.worker[1]: '127.0.0.1:7000' is used twice: also by cluster.chief[0]");
  CHECK_REFUSED(cluster_only(R"("worker": ["localhost:7000", "localhost:7000"])"),
                "cluster.json: cluster.worker[1]: 'localhost:7000' is used twice: also by cluster.worker[0]");
  // localhost is kept as written, not resolved: a different text is a different address.
  BOOST_TEST(refusal(cluster_only(R"("worker": ["localhost:7000", "127.0.0.1:7000"])")) == "");
  // Same host, other port: fine.
  BOOST_TEST(refusal(cluster_only(R"("worker": ["127.0.0.1:7000"], "ps": ["127.0.0.1:7001"])")) == "");
}

BOOST_AUTO_TEST_CASE(the_task_must_be_a_known_type_with_an_index_in_range) {
  CHECK_REFUSED(with_cluster(R"("task": {"type": "worker", "index": 2})"),
                "cluster.json: task.index: 2 is out of range: the cluster has 2 worker task(s)");
  // Evaluator 0 may run outside the map (as Kubeflow runs it); no other.
  BOOST_TEST(!parse_cluster_def(with_cluster(R"("task": {"type": "evaluator", "index": 0})"), "c")
                .listed(task_id{task_type::evaluator, 0}));
  CHECK_REFUSED(with_cluster(R"("task": {"type": "evaluator", "index": 1})"),
                "cluster.json: task.index: 1 is out of range: the cluster has 0 evaluator task(s)");
  CHECK_REFUSED(with_cluster(R"("task": {"type": "worker", "index": -1})"),
                "cluster.json: task.index: -1 is out of range");
  CHECK_REFUSED(with_cluster(R"("task": {"type": "boss", "index": 0})"),
                "cluster.json: task.type: unknown task type 'boss' (chief, worker, ps, evaluator)");
  CHECK_REFUSED(with_cluster(R"("task": {"index": 0})"), "cluster.json: task.type: missing");
  CHECK_REFUSED(with_cluster(R"("task": {"type": "worker"})"), "cluster.json: task.index: missing");
  BOOST_TEST(*parse_cluster_def(with_cluster(R"("task": {"type": "worker", "index": 1})"), "c").task ==
             (task_id{task_type::worker, 1}));
}

BOOST_AUTO_TEST_CASE(wrong_json_types_name_the_field_and_the_expected_type) {
  CHECK_REFUSED(R"({"cluster": ["127.0.0.1:7000"]})", "cluster.json: cluster: expected an object, got an array");
  CHECK_REFUSED(cluster_only(R"("worker": "127.0.0.1:7000")"),
                "cluster.json: cluster.worker: expected an array of \"host:port\" strings, got a string");
  CHECK_REFUSED(cluster_only(R"("worker": ["127.0.0.1:7000", 7001])"),
                "cluster.json: cluster.worker[1]: expected a string, got a number 7001");
  CHECK_REFUSED(with_cluster(R"("task": "worker:0")"), "cluster.json: task: expected an object, got a string");
  CHECK_REFUSED(with_cluster(R"("task": {"type": "worker", "index": "0"})"),
                "cluster.json: task.index: expected an integer, got a string \"0\"");
  CHECK_REFUSED(with_cluster(R"("task": {"type": "worker", "index": 1.5})"),
                "cluster.json: task.index: expected an integer, got a number 1.5");
  CHECK_REFUSED(with_cluster(R"("task": {"type": 1, "index": 0})"),
                "cluster.json: task.type: expected a string, got a number 1");
  CHECK_REFUSED(with_cluster(R"("tls": {"certificate": 1, "key": "k", "ca": "c"})"),
                "cluster.json: tls.certificate: expected a string, got a number 1");
  CHECK_REFUSED(with_cluster(R"("checkpoint": {"shared": "yes"})"),
                "cluster.json: checkpoint.shared: expected true or false, got a string \"yes\"");
  CHECK_REFUSED(with_cluster(R"("checkpoint": {"dir": null})"), "cluster.json: checkpoint.dir: expected a string, got null");
  CHECK_REFUSED(with_cluster(R"("timeouts": {"request_ms": "60s"})"),
                "cluster.json: timeouts.request_ms: expected an integer, got a string");
  CHECK_REFUSED(with_cluster(R"("timeouts": {"request_ms": 18446744073709551615})"),
                "cluster.json: timeouts.request_ms: 18446744073709551615 is too large");
  CHECK_REFUSED(with_cluster(R"("consistency": 3)"), "cluster.json: consistency: expected a string, got a number 3");
}

BOOST_AUTO_TEST_CASE(wire_floats_is_f32_unless_bf16_is_asked_and_nothing_else_is_taken) {
  BOOST_TEST(!parse_cluster_def(with_cluster(""), "c").wire_bf16);
  BOOST_TEST(!parse_cluster_def(with_cluster(R"("wire_floats": "f32")"), "c").wire_bf16);
  BOOST_TEST(parse_cluster_def(with_cluster(R"("wire_floats": "bf16")"), "c").wire_bf16);
  CHECK_REFUSED(with_cluster(R"("wire_floats": "fp16")"),
                "cluster.json: wire_floats: unknown 'fp16' (f32: every bit as computed, the default; bf16: gradients "
                "and training pulls rounded to bfloat16 on the data plane's stream)");
  CHECK_REFUSED(with_cluster(R"("wire_floats": true)"), "cluster.json: wire_floats: expected a string, got a boolean true");
}

BOOST_AUTO_TEST_CASE(tls_takes_all_three_files_or_none) {
  CHECK_REFUSED(with_cluster(R"("tls": {"certificate": "n.pem", "key": "n.key"})"),
                "cluster.json: tls: partial settings: certificate and key given, ca missing");
  CHECK_REFUSED(with_cluster(R"("tls": {"ca": "ca.pem"})"),
                "cluster.json: tls: partial settings: ca given, certificate and key missing");
  CHECK_REFUSED(with_cluster(R"("tls": {"certificate": "", "key": "n.key", "ca": "ca.pem"})"),
                "cluster.json: tls.certificate: expected a file path, got an empty string");
  BOOST_TEST(!parse_cluster_def(with_cluster(R"("tls": {})"), "c").tls.enabled());
}

BOOST_AUTO_TEST_CASE(checkpoint_counts_may_not_be_negative) {
  CHECK_REFUSED(with_cluster(R"("checkpoint": {"every_steps": -1})"),
                "cluster.json: checkpoint.every_steps: -1 is negative");
  CHECK_REFUSED(with_cluster(R"("checkpoint": {"interval_ms": -5})"),
                "cluster.json: checkpoint.interval_ms: -5 is negative");
  const auto def = parse_cluster_def(with_cluster(R"("checkpoint": {"every_steps": 0, "interval_ms": 0})"), "c");
  BOOST_TEST(def.checkpoint_every == 0);
  BOOST_TEST(def.checkpoint_full_every == 0);  // not given: the cluster's default
  CHECK_REFUSED(with_cluster(R"("checkpoint": {"full_every": 0})"), "cluster.json: checkpoint.full_every: 0 is not in [1, 1000]");
  CHECK_REFUSED(with_cluster(R"("checkpoint": {"full_every": 3000000000})"),
                "cluster.json: checkpoint.full_every: 3000000000 is not in [1, 1000]");
  CHECK_REFUSED(with_cluster(R"("checkpoint": {"full_every": "x"})"), "cluster.json: checkpoint.full_every");
  BOOST_TEST(parse_cluster_def(with_cluster(R"("checkpoint": {"full_every": 3})"), "c").checkpoint_full_every == 3);
  BOOST_TEST(def.checkpoint_keep == 0);  // not given: the cluster's default
  CHECK_REFUSED(with_cluster(R"("checkpoint": {"keep": 0})"), "cluster.json: checkpoint.keep: 0 is not in [1, 100000]");
  CHECK_REFUSED(with_cluster(R"("checkpoint": {"keep": -2})"), "cluster.json: checkpoint.keep: -2 is not in [1, 100000]");
  CHECK_REFUSED(with_cluster(R"("checkpoint": {"keep": 1.5})"), "cluster.json: checkpoint.keep");
  BOOST_TEST(parse_cluster_def(with_cluster(R"("checkpoint": {"keep": 20})"), "c").checkpoint_keep == 20);
}

BOOST_AUTO_TEST_CASE(timeouts_are_positive_and_a_heartbeat_fits_in_the_connection_timeout) {
  CHECK_REFUSED(with_cluster(R"("timeouts": {"heartbeat_ms": 0})"),
                "cluster.json: timeouts.heartbeat_ms: 0 must be a positive number of milliseconds");
  CHECK_REFUSED(with_cluster(R"("timeouts": {"connection_ms": -1})"),
                "cluster.json: timeouts.connection_ms: -1 must be a positive");
  CHECK_REFUSED(with_cluster(R"("timeouts": {"request_ms": 0})"), "cluster.json: timeouts.request_ms: 0 must be a positive");
  CHECK_REFUSED(with_cluster(R"("timeouts": {"connect_ms": 0})"), "cluster.json: timeouts.connect_ms: 0 must be a positive");
  CHECK_REFUSED(with_cluster(R"("timeouts": {"heartbeat_ms": 1000, "connection_ms": 1000})"),
                "cluster.json: timeouts.connection_ms: 1000 ms must exceed timeouts.heartbeat_ms, 1000 ms: a peer silent");
  // Against a default the message says so.
  CHECK_REFUSED(with_cluster(R"("timeouts": {"heartbeat_ms": 6000})"),
                "cluster.json: timeouts.connection_ms: 5000 ms (the default) must exceed timeouts.heartbeat_ms, 6000 ms:");
  BOOST_TEST(refusal(with_cluster(R"("timeouts": {"heartbeat_ms": 4999})")) == "");
}

BOOST_AUTO_TEST_CASE(consistency_is_async_sync_or_bounded_staleness_n) {
  auto consistency = [](const std::string& mode) { return with_cluster(R"("consistency": ")" + mode + "\""); };
  for (std::string mode : {"async", "sync", "bounded_staleness(0)", "bounded_staleness(12)"})
    BOOST_TEST(parse_cluster_def(consistency(mode), "c").consistency->to_string() == mode);
  for (std::string mode : {"Async", "eventual", "", "bounded_staleness", "bounded_staleness()", "bounded_staleness(-1)",
                           "bounded_staleness(1.5)", "bounded_staleness(2", "bounded_staleness(x)",
                           "bounded_staleness(1234567890)"})
    CHECK_REFUSED(consistency(mode), "cluster.json: consistency: unknown mode '" + mode +
                                       "' (async, sync or bounded_staleness(N) with N a whole number of steps");
}

BOOST_AUTO_TEST_CASE(off_loopback_addresses_need_tls) {
  CHECK_REFUSED(cluster_only(R"("worker": ["10.0.0.5:7000"])"),
                "cluster.json: cluster.worker[0]: '10.0.0.5:7000' is not a loopback address: plain BASP lets any peer "
                "control a node, so addresses off loopback need TLS (a tls section or --tls-cert/--tls-key/--tls-ca)");
  CHECK_REFUSED(cluster_only(R"("worker": ["127.0.0.1:7000"], "ps": ["[fd00::1]:7001"])"),
                "cluster.json: cluster.ps[0]: '[fd00::1]:7001' is not a loopback address");
  CHECK_REFUSED(cluster_only(R"("worker": ["127.0.0.1:7000", "node-2:7000"])"),
                "cluster.json: cluster.worker[1]: 'node-2:7000' is not a loopback address");
  // A tls section allows them...
  const std::string remote = R"({"cluster": {"worker": ["10.0.0.5:7000"]}})";
  BOOST_TEST(refusal(R"({"cluster": {"worker": ["10.0.0.5:7000"]},
                         "tls": {"certificate": "n.pem", "key": "n.key", "ca": "ca.pem"}})") == "");
  // ...and so do the --tls-* flags, which TF_CONFIG (no tls section) depends on.
  const tls_files flags{"f.pem", "f.key", "fca.pem"};
  const auto def = parse_cluster_def(remote, "TF_CONFIG", flags);
  BOOST_TEST(def.tls.certificate == "f.pem");
  BOOST_TEST(def.tls.ca == "fca.pem");
}

BOOST_AUTO_TEST_CASE(tls_flags_replace_the_file_section_and_must_be_complete) {
  const auto def = parse_cluster_def(with_cluster(R"("tls": {"certificate": "n.pem", "key": "n.key", "ca": "ca.pem"})"),
                                     "cluster.json", tls_files{"f.pem", "f.key", "fca.pem"});
  BOOST_TEST(def.tls.key == "f.key");
  const auto error = refusal(with_cluster(""), tls_files{"f.pem", "", ""});
  BOOST_TEST(begins(error, "--tls-cert/--tls-key/--tls-ca: partial settings: --tls-cert given, --tls-key and --tls-ca "
                           "missing"),
             error);
  // No flags leave the file's section alone.
  BOOST_TEST(parse_cluster_def(with_cluster(R"("tls": {"certificate": "n.pem", "key": "n.key", "ca": "ca.pem"})"), "c")
               .tls.key == "n.key");
}

BOOST_AUTO_TEST_CASE(read_cluster_file_names_the_path) {
  temp_dir dir;
  const auto good = dir.write("cluster.json", R"({"cluster": {"worker": ["127.0.0.1:7000"]}})");
  BOOST_TEST(read_cluster_file(good).worker.at(0).text() == "127.0.0.1:7000");
  const auto bad = dir.write("bad.json", R"({"cluster": {"worker": []}})");
  BOOST_TEST(error_of([&] { read_cluster_file(bad); }) ==
             bad + ": cluster.worker: a cluster needs at least one worker");
  const auto missing = dir.path() + "/missing.json";
  BOOST_TEST(error_of([&] { read_cluster_file(missing); }) == missing + ": cannot read: No such file or directory");
  BOOST_TEST(error_of([&] { read_cluster_file(dir.path()); }) == dir.path() + ": cannot read: Is a directory");
}

BOOST_AUTO_TEST_CASE(a_relative_secret_is_the_cluster_files_neighbour) {
  temp_dir dir;
  const auto rel = dir.write("rel.json", R"({"cluster": {"worker": ["127.0.0.1:7000"]}, "secret": "job.secret"})");
  BOOST_TEST(read_cluster_file(rel).secret_file == dir.path() + "/job.secret");
  const auto abs = dir.write("abs.json", R"({"cluster": {"worker": ["127.0.0.1:7000"]}, "secret": "/etc/at/job.secret"})");
  BOOST_TEST(read_cluster_file(abs).secret_file == "/etc/at/job.secret");
  // TF_CONFIG has no directory: its path stays as given (the working directory's).
  BOOST_TEST(parse_cluster_def(R"({"cluster": {"worker": ["127.0.0.1:7000"]}, "secret": "s"})", "TF_CONFIG").secret_file ==
             "s");
  CHECK_REFUSED(with_cluster(R"("secret": "")"), "cluster.json: secret: expected a file path, got an empty string");
  CHECK_REFUSED(with_cluster(R"("secret": 7)"), "cluster.json: secret:");
}

BOOST_AUTO_TEST_CASE(parse_task_reads_type_colon_index) {
  BOOST_TEST(parse_task("worker:1") == (task_id{task_type::worker, 1}));
  BOOST_TEST(parse_task("chief:0") == (task_id{task_type::chief, 0}));
  BOOST_TEST(parse_task("ps:12") == (task_id{task_type::ps, 12}));
  BOOST_TEST(parse_task("evaluator:0") == (task_id{task_type::evaluator, 0}));
  BOOST_TEST(parse_task("worker:99") == (task_id{task_type::worker, 99}));  // range is checked later
}

BOOST_AUTO_TEST_CASE(parse_task_refuses_anything_else) {
  auto error = [](const std::string& text) { return error_of([&] { parse_task(text); }); };
  BOOST_TEST(error("worker-1") == "--task 'worker-1': expected TYPE:INDEX, as in worker:0");
  BOOST_TEST(error("") == "--task '': expected TYPE:INDEX, as in worker:0");
  BOOST_TEST(error("worker:1:2") == "--task 'worker:1:2': expected TYPE:INDEX, as in worker:0");
  BOOST_TEST(error("workers:1") == "--task 'workers:1': unknown task type 'workers' (chief, worker, ps, evaluator)");
  BOOST_TEST(error(":1") == "--task ':1': unknown task type '' (chief, worker, ps, evaluator)");
  for (const char* text : {"worker:", "worker:-1", "worker:+1", "worker: 1", "worker:1x", "worker:0x1",
                           "worker:12345678901"})
    BOOST_TEST(error(text) == "--task '" + std::string(text) + "': the index must be a whole number >= 0, as in worker:0");
}

BOOST_AUTO_TEST_CASE(check_tls_files_reads_every_file) {
  temp_dir dir;
  const auto cert = dir.write("node.pem", pem_text);
  const auto key = dir.write("node.key", "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n");
  const auto ca = dir.write("ca.pem", pem_text);
  const auto junk = dir.write("junk.pem", "not a certificate\n");
  BOOST_CHECK_NO_THROW(check_tls_files(tls_files{cert, key, ca}, "cluster.json"));
  BOOST_CHECK_NO_THROW(check_tls_files(tls_files{}, "cluster.json"));  // TLS off: nothing to read

  const auto missing = dir.path() + "/x.pem";
  auto error = [](const tls_files& tls) { return error_of([&] { check_tls_files(tls, "cluster.json"); }); };
  BOOST_TEST(error(tls_files{missing, key, ca}) ==
             "cluster.json: tls.certificate: cannot read '" + missing + "': No such file or directory");
  BOOST_TEST(error(tls_files{cert, missing, ca}) ==
             "cluster.json: tls.key: cannot read '" + missing + "': No such file or directory");
  BOOST_TEST(error(tls_files{cert, key, dir.path()}) ==
             "cluster.json: tls.ca: cannot read '" + dir.path() + "': Is a directory");
  BOOST_TEST(error(tls_files{cert, junk, ca}) ==
             "cluster.json: tls.key: '" + junk + "' is not PEM: it has no -----BEGIN line");
  BOOST_TEST(begins(error(tls_files{cert, "", ""}), "cluster.json: tls: partial settings: certificate given"));
}

BOOST_AUTO_TEST_SUITE_END()

// Found by tools/fuzz (cluster_file): a number too large for any JSON type escaped as
// nlohmann's out_of_range, not as a cluster_file_error naming the source.
BOOST_AUTO_TEST_CASE(a_number_too_large_for_json_is_a_refusal_naming_the_source) {
  auto msg = refusal("77777777777E77777777777777s");
  BOOST_TEST(msg.find("cluster.json") != std::string::npos, msg);
  BOOST_TEST(msg.find("not valid JSON") != std::string::npos, msg);
  msg = refusal(R"({"cluster": {"worker": ["127.0.0.1:7000"]}, "timeouts": {"connect_ms": 1e999}})");
  BOOST_TEST(!msg.empty(), msg);
}
