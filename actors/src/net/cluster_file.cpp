// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
#include <actortrain/actors/net/cluster_file.hpp>
#include <actortrain/actors/net/sockets.hpp>

#include "numbers.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace actortrain {

namespace {

using json = nlohmann::json;

constexpr task_type every_task_type[] = {task_type::chief, task_type::worker, task_type::ps, task_type::evaluator};
constexpr const char* task_type_choices = "chief, worker, ps, evaluator";

std::optional<task_type> task_type_named(const std::string& name) {
  for (auto t : every_task_type)
    if (name == to_string(t)) return t;
  return std::nullopt;
}

using detail::whole_number;

std::string join(std::initializer_list<const char*> words) {
  std::string out;
  for (auto w : words) out += (out.empty() ? "" : ", ") + std::string(w);
  return out;
}

// "a", "a and b", "a, b and c".
std::string and_list(const std::vector<std::string>& words) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i)
    out += (i == 0 ? "" : i + 1 == words.size() ? " and " : ", ") + words[i];
  return out;
}

// Field paths as errors print them: "cluster" + "worker" -> "cluster.worker", then "[1]".
std::string member(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}
std::string element(const std::string& parent, size_t index) { return fmt::format("{}[{}]", parent, index); }

std::string address_field(task_type type, size_t index) { return element(member("cluster", to_string(type)), index); }

// What a JSON value is, for "expected X, got Y"; scalars show their text too.
std::string describe(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string " + v.dump();
    case json::value_t::boolean: return "a boolean " + v.dump();
    default: return "a number " + v.dump();
  }
}

// Levenshtein distance, for telling a typo of one of our keys from another tool's key.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// Reads typed values out of parsed JSON; every failure names the source and the field,
// so a user with several cluster files (or TF_CONFIG) knows which one to fix and where.
class reader {
 public:
  explicit reader(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const std::string& field, const std::string& problem) const {
    throw cluster_file_error(fmt::format("{}: {}: {}", source_, field, problem));
  }
  // For problems with the source as a whole (it is not JSON at all).
  [[noreturn]] void fail_source(const std::string& problem) const {
    throw cluster_file_error(fmt::format("{}: {}", source_, problem));
  }

  void expect(const json& v, bool ok, const std::string& field, const char* wanted) const {
    if (!ok) fail(field, fmt::format("expected {}, got {}", wanted, describe(v)));
  }

  // Refuses keys outside `known`: a misspelt key ("heartbeat" for "heartbeat_ms") would
  // otherwise be ignored and its default used without a word.
  void only_keys(const json& object, const std::string& field, std::initializer_list<const char*> known,
                 const char* noun = "key") const {
    for (const auto& item : object.items()) {
      bool ok = false;
      for (auto k : known) ok = ok || item.key() == k;
      if (!ok) fail(member(field, item.key()), fmt::format("unknown {} '{}' ({})", noun, item.key(), join(known)));
    }
  }

  // As only_keys for a cluster file; for TF_CONFIG, keys outside `known` are other
  // tools' (Kubeflow's "environment", Vertex's "job") and go to `notes`, unless they are
  // a near miss of one of ours, which is a typo.
  void known_keys(const json& object, const std::string& field, std::initializer_list<const char*> known,
                  cluster_dialect dialect, std::vector<std::string>& notes) const {
    if (dialect == cluster_dialect::file) return only_keys(object, field, known);
    for (const auto& item : object.items()) {
      bool ok = false;
      for (auto k : known) ok = ok || item.key() == k;
      if (ok) continue;
      for (auto k : known)  // two edits apart for our longer keys, one for "tls" and "task"
        if (edit_distance(item.key(), k) <= (std::strlen(k) >= 5 ? 2u : 1u))
          fail(member(field, item.key()), fmt::format("unknown key '{}': did you mean '{}'? ({})", item.key(), k,
                                                      join(known)));
      notes.push_back(fmt::format("{}: {}: ignored (not used by ActorTrain)", source_, member(field, item.key())));
    }
  }

  std::string string(const json& v, const std::string& field) const {
    expect(v, v.is_string(), field, "a string");
    return v.get<std::string>();
  }

  bool boolean(const json& v, const std::string& field) const {
    expect(v, v.is_boolean(), field, "true or false");
    return v.get<bool>();
  }

  int64_t integer(const json& v, const std::string& field) const {
    // nlohmann keeps 2^63..2^64-1 as unsigned; reading it as int64_t would wrap negative.
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(field, fmt::format("{} is too large", v.dump()));
    expect(v, v.is_number_integer(), field, "an integer");
    return v.get<int64_t>();
  }

 private:
  std::string source_;
};

// nlohmann::json keeps only the last of two equal keys in an object. In a cluster file
// that silently drops a task list or a setting, so the parser callback notes the first
// duplicate and its path.
class duplicate_key_finder {
 public:
  void see(json::parse_event_t event, const json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start: open(true); break;
      case json::parse_event_t::array_start: open(false); break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end: frames_.pop_back(); break;
      case json::parse_event_t::key: on_key(parsed.get<std::string>()); break;
      case json::parse_event_t::value: here(); break;  // only advances an array's index
    }
  }
  /// The path of the first duplicate key, "" if none.
  const std::string& first() const { return first_; }

 private:
  struct frame {
    bool object;
    std::string path;
    std::set<std::string> keys;
    std::string key;  // the latest key, naming the value that follows it
    size_t elements = 0;
  };

  // The path of the value that begins now in the innermost container.
  std::string here() {
    if (frames_.empty()) return "";
    auto& f = frames_.back();
    return f.object ? member(f.path, f.key) : element(f.path, f.elements++);
  }
  void open(bool object) {
    auto path = here();
    frames_.push_back(frame{object, std::move(path), {}, {}, 0});
  }
  void on_key(const std::string& key) {
    auto& f = frames_.back();
    if (!f.keys.insert(key).second && first_.empty()) first_ = member(f.path, key);
    f.key = key;
  }

  std::vector<frame> frames_;
  std::string first_;
};

json parse_json(const reader& r, const std::string& text) {
  duplicate_key_finder duplicates;
  json doc;
  try {
    doc = json::parse(text, [&duplicates](int, json::parse_event_t event, json& parsed) {
      duplicates.see(event, parsed);
      return true;
    });
  } catch (const json::parse_error& e) {
    r.fail_source(fmt::format("not valid JSON: {} (byte {})", e.what(), e.byte));
  } catch (const json::exception& e) {  // a number too large for any type (found by fuzzing)
    r.fail_source(fmt::format("not valid JSON: {}", e.what()));
  }
  if (!duplicates.first().empty())
    r.fail(duplicates.first(), "duplicate key: JSON keeps only the last one, so the earlier value would be lost");
  return doc;
}

// Hostnames as DNS spells them; anything else (spaces, '_', '/', a URL) is a typo.
constexpr const char* hostname_chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-";

// Parses "host:port" or "[ipv6]:port" into `out`; returns the problem in words, "" if none.
std::string parse_address(const std::string& text, task_address& out) {
  std::string host, port;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string::npos) return "an IPv6 host needs its closing ']', as in [::1]:7000";
    host = text.substr(1, close - 1);
    if (host.empty()) return "the host is empty";
    if (!net::is_ipv6_literal(host)) return fmt::format("'{}' is not an IPv6 address", host);
    if (close + 1 >= text.size() || text[close + 1] != ':') return "expected ':' and a port after ']', as in [::1]:7000";
    port = text.substr(close + 2);
  } else {
    auto colon = text.find(':');
    if (colon == std::string::npos) return "expected host:port, as in 127.0.0.1:7000";
    if (text.find(':', colon + 1) != std::string::npos)
      return "expected one ':' between host and port (an IPv6 host goes in brackets, as in [::1]:7000)";
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.empty()) return "the host is empty";
    if (host.find_first_not_of(hostname_chars) != std::string::npos)
      return "the host may hold only letters, digits, '.' and '-' (or an IPv6 address in brackets)";
  }
  if (port.empty()) return "the port is missing";
  // More digits than a port has, so that 99999 and 123456 both get the range message.
  auto number = whole_number(port, 18);
  if (!number) return fmt::format("the port '{}' is not a decimal number", port);
  if (*number < 1 || *number > 65535) return "port must be in 1..65535";
  out = task_address{host, static_cast<uint16_t>(*number)};
  return {};
}

std::vector<task_address>& tasks_of(cluster_def& def, task_type type) {
  switch (type) {
    case task_type::chief: return def.chief;
    case task_type::worker: return def.worker;
    case task_type::ps: return def.ps;
    case task_type::evaluator: return def.evaluator;
  }
  return def.worker;
}

void read_cluster(const reader& r, const json& section, cluster_def& def) {
  const std::string field = "cluster";
  r.expect(section, section.is_object(), field, "an object");
  r.only_keys(section, field, {"chief", "master", "worker", "ps", "evaluator"}, "task type");
  if (section.contains("master") && section.contains("chief"))
    r.fail(member(field, "master"), "'master' is TensorFlow 1's name for the chief: give one of master and chief");
  std::map<std::string, std::string> holder;  // address text -> the field that lists it
  for (auto type : every_task_type) {
    std::string key = to_string(type);
    if (type == task_type::chief && section.contains("master")) key = "master";
    auto list = section.find(key);
    if (list == section.end()) continue;
    const auto list_field = member(field, key);
    if (list->is_object())
      r.fail(list_field, "an object of task indices is TensorFlow's sparse form, in which a task sees only some of "
                         "its peers; ActorTrain's coordinator needs every task's address and the number of tasks: "
                         "give an array of every task's \"host:port\"");
    r.expect(*list, list->is_array(), list_field, "an array of \"host:port\" strings");
    for (size_t i = 0; i < list->size(); ++i) {
      const auto item_field = element(list_field, i);
      const auto text = r.string((*list)[i], item_field);
      task_address a;
      if (auto problem = parse_address(text, a); !problem.empty()) r.fail(item_field, fmt::format("'{}': {}", text, problem));
      // Two tasks on one address cannot both listen; the second would fail to bind, or
      // worse, peers would reach the wrong task.
      auto [it, fresh] = holder.emplace(a.text(), item_field);
      if (!fresh) r.fail(item_field, fmt::format("'{}' is used twice: also by {}", text, it->second));
      tasks_of(def, type).push_back(a);
    }
  }
  if (def.worker.empty()) r.fail(member(field, "worker"), "a cluster needs at least one worker");
  if (def.chief.size() > 1)
    r.fail(member(field, section.contains("master") ? "master" : "chief"),
           fmt::format("at most one chief, got {}", def.chief.size()));
  if (def.evaluator.size() > 1)
    r.fail(member(field, "evaluator"), fmt::format("at most one evaluator, got {}", def.evaluator.size()));
}

// Needs the cluster already read: the index is checked against its task list.
task_id read_task(const reader& r, const json& section, cluster_def& def, cluster_dialect dialect) {
  const std::string field = "task";
  r.expect(section, section.is_object(), field, "an object");
  r.known_keys(section, field, {"type", "index"}, dialect, def.notes);
  auto type_it = section.find("type");
  if (type_it == section.end()) r.fail(member(field, "type"), fmt::format("missing ({})", task_type_choices));
  auto name = r.string(*type_it, member(field, "type"));
  auto type = name == "master" ? std::optional<task_type>{task_type::chief} : task_type_named(name);
  if (!type) r.fail(member(field, "type"), fmt::format("unknown task type '{}' ({})", name, task_type_choices));
  // No default index: two processes that both left it out would both claim task 0.
  auto index_it = section.find("index");
  if (index_it == section.end()) r.fail(member(field, "index"), "missing (the task's index among its type, as in 0)");
  auto index = r.integer(*index_it, member(field, "index"));
  const auto count = def.tasks(*type).size();
  // Kubeflow and TensorFlow's Estimator keep the evaluator out of the cluster map.
  if (*type == task_type::evaluator && count == 0 && index == 0) {
    def.notes.push_back(fmt::format("task evaluator:0 is not in the cluster map: it listens nowhere and dials the {}",
                                    to_string(def.coordinator_task())));
    return task_id{task_type::evaluator, 0};
  }
  if (index < 0 || static_cast<uint64_t>(index) >= count)
    r.fail(member(field, "index"), fmt::format("{} is out of range: the cluster has {} {} task(s)", index, count, name));
  return task_id{*type, static_cast<int>(index)};
}

// "certificate and key given, ca missing" when some but not all of the three are set
// (under the names in `names`), "" when all or none are: half a TLS setup must not
// quietly fall back to plain BASP.
std::string partial_tls(const tls_files& tls, const std::array<const char*, 3>& names) {
  const std::array<const std::string*, 3> values{&tls.certificate, &tls.key, &tls.ca};
  std::vector<std::string> given, missing;
  for (size_t i = 0; i < 3; ++i) (values[i]->empty() ? missing : given).push_back(names[i]);
  if (given.empty() || missing.empty()) return {};
  return fmt::format("partial settings: {} given, {} missing (give all three or none)", and_list(given),
                     and_list(missing));
}

constexpr std::array<const char*, 3> tls_keys{"certificate", "key", "ca"};
constexpr std::array<const char*, 3> tls_flags{"--tls-cert", "--tls-key", "--tls-ca"};

tls_files read_tls(const reader& r, const json& section) {
  const std::string field = "tls";
  r.expect(section, section.is_object(), field, "an object");
  r.only_keys(section, field, {"certificate", "key", "ca"});
  tls_files tls;
  std::array<std::string*, 3> out{&tls.certificate, &tls.key, &tls.ca};
  for (size_t i = 0; i < 3; ++i) {
    auto it = section.find(tls_keys[i]);
    if (it == section.end()) continue;
    *out[i] = r.string(*it, member(field, tls_keys[i]));
    if (out[i]->empty()) r.fail(member(field, tls_keys[i]), "expected a file path, got an empty string");
  }
  if (auto problem = partial_tls(tls, tls_keys); !problem.empty()) r.fail(field, problem);
  return tls;
}

int64_t non_negative(const reader& r, const json& v, const std::string& field, const char* zero_means) {
  auto n = r.integer(v, field);
  if (n < 0) r.fail(field, fmt::format("{} is negative (0 means {})", n, zero_means));
  return n;
}

void read_checkpoint(const reader& r, const json& section, cluster_def& def) {
  const std::string field = "checkpoint";
  r.expect(section, section.is_object(), field, "an object");
  r.only_keys(section, field, {"dir", "shared", "every_steps", "interval_ms", "full_every", "keep"});
  if (auto it = section.find("dir"); it != section.end()) def.checkpoint_dir = r.string(*it, member(field, "dir"));
  if (auto it = section.find("shared"); it != section.end())
    def.checkpoint_shared = r.boolean(*it, member(field, "shared"));
  if (auto it = section.find("every_steps"); it != section.end())
    def.checkpoint_every = non_negative(r, *it, member(field, "every_steps"), "no step-count checkpoints");
  if (auto it = section.find("interval_ms"); it != section.end())
    def.checkpoint_interval =
      std::chrono::milliseconds{non_negative(r, *it, member(field, "interval_ms"), "no timed checkpoints")};
  if (auto it = section.find("full_every"); it != section.end()) {
    def.checkpoint_full_every = r.integer(*it, member(field, "full_every"));
    if (def.checkpoint_full_every < 1 || def.checkpoint_full_every > 1000)
      r.fail(member(field, "full_every"),
             fmt::format("{} is not in [1, 1000] (1: every checkpoint whole; n: every n-th, increments of the dynamic "
                         "tables between)",
                         def.checkpoint_full_every));
  }
  if (auto it = section.find("keep"); it != section.end()) {
    def.checkpoint_keep = r.integer(*it, member(field, "keep"));
    if (def.checkpoint_keep < 1 || def.checkpoint_keep > 100000)
      r.fail(member(field, "keep"),
             fmt::format("{} is not in [1, 100000] (the newest checkpoints kept, with what they build on)",
                         def.checkpoint_keep));
  }
}

// Reads section[key] as a positive number of milliseconds into `out`; true if given.
bool read_positive_ms(const reader& r, const json& section, const std::string& field, const char* key,
                      std::chrono::milliseconds& out) {
  auto it = section.find(key);
  if (it == section.end()) return false;
  auto n = r.integer(*it, member(field, key));
  if (n <= 0) r.fail(member(field, key), fmt::format("{} must be a positive number of milliseconds", n));
  out = std::chrono::milliseconds{n};
  return true;
}

void read_timeouts(const reader& r, const json& section, cluster_def& def) {
  const std::string field = "timeouts";
  r.expect(section, section.is_object(), field, "an object");
  r.only_keys(section, field, {"heartbeat_ms", "connection_ms", "request_ms", "connect_ms"});
  bool heartbeat_given = read_positive_ms(r, section, field, "heartbeat_ms", def.heartbeat_interval);
  bool connection_given = read_positive_ms(r, section, field, "connection_ms", def.connection_timeout);
  read_positive_ms(r, section, field, "request_ms", def.request_timeout);
  read_positive_ms(r, section, field, "connect_ms", def.connect_timeout);
  // A peer silent for connection_ms is dropped; unless a heartbeat fits in that time,
  // healthy peers are dropped between two heartbeats. One of the two may be a default.
  if (def.connection_timeout <= def.heartbeat_interval) {
    auto shown = [](std::chrono::milliseconds ms, bool given) {
      return fmt::format("{} ms{}", ms.count(), given ? "" : " (the default)");
    };
    r.fail(member(field, "connection_ms"),
           fmt::format("{} must exceed timeouts.heartbeat_ms, {}: a peer silent for connection_ms is dropped, so "
                       "a heartbeat must fit in it",
                       shown(def.connection_timeout, connection_given), shown(def.heartbeat_interval, heartbeat_given)));
  }
}

// "wire_floats": true for bf16.
bool read_wire_floats(const reader& r, const json& v) {
  auto floats = r.string(v, "wire_floats");
  if (floats == "f32") return false;
  if (floats == "bf16") return true;
  r.fail("wire_floats", fmt::format("unknown '{}' (f32: every bit as computed, the default; bf16: gradients and "
                                    "training pulls rounded to bfloat16 on the data plane's stream)",
                                    floats));
}

// One of the modes the coordinator's dispatch gates implement.
consistency_mode read_consistency(const reader& r, const json& v) {
  auto mode = r.string(v, "consistency");
  try {
    return consistency_mode::parse(mode);
  } catch (const std::invalid_argument&) {
    r.fail("consistency", fmt::format("unknown mode '{}' (async, sync or bounded_staleness(N) with N a whole number "
                                      "of steps, as in bounded_staleness(2))",
                                      mode));
  }
}

// Plain BASP executes whatever a connected peer sends, so off loopback it must be TLS.
void require_loopback_without_tls(const reader& r, const cluster_def& def) {
  if (def.tls.enabled()) return;
  for (auto type : every_task_type) {
    const auto& list = def.tasks(type);
    for (size_t i = 0; i < list.size(); ++i)
      if (!list[i].loopback())
        r.fail(address_field(type, i),
               fmt::format("'{}' is not a loopback address: plain BASP lets any peer control a node, so addresses "
                           "off loopback need TLS (a tls section or --tls-cert/--tls-key/--tls-ca)",
                           list[i].text()));
  }
}

struct file_closer {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

// Reads the whole file at `path` into `out`; returns 0 or the errno that stopped it.
int read_whole_file(const std::string& path, std::string& out) {
  errno = 0;
  std::unique_ptr<std::FILE, file_closer> f{std::fopen(path.c_str(), "rb")};
  if (!f) return errno != 0 ? errno : EIO;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f.get())) > 0) out.append(buf, n);
  // A directory opens fine on Linux and fails on the first read (EISDIR).
  if (std::ferror(f.get())) return errno != 0 ? errno : EIO;
  return 0;
}

void check_pem_file(const reader& r, const std::string& field, const std::string& path) {
  std::string text;
  if (int err = read_whole_file(path, text); err != 0)
    r.fail(field, fmt::format("cannot read '{}': {}", path, std::strerror(err)));
  if (text.find("-----BEGIN") == std::string::npos)
    r.fail(field, fmt::format("'{}' is not PEM: it has no -----BEGIN line", path));
}

[[noreturn]] void bad_task_flag(const std::string& text, const std::string& problem) {
  throw cluster_file_error(fmt::format("--task '{}': {}", text, problem));
}

}  // namespace

const char* to_string(task_type t) {
  switch (t) {
    case task_type::chief: return "chief";
    case task_type::worker: return "worker";
    case task_type::ps: return "ps";
    case task_type::evaluator: return "evaluator";
  }
  return "unknown";
}

std::string to_string(const task_id& t) { return fmt::format("{}:{}", to_string(t.type), t.index); }

task_id parse_task(const std::string& text) {
  auto colon = text.find(':');
  if (colon == std::string::npos || text.find(':', colon + 1) != std::string::npos)
    bad_task_flag(text, "expected TYPE:INDEX, as in worker:0");
  auto name = text.substr(0, colon);
  auto type = task_type_named(name);
  if (!type) bad_task_flag(text, fmt::format("unknown task type '{}' ({})", name, task_type_choices));
  // The range is checked later, against the cluster this process joins.
  auto index = whole_number(text.substr(colon + 1), 9);
  if (!index) bad_task_flag(text, "the index must be a whole number >= 0, as in worker:0");
  return task_id{*type, static_cast<int>(*index)};
}

std::string task_address::text() const {
  // An IPv6 host keeps its brackets, or the port's ':' would read as part of the host.
  if (host.find(':') != std::string::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

bool task_address::loopback() const { return net::is_loopback_host(host); }

consistency_mode cluster_def::effective_consistency() const {
  if (consistency) return *consistency;
  // Worker-only clusters follow MultiWorkerMirroredStrategy, which is synchronous.
  return worker_only() ? consistency_mode::sync() : consistency_mode::async();
}

task_id cluster_def::coordinator_task() const {
  return chief.empty() ? task_id{task_type::worker, 0} : task_id{task_type::chief, 0};
}

const std::vector<task_address>& cluster_def::tasks(task_type type) const {
  switch (type) {
    case task_type::chief: return chief;
    case task_type::worker: return worker;
    case task_type::ps: return ps;
    case task_type::evaluator: return evaluator;
  }
  return worker;
}

bool cluster_def::listed(const task_id& t) const {
  return t.index >= 0 && static_cast<size_t>(t.index) < tasks(t.type).size();
}

const task_address& cluster_def::address(const task_id& t) const {
  const auto& list = tasks(t.type);
  if (t.index < 0 || static_cast<size_t>(t.index) >= list.size())
    throw cluster_file_error(fmt::format("task {}: no such task: the cluster has {} {} task(s)", to_string(t),
                                         list.size(), to_string(t.type)));
  return list[static_cast<size_t>(t.index)];
}

cluster_def parse_cluster_def(const std::string& text, const std::string& source, const tls_files& tls_from_flags,
                              cluster_dialect dialect) {
  const reader r{source};
  const json doc = parse_json(r, text);
  r.expect(doc, doc.is_object(), "top level", "a JSON object");
  cluster_def def;
  // Kubeflow's dynamic-worker form: each task sees only its own peers.
  if (dialect == cluster_dialect::tf_config && doc.contains("sparseCluster") && !doc.contains("cluster"))
    r.fail("sparseCluster",
           "Kubeflow's dynamic-worker form names only some of this task's peers (a worker sees itself and the ps "
           "tasks, a ps task itself, the chief none); ActorTrain's coordinator needs every task's address and the "
           "number of workers, which it does not give: set enableDynamicWorker to false in the TFJob, and Kubeflow "
           "writes the whole \"cluster\"");
  r.known_keys(doc, "", {"cluster", "task", "tls", "secret", "checkpoint", "timeouts", "consistency", "wire_floats"},
               dialect,
               def.notes);

  auto cluster = doc.find("cluster");
  if (cluster == doc.end())
    r.fail("cluster", "missing: a cluster definition needs a \"cluster\" section with at least one worker");
  read_cluster(r, *cluster, def);
  if (auto it = doc.find("task"); it != doc.end()) def.task = read_task(r, *it, def, dialect);
  if (auto it = doc.find("tls"); it != doc.end()) def.tls = read_tls(r, *it);
  if (auto it = doc.find("secret"); it != doc.end()) {
    def.secret_file = r.string(*it, "secret");
    if (def.secret_file.empty()) r.fail("secret", "expected a file path, got an empty string");
  }
  if (auto it = doc.find("checkpoint"); it != doc.end()) read_checkpoint(r, *it, def);
  if (auto it = doc.find("timeouts"); it != doc.end()) read_timeouts(r, *it, def);
  if (auto it = doc.find("consistency"); it != doc.end()) def.consistency = read_consistency(r, *it);
  if (auto it = doc.find("wire_floats"); it != doc.end()) def.wire_bf16 = read_wire_floats(r, *it);

  // The command line wins over the file, as flags do elsewhere.
  if (auto problem = partial_tls(tls_from_flags, tls_flags); !problem.empty())
    throw cluster_file_error(fmt::format("--tls-cert/--tls-key/--tls-ca: {}", problem));
  if (tls_from_flags.enabled()) def.tls = tls_from_flags;

  require_loopback_without_tls(r, def);
  return def;
}

cluster_def read_cluster_file(const std::string& path, const tls_files& tls_from_flags, const std::string& resolved,
                              const std::string& resolved_source) {
  std::string text;
  if (int err = read_whole_file(path, text); err != 0)
    throw cluster_file_error(fmt::format("{}: cannot read: {}", path, std::strerror(err)));
  std::string source = path;
  if (!resolved.empty()) {
    // The settings file and the resolved cluster, as one definition.
    const reader r{path};
    json doc = parse_json(r, text);
    r.expect(doc, doc.is_object(), "top level", "a JSON object");
    for (auto key : {"cluster", "task"})
      if (doc.contains(key))
        r.fail(key, fmt::format("the cluster and the task come from {}: beside it, a cluster file holds only the "
                                "settings (tls, secret, checkpoint, timeouts, consistency, wire_floats)",
                                resolved_source));
    const json found = json::parse(resolved);
    for (auto& [key, value] : found.items()) doc[key] = value;
    text = doc.dump();
    source = fmt::format("{} with {}", resolved_source, path);
  }
  auto def = parse_cluster_def(text, source, tls_from_flags);
  // A relative secret path is the cluster file's neighbour, wherever the task starts.
  if (!def.secret_file.empty() && def.secret_file[0] != '/') {
    auto slash = path.rfind('/');
    if (slash != std::string::npos) def.secret_file = path.substr(0, slash + 1) + def.secret_file;
  }
  return def;
}

void check_tls_files(const tls_files& tls, const std::string& source) {
  const reader r{source};
  if (auto problem = partial_tls(tls, tls_keys); !problem.empty()) r.fail("tls", problem);
  if (!tls.enabled()) return;
  const std::array<const std::string*, 3> paths{&tls.certificate, &tls.key, &tls.ca};
  for (size_t i = 0; i < 3; ++i) check_pem_file(r, member("tls", tls_keys[i]), *paths[i]);
}

}  // namespace actortrain
