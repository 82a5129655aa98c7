// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
#include <actortrain/actors/net/resolvers.hpp>

#include "numbers.hpp"

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

extern char** environ;

namespace actortrain {

namespace {

using json = nlohmann::json;

[[noreturn]] void fail(const std::string& text) { throw cluster_file_error(text); }

// Roles in the order their names sort, which is the order they take blocks of ranks.
constexpr task_type roles_in_name_order[] = {task_type::chief, task_type::evaluator, task_type::ps, task_type::worker};

// A hostlist or task list that expands beyond this is a typo, not a cluster.
constexpr size_t max_hosts = 65536;


// Splits at the commas outside brackets.
std::vector<std::string> split_top_level(const std::string& text, const std::string& what) {
  std::vector<std::string> parts;
  std::string part;
  int depth = 0;
  for (char c : text) {
    if (c == '[') ++depth;
    if (c == ']' && --depth < 0) fail(fmt::format("{} '{}': a ']' without its '['", what, text));
    if (c == ',' && depth == 0) {
      parts.push_back(std::move(part));
      part.clear();
    } else {
      part += c;
    }
  }
  if (depth != 0) fail(fmt::format("{} '{}': a '[' without its ']'", what, text));
  parts.push_back(std::move(part));
  return parts;
}

// "1-3,7" inside brackets: the numbers as text, each padded to the width of its range's
// start ("009-011" -> 009 010 011), as Slurm writes them.
std::vector<std::string> expand_ranges(const std::string& ranges, const std::string& whole) {
  std::vector<std::string> out;
  std::stringstream in{ranges};
  std::string item;
  while (std::getline(in, item, ',')) {
    auto dash = item.find('-');
    auto first_text = item.substr(0, dash);
    auto last_text = dash == std::string::npos ? first_text : item.substr(dash + 1);
    auto first = detail::whole_number(first_text), last = detail::whole_number(last_text);
    if (!first || !last)
      fail(fmt::format("hostlist '{}': '{}' is not a number or a range of numbers, as in 1-3", whole, item));
    if (*last < *first) fail(fmt::format("hostlist '{}': the range '{}' runs backwards", whole, item));
    if (static_cast<size_t>(*last - *first) >= max_hosts)
      fail(fmt::format("hostlist '{}': the range '{}' names more than {} hosts", whole, item, max_hosts));
    for (int64_t n = *first; n <= *last; ++n) out.push_back(fmt::format("{:0{}}", n, first_text.size()));
  }
  if (ranges.empty() || ranges.back() == ',') fail(fmt::format("hostlist '{}': an empty range in '[{}]'", whole, ranges));
  return out;
}

// One name pattern, possibly with several bracket groups ("rack[1-2]-n[01-02]").
void expand_name(const std::string& pattern, const std::string& whole, std::vector<std::string>& out) {
  auto open = pattern.find('[');
  if (open == std::string::npos) {
    out.push_back(pattern);
    return;
  }
  auto close = pattern.find(']', open);
  auto prefix = pattern.substr(0, open);
  auto rest = pattern.substr(close + 1);
  for (auto& n : expand_ranges(pattern.substr(open + 1, close - open - 1), whole)) {
    expand_name(prefix + n + rest, whole, out);
    if (out.size() > max_hosts) fail(fmt::format("hostlist '{}' names more than {} hosts", whole, max_hosts));
  }
}

// Roles over `addresses` (by rank): chief, evaluator, ps, worker, each the next block.
rank_layout assign_roles(std::vector<task_address> addresses, const job_counts& jobs, const std::string& what) {
  if (static_cast<size_t>(jobs.total()) != addresses.size())
    fail(fmt::format("--jobs {} is {} task(s), but {} has {}: give as many tasks as ranks", jobs.text(), jobs.total(),
                     what, addresses.size()));
  rank_layout l;
  l.address = std::move(addresses);
  size_t rank = 0;
  for (auto type : roles_in_name_order) {
    auto it = jobs.count.find(type);
    if (it == jobs.count.end()) continue;
    for (int i = 0; i < it->second; ++i, ++rank) {
      l.task.push_back(task_id{type, i});
      l.cluster[type].push_back(l.address[rank]);
    }
  }
  return l;
}

std::string read_first_line(const std::string& path) {
  std::ifstream f{path};
  std::string line;
  std::getline(f, line);
  return line;
}

// The cluster section and task of a layout, as JSON for parse_cluster_def: resolved
// clusters go through the same checks as files (addresses, TLS off loopback, ranges).
json layout_json(const rank_layout& l, size_t rank) {
  json cluster = json::object();
  for (auto& [type, list] : l.cluster) {
    json a = json::array();
    for (auto& addr : list) a.push_back(addr.text());
    cluster[to_string(type)] = a;
  }
  return json{{"cluster", cluster},
              {"task", {{"type", to_string(l.task[rank].type)}, {"index", l.task[rank].index}}}};
}

// The settings beside a resolved cluster (a cluster file without "cluster"), with the
// resolved cluster and task put in, parsed as one definition.
cluster_def with_settings(const json& resolved, const std::string& source, const resolve_options& opts) {
  if (opts.cluster_file.empty()) return parse_cluster_def(resolved.dump(), source, opts.tls_from_flags);
  return read_cluster_file(opts.cluster_file, opts.tls_from_flags, resolved.dump(), source);
}

// A cluster file without "cluster": the settings beside a resolver's cluster. (A file
// that cannot be read or parsed is left to the file resolver, whose error names it.)
bool settings_only(const std::string& path) {
  std::ifstream f{path};
  if (!f) return false;
  std::stringstream text;
  text << f.rdbuf();
  auto doc = json::parse(text.str(), nullptr, false);
  return doc.is_object() && !doc.contains("cluster");
}

job_counts jobs_or_workers(const resolve_options& opts, int ranks) {
  if (!opts.jobs.empty()) return parse_job_counts(opts.jobs);
  job_counts j;
  j.count[task_type::worker] = ranks;
  return j;
}

// -- Slurm -------------------------------------------------------------------------------

resolution resolve_slurm(const resolve_options& opts, const resolver_inputs& in) {
  auto need = [&](const char* name) -> const std::string& {
    auto v = in.get(name);
    if (!v || v->empty()) fail(fmt::format("Slurm: {} is not set: run the task with srun", name));
    return *v;
  };
  auto number = [&](const char* name) {
    auto& text = need(name);
    auto n = detail::whole_number(text);
    if (!n) fail(fmt::format("Slurm: {}='{}' is not a whole number", name, text));
    return static_cast<int>(*n);
  };
  int rank = number("SLURM_PROCID");
  int tasks = number("SLURM_STEP_NUM_TASKS");
  auto hosts = expand_hostlist(need("SLURM_STEP_NODELIST"));
  auto per_node = expand_tasks_per_node(need("SLURM_STEP_TASKS_PER_NODE"));
  if (hosts.size() != per_node.size())
    fail(fmt::format("Slurm: SLURM_STEP_NODELIST names {} host(s) but SLURM_STEP_TASKS_PER_NODE gives {} count(s)",
                     hosts.size(), per_node.size()));
  int64_t sum = 0;
  std::vector<std::pair<std::string, int>> hosts_and_tasks;
  for (size_t i = 0; i < hosts.size(); ++i) {
    sum += per_node[i];
    hosts_and_tasks.emplace_back(hosts[i], per_node[i]);
  }
  if (sum != tasks)
    fail(fmt::format("Slurm: SLURM_STEP_TASKS_PER_NODE adds up to {} task(s), SLURM_STEP_NUM_TASKS is {}", sum, tasks));
  if (rank >= tasks) fail(fmt::format("Slurm: SLURM_PROCID {} is out of range: the step has {} task(s)", rank, tasks));
  auto layout = slurm_layout(hosts_and_tasks, jobs_or_workers(opts, tasks), opts.port_base);
  const std::string mine = layout.address[static_cast<size_t>(rank)].host;
  // TensorFlow builds a wrong cluster silently when the step's ranks are not where its
  // layout puts them (another distribution than block, or a nodelist not in name order).
  if (std::find(in.host_names.begin(), in.host_names.end(), mine) == in.host_names.end())
    fail(fmt::format("Slurm: rank {} is laid out on host {} (hosts in name order, as TensorFlow's "
                     "SlurmClusterResolver does), but runs on {}: the step places its ranks otherwise (run srun with "
                     "--distribution=block, the default)",
                     rank, mine, in.host_names.empty() ? std::string("an unknown host") : in.host_names.front()));
  // A step on this host alone: its tasks reach each other on loopback (and may run
  // without TLS, with the data plane's shared memory).
  std::set<std::string> distinct(hosts.begin(), hosts.end());
  bool here_only = std::all_of(distinct.begin(), distinct.end(), [&](const std::string& h) {
    return std::find(in.host_names.begin(), in.host_names.end(), h) != in.host_names.end();
  });
  if (here_only) {
    for (auto& a : layout.address) a.host = "127.0.0.1";
    for (auto& [type, list] : layout.cluster)
      for (auto& a : list) a.host = "127.0.0.1";
  }
  resolution r;
  r.kind = resolver_kind::slurm;
  r.source = fmt::format("Slurm (rank {} of {} on {})", rank, tasks, mine);
  r.cluster = with_settings(layout_json(layout, static_cast<size_t>(rank)), r.source, opts);
  if (here_only) r.cluster.notes.push_back(fmt::format("{}: every task of the step runs on this host: loopback", r.source));
  r.task = layout.task[static_cast<size_t>(rank)];
  return r;
}

// -- MPI ---------------------------------------------------------------------------------

std::string safe_name(std::string s) {
  for (auto& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') c = '_';
  return s;
}

resolution resolve_mpi(const resolve_options& opts, const resolver_inputs& in) {
  const char* rank_var = nullptr;
  for (auto name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"})
    if (in.get(name)) {
      rank_var = name;
      break;
    }
  if (!rank_var) fail("MPI: none of OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK is set: run the task with mpirun");
  auto rank = detail::whole_number(*in.get(rank_var));
  if (!rank) fail(fmt::format("MPI: {}='{}' is not a whole number", rank_var, *in.get(rank_var)));
  std::optional<int64_t> size;
  const char* size_var = nullptr;
  for (auto name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
    if (auto v = in.get(name)) {
      size_var = name;
      size = detail::whole_number(*v);
      if (!size || *size < 1) fail(fmt::format("MPI: {}='{}' is not a whole number >= 1", name, *v));
      break;
    }
  if (!size) {
    if (opts.jobs.empty()) fail("MPI: the launcher gives no size (OMPI_COMM_WORLD_SIZE, PMI_SIZE): give --jobs");
    size = parse_job_counts(opts.jobs).total();
    size_var = "--jobs";
  }
  if (*rank >= *size) fail(fmt::format("MPI: {} {} is out of range: {} is {}", rank_var, *rank, size_var, *size));
  if (opts.rendezvous_dir.empty())
    fail("MPI: give --rendezvous DIR, a directory every rank sees (shared across hosts), where each rank publishes "
         "the address the others reach it at");
  auto jobs = jobs_or_workers(opts, static_cast<int>(*size));
  // One subdirectory per launch when the launcher names it, so that a directory used
  // before holds no stale addresses for this run.
  std::string dir = opts.rendezvous_dir;
  for (auto name : {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid"})
    if (auto v = in.get(name); v && !v->empty()) {
      dir += "/" + safe_name(*v);
      break;
    }
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    fail(fmt::format("MPI: --rendezvous: cannot create {}: {}", dir, std::strerror(errno)));
  std::string host = !opts.advertise.empty()       ? opts.advertise
                     : !in.default_address.empty() ? in.default_address
                     : in.host_names.empty()       ? std::string("127.0.0.1")
                                                   : in.host_names.front();
  json mine{{"rank", *rank}, {"size", *size}, {"host", host}, {"identity", in.identity}};
  auto path = fmt::format("{}/rank-{}", dir, *rank);
  {
    auto tmp = path + ".tmp";
    std::ofstream f{tmp, std::ios::trunc};
    f << mine.dump() << "\n";
    f.close();
    if (!f || std::rename(tmp.c_str(), path.c_str()) != 0)
      fail(fmt::format("MPI: --rendezvous: cannot write {}: {}", path, std::strerror(errno)));
  }
  // Wait for every rank's file (polled: the directory may be on a network file system).
  std::vector<rank_host> hosts(static_cast<size_t>(*size));
  std::vector<bool> seen(hosts.size(), false);
  size_t found = 0;
  auto deadline = std::chrono::steady_clock::now() + opts.rendezvous_timeout;
  for (;;) {
    for (size_t r = 0; r < hosts.size(); ++r) {
      if (seen[r]) continue;
      auto p = fmt::format("{}/rank-{}", dir, r);
      std::ifstream f{p};
      if (!f) continue;
      std::stringstream text;
      text << f.rdbuf();
      json j;
      try {
        j = json::parse(text.str());
        if (j.at("size").get<int64_t>() != *size)
          fail(fmt::format("MPI: {} is of a run with {} ranks, this one has {}: give a fresh --rendezvous directory", p,
                           j.at("size").get<int64_t>(), *size));
        hosts[r] = rank_host{j.at("host").get<std::string>(), j.at("identity").get<std::string>()};
      } catch (const json::exception& e) {
        fail(fmt::format("MPI: {}: not a rank's address: {}", p, e.what()));
      }
      seen[r] = true;
      ++found;
    }
    if (found == hosts.size()) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      std::vector<std::string> missing;
      for (size_t r = 0; r < hosts.size() && missing.size() < 8; ++r)
        if (!seen[r]) missing.push_back(std::to_string(r));
      fail(fmt::format("MPI: rank(s) {}{} did not publish an address in {} within {} ms", fmt::join(missing, ", "),
                       hosts.size() - found > missing.size() ? ", ..." : "", dir, opts.rendezvous_timeout.count()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  auto layout = rank_layout_of(hosts, jobs, opts.port_base);
  resolution r;
  r.kind = resolver_kind::mpi;
  r.source = fmt::format("MPI ({} {} of {})", rank_var, *rank, *size);
  r.cluster = with_settings(layout_json(layout, static_cast<size_t>(*rank)), r.source, opts);
  r.task = layout.task[static_cast<size_t>(*rank)];
  return r;
}

}  // namespace

// -- names and counts ----------------------------------------------------------------------

const char* to_string(resolver_kind k) {
  switch (k) {
    case resolver_kind::automatic: return "auto";
    case resolver_kind::file: return "file";
    case resolver_kind::tf_config: return "tf_config";
    case resolver_kind::slurm: return "slurm";
    case resolver_kind::mpi: return "mpi";
  }
  return "unknown";
}

resolver_kind parse_resolver(const std::string& name) {
  for (auto k : {resolver_kind::automatic, resolver_kind::file, resolver_kind::tf_config, resolver_kind::slurm,
                 resolver_kind::mpi})
    if (name == to_string(k)) return k;
  fail(fmt::format("--resolver '{}': unknown (auto, file, tf_config, slurm, mpi)", name));
}

int job_counts::total() const {
  int n = 0;
  for (auto& [type, c] : count) n += c;
  return n;
}

std::string job_counts::text() const {
  std::vector<std::string> parts;
  for (auto type : roles_in_name_order)
    if (auto it = count.find(type); it != count.end()) parts.push_back(fmt::format("{}={}", to_string(type), it->second));
  return fmt::format("{}", fmt::join(parts, ","));
}

job_counts parse_job_counts(const std::string& text) {
  job_counts j;
  std::stringstream in{text};
  std::string item;
  auto bad = [&](const std::string& why) { fail(fmt::format("--jobs '{}': {}", text, why)); };
  while (std::getline(in, item, ',')) {
    auto eq = item.find('=');
    if (eq == std::string::npos) bad(fmt::format("'{}' is not ROLE=COUNT, as in ps=2", item));
    auto name = item.substr(0, eq);
    std::optional<task_type> type;
    for (auto t : roles_in_name_order)
      if (name == to_string(t)) type = t;
    if (!type) bad(fmt::format("unknown role '{}' (chief, evaluator, ps, worker)", name));
    auto n = detail::whole_number(item.substr(eq + 1), 6);
    if (!n || *n < 1) bad(fmt::format("'{}': the count must be a whole number >= 1", item));
    if (j.count.count(*type)) bad(fmt::format("{} is given twice", name));
    if ((*type == task_type::chief || *type == task_type::evaluator) && *n > 1)
      bad(fmt::format("at most one {}, got {}", name, *n));
    j.count[*type] = static_cast<int>(*n);
  }
  if (text.empty() || text.back() == ',') bad("expected ROLE=COUNT pairs, as in chief=1,ps=2,worker=4");
  if (!j.count.count(task_type::worker)) bad("a cluster needs at least one worker");
  return j;
}

std::vector<std::string> expand_hostlist(const std::string& text) {
  std::vector<std::string> out;
  for (auto& part : split_top_level(text, "hostlist")) {
    if (part.empty() || part.front() == '[')
      fail(fmt::format("hostlist '{}': an empty host name (a ',' too many, or a '[' without a name before it)", text));
    expand_name(part, text, out);
  }
  return out;
}

std::vector<int> expand_tasks_per_node(const std::string& text) {
  std::vector<int> out;
  std::stringstream in{text};
  std::string item;
  auto bad = [&](const std::string& why) { fail(fmt::format("tasks per node '{}': {}", text, why)); };
  while (std::getline(in, item, ',')) {
    auto paren = item.find('(');
    auto count = detail::whole_number(item.substr(0, paren), 6);
    int64_t times = 1;
    if (paren != std::string::npos) {
      if (item.size() < paren + 4 || item.compare(paren, 2, "(x") != 0 || item.back() != ')')
        bad(fmt::format("'{}' is not N or N(xM), as in 3(x2)", item));
      auto t = detail::whole_number(item.substr(paren + 2, item.size() - paren - 3), 6);
      if (!t || *t < 1) bad(fmt::format("'{}': the repeat must be a whole number >= 1", item));
      times = *t;
    }
    if (!count || *count < 1) bad(fmt::format("'{}' is not N or N(xM) with N >= 1", item));
    if (out.size() + static_cast<size_t>(times) > max_hosts) bad(fmt::format("more than {} hosts", max_hosts));
    out.insert(out.end(), static_cast<size_t>(times), static_cast<int>(*count));
  }
  if (out.empty() || text.back() == ',') bad("expected counts, as in 3(x2),2,1");
  return out;
}

rank_layout slurm_layout(std::vector<std::pair<std::string, int>> hosts_and_tasks, const job_counts& jobs,
                         uint16_t port_base) {
  std::sort(hosts_and_tasks.begin(), hosts_and_tasks.end());
  std::vector<task_address> addresses;
  for (auto& [host, n] : hosts_and_tasks)
    for (int k = 0; k < n; ++k) {
      if (port_base + k > 65535) fail(fmt::format("--port-base {}: host {} needs ports up to {}", port_base, host, port_base + k));
      addresses.push_back(task_address{host, static_cast<uint16_t>(port_base + k)});
    }
  return assign_roles(std::move(addresses), jobs, "the Slurm step");
}

rank_layout rank_layout_of(const std::vector<rank_host>& hosts, const job_counts& jobs, uint16_t port_base) {
  bool one_host = std::all_of(hosts.begin(), hosts.end(), [&](const rank_host& h) { return h.identity == hosts[0].identity; });
  std::map<std::string, int> next_port;  // host -> tasks placed on it so far
  std::vector<task_address> addresses;
  for (auto& h : hosts) {
    auto host = one_host ? std::string("127.0.0.1") : h.host;
    int k = next_port[host]++;
    if (port_base + k > 65535) fail(fmt::format("--port-base {}: host {} needs ports up to {}", port_base, host, port_base + k));
    addresses.push_back(task_address{host, static_cast<uint16_t>(port_base + k)});
  }
  return assign_roles(std::move(addresses), jobs, "the MPI launch");
}

// -- this process --------------------------------------------------------------------------

std::string host_identity() {
  auto boot = read_first_line("/proc/sys/kernel/random/boot_id");
  char ns[128] = {};
  auto n = ::readlink("/proc/self/ns/net", ns, sizeof ns - 1);
  return fmt::format("{}/{}", boot, n > 0 ? std::string(ns, static_cast<size_t>(n)) : std::string("net:?"));
}

const std::string* resolver_inputs::get(const std::string& name) const {
  auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

resolver_inputs resolver_inputs::of_this_process() {
  resolver_inputs in;
  for (char** e = environ; e && *e; ++e) {
    std::string kv{*e};
    auto eq = kv.find('=');
    if (eq != std::string::npos) in.env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  if (auto v = in.get("SLURMD_NODENAME"); v && !v->empty()) in.host_names.push_back(*v);
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) == 0 && name[0]) {
    std::string full{name};
    in.host_names.push_back(full);
    if (auto dot = full.find('.'); dot != std::string::npos) in.host_names.push_back(full.substr(0, dot));
  }
  in.identity = host_identity();
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) == 0) {
    for (auto* a = list; a; a = a->ifa_next) {
      if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
      if (!(a->ifa_flags & IFF_UP) || (a->ifa_flags & IFF_LOOPBACK)) continue;
      char text[INET_ADDRSTRLEN] = {};
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof text);
      in.default_address = text;
      break;
    }
    ::freeifaddrs(list);
  }
  return in;
}

// -- resolving -------------------------------------------------------------------------------

resolution resolve_cluster(const resolve_options& opts, const resolver_inputs& in) {
  auto kind = opts.kind;
  auto tf_config = in.get("TF_CONFIG");
  bool has_tf_config = tf_config && !tf_config->empty();
  if (kind == resolver_kind::automatic) {
    if (!opts.cluster_file.empty() && !settings_only(opts.cluster_file))
      kind = resolver_kind::file;
    else if (has_tf_config)
      kind = resolver_kind::tf_config;
    else if (in.get("SLURM_PROCID") && in.get("SLURM_STEP_NUM_TASKS"))
      kind = resolver_kind::slurm;
    else if (in.get("OMPI_COMM_WORLD_RANK") || in.get("PMIX_RANK") || in.get("PMI_RANK"))
      kind = resolver_kind::mpi;
    else
      fail(fmt::format("no cluster: give --cluster FILE, set TF_CONFIG, or start the tasks with srun or mpirun "
                       "(none of TF_CONFIG, SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK is set{})",
                       opts.cluster_file.empty() ? "" : fmt::format("; {} has no \"cluster\"", opts.cluster_file)));
  }
  switch (kind) {
    case resolver_kind::file: {
      if (opts.cluster_file.empty()) fail("--resolver file: give --cluster FILE");
      resolution r;
      r.kind = kind;
      r.source = opts.cluster_file;
      r.cluster = read_cluster_file(opts.cluster_file, opts.tls_from_flags);
      r.task = r.cluster.task;
      return r;
    }
    case resolver_kind::tf_config: {
      if (!has_tf_config) fail("--resolver tf_config: TF_CONFIG is not set");
      if (!opts.cluster_file.empty())
        fail("--cluster and TF_CONFIG both give a cluster: give settings inside TF_CONFIG, or use --resolver file");
      resolution r;
      r.kind = kind;
      r.source = "TF_CONFIG";
      r.cluster = parse_cluster_def(*tf_config, "TF_CONFIG", opts.tls_from_flags, cluster_dialect::tf_config);
      r.task = r.cluster.task;
      return r;
    }
    case resolver_kind::slurm: return resolve_slurm(opts, in);
    case resolver_kind::mpi: return resolve_mpi(opts, in);
    case resolver_kind::automatic: break;
  }
  fail("no resolver");
}

std::string describe_resolution(const resolution& r, const task_id& task) {
  std::vector<std::string> parts;
  for (auto type : roles_in_name_order)
    if (auto n = r.cluster.tasks(type).size(); n > 0) parts.push_back(fmt::format("{} {}", to_string(type), n));
  auto where = r.cluster.listed(task) ? r.cluster.address(task).text() : std::string("no address (outside the map)");
  return fmt::format("task {} of {} at {} (from {})", to_string(task), fmt::join(parts, ", "), where, r.source);
}

}  // namespace actortrain
