// What the benchmarks share: medians, time to accuracy, the metrics file's training
// record, and the PyTorch baselines (scripts in tools/bench/, run as child processes).
// No CAF here.

#include "bench.hpp"
#include "flags.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

namespace actortrain::tools {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n == 0 ? 0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

double time_to(const std::vector<std::pair<double, double>>& accuracy_at, double target) {
  for (auto& [t, a] : accuracy_at)
    if (a >= target) return t;
  return NAN;
}

double median_time(std::vector<double> times) {
  if (times.empty()) return NAN;
  const double inf = std::numeric_limits<double>::infinity();
  for (auto& t : times)
    if (std::isnan(t)) t = inf;
  double m = median(std::move(times));
  return std::isinf(m) ? NAN : m;
}

std::string seconds_text(double t) { return std::isnan(t) ? "never" : fmt::format("{:.1f}s", t); }

training_record read_training(const std::string& metrics_file) {
  std::ifstream in{metrics_file};
  if (!in) throw std::runtime_error("no metrics file " + metrics_file);
  training_record out;
  double begin = 0, last_step = 0, staleness = 0, steps = 0;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("event")) continue;
    auto kind = j["event"].get<std::string>();
    double t = j.value("time", 0.0);
    if (kind == "epoch_begin") begin = last_step = t;
    if (kind == "step") {
      last_step = t;
      out.examples += j.value("examples", 0.0);
      staleness += j.value("staleness", 0.0);
      steps += 1;
    }
    if (kind == "epoch") {
      out.trained_seconds += last_step - begin;
      if (j.contains("values") && j["values"].contains("val_accuracy"))
        out.accuracy_at.emplace_back(out.trained_seconds, j["values"]["val_accuracy"].get<double>());
    }
  }
  if (steps > 0) out.mean_staleness = staleness / steps;
  return out;
}

double run_figures::accuracy_after(size_t e) const {
  return accuracy_at.empty() ? 0 : accuracy_at[std::min(std::max<size_t>(e, 1), accuracy_at.size()) - 1].second;
}

run_figures read_figures(const std::string& metrics_file) {
  auto t = read_training(metrics_file);
  run_figures out;
  if (t.trained_seconds > 0) out.samples_per_second = t.examples / t.trained_seconds;
  if (!t.accuracy_at.empty()) out.accuracy = t.accuracy_at.back().second;
  out.staleness = t.mean_staleness;
  out.accuracy_at = t.accuracy_at;
  return out;
}

int run_self(const std::vector<std::string>& args, const std::string& out, bool with_stderr) {
  std::fflush(stdout);  // or the child prints our buffered lines again
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) ::_exit(127);
    ::dup2(fd, 1);
    if (with_stderr) ::dup2(fd, 2);
    ::close(fd);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv("/proc/self/exe", argv.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string tail_of(const std::string& path, size_t bytes) {
  std::ifstream in{path};
  std::stringstream ss;
  ss << in.rdbuf();
  auto s = ss.str();
  return s.size() > bytes ? s.substr(s.size() - bytes) : s;
}

namespace {

// `w` single-quoted for the shell (a ' inside as '\'').
std::string shell_quote(const std::string& w) {
  std::string q = "'";
  for (char c : w) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The last `bytes` of `s`.
std::string tail_text(const std::string& s, size_t bytes) { return s.size() > bytes ? s.substr(s.size() - bytes) : s; }

}  // namespace

std::string torch_script(const std::string& name) {
  std::string path;
  for (const char* dir : {ACTORTRAIN_BENCH_SOURCE_DIR, ACTORTRAIN_BENCH_INSTALL_DIR}) {
    struct stat st{};
    if (::stat((std::string{dir} + "/" + name).c_str(), &st) == 0) {
      path = std::string{dir} + "/" + name;
      break;
    }
  }
  if (path.empty())
    throw std::runtime_error(fmt::format("{} is neither in {} nor in {}", name, ACTORTRAIN_BENCH_SOURCE_DIR,
                                         ACTORTRAIN_BENCH_INSTALL_DIR));
  static const bool importable =  // asked once per process
    std::system("/usr/bin/python3 -c 'import torch.distributed.rpc' >/dev/null 2>&1") == 0;
  if (!importable)
    throw std::runtime_error("/usr/bin/python3 cannot import torch.distributed.rpc (apt-get install python3-torch "
                             "libopenblas0-pthread)");
  // A PyTorch on the reference BLAS trains many times slower: no fair baseline. The
  // scripts' shared module says so (and why) when run as a program: exit 3.
  static const std::string unfair = [&] {
    auto shared = path.substr(0, path.rfind('/')) + "/fashion_mnist_torch.py";
    std::string out;
    FILE* p = ::popen(("/usr/bin/python3 " + shell_quote(shared) + " 2>&1").c_str(), "r");
    if (p == nullptr) return "cannot start /usr/bin/python3 " + shared + " (no process or pipe)";
    char buf[1024];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    int status = ::pclose(p);
    while (!out.empty() && out.back() == '\n') out.pop_back();
    if (status == 0) return std::string();
    if (WIFEXITED(status) && WEXITSTATUS(status) == 3) return out;
    return shared + " failed: " + tail_text(out, 2000);
  }();
  if (!unfair.empty()) throw std::runtime_error(unfair);
  return path;
}

run_figures run_torch(const std::string& script, int epochs, uint64_t seed, const std::vector<std::string>& more) {
  auto log = fmt::format("/tmp/actortrain-bench-{}-torch.log", ::getpid());
  std::string cmd = "/usr/bin/python3 " + shell_quote(script) + fmt::format(" --epochs {} --seed {}", epochs, seed);
  for (auto& w : more) cmd += " " + shell_quote(w);
  cmd += " 2>" + shell_quote(log);
  std::fflush(stdout);
  FILE* out = ::popen(cmd.c_str(), "r");
  if (out == nullptr) throw std::runtime_error("cannot start " + cmd);
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, out)) > 0;) text.append(buf, n);
  int status = ::pclose(out);
  auto last = text.rfind("\n{", text.size() > 1 ? text.size() - 2 : 0);
  last = last == std::string::npos ? text.find('{') : last + 1;
  auto j = last == std::string::npos ? nlohmann::json{} : nlohmann::json::parse(text.substr(last), nullptr, false);
  bool ok = status == 0 && j.is_object() && j.contains("samples_per_second") && j.contains("accuracy") &&
            j.contains("accuracy_at") && j["samples_per_second"].is_number() && j["accuracy"].is_number() &&
            j["accuracy_at"].is_array();
  run_figures r;
  if (ok) {
    r.samples_per_second = j["samples_per_second"].get<double>();
    r.accuracy = j["accuracy"].get<double>();
    r.staleness = j.contains("staleness") && j["staleness"].is_number() ? j["staleness"].get<double>() : NAN;
    for (auto& p : j["accuracy_at"]) {
      ok = ok && p.is_array() && p.size() == 2 && p[0].is_number() && p[1].is_number();
      if (ok) r.accuracy_at.emplace_back(p[0].get<double>(), p[1].get<double>());
    }
  }
  if (!ok) throw std::runtime_error(fmt::format("the PyTorch baseline failed ({}):\n{}", cmd, tail_of(log, 2000)));
  std::remove(log.c_str());
  return r;
}

std::vector<int64_t> parse_counts(const std::string& text, const std::string& flag, int64_t lo, int64_t hi,
                                  int64_t multiple, const std::string& what, const std::string& none) {
  std::vector<int64_t> out;
  std::stringstream in{text};
  for (std::string item; std::getline(in, item, ',');) {
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || errno == ERANGE || v < lo || v > hi || v % multiple != 0)
      throw cli::usage_error(fmt::format("{}: '{}' is not {}", flag, item, what));
    out.push_back(v);
  }
  if (out.empty()) throw cli::usage_error(fmt::format("{}: {}", flag, none));
  return out;
}

}  // namespace actortrain::tools
