#include "plot.hpp"

#include "flags.hpp"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

namespace actortrain::tools {

namespace {

using nlohmann::json;

// -- reading ------------------------------------------------------------------------

struct metrics {
  std::vector<json> events;
  size_t partial = 0;  // lines cut short, skipped
};

bool is_event(const json& j) { return j.is_object() && j.contains("event") && j["event"].is_string(); }

std::string excerpt(const std::string& line) {
  auto s = line.substr(0, 60);
  return line.size() > 60 ? s + "..." : s;
}

metrics read_metrics(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(fmt::format("cannot read {}: {}", path, std::strerror(errno)));
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string text = buf.str();
  metrics m;
  size_t line_no = 0;
  for (size_t at = 0; at < text.size();) {
    auto end = text.find('\n', at);
    bool last_unterminated = end == std::string::npos;
    if (last_unterminated) end = text.size();
    std::string line = text.substr(at, end - at);
    at = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto parsed = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_discarded()) {
      if (!is_event(parsed))
        throw std::runtime_error(fmt::format("{}:{}: not a metrics event (a JSON object with \"event\"): {}", path,
                                             line_no, excerpt(line)));
      m.events.push_back(std::move(parsed));
      continue;
    }
    if (last_unterminated) {  // the writer was killed mid-line
      ++m.partial;
      continue;
    }
    // A cut line that the next run's writer continued: the tail from the last
    // {"..." on is a whole event.
    bool recovered = false;
    for (auto pos = line.rfind("{\""); pos != std::string::npos && pos > 0; pos = line.rfind("{\"", pos - 1)) {
      auto tail = json::parse(line.substr(pos), nullptr, false);
      if (!tail.is_discarded() && is_event(tail)) {
        ++m.partial;
        m.events.push_back(std::move(tail));
        recovered = true;
        break;
      }
    }
    if (!recovered) throw std::runtime_error(fmt::format("{}:{}: not JSON: {}", path, line_no, excerpt(line)));
  }
  if (m.events.empty()) throw std::runtime_error(fmt::format("{}: no metrics events in it", path));
  return m;
}

double num(const json& j, const char* key, double otherwise = std::nan("")) {
  auto i = j.find(key);
  return i != j.end() && i->is_number() ? i->get<double>() : otherwise;
}

double value(const json& e, const char* key) {
  auto v = e.find("values");
  return v != e.end() && v->is_object() ? num(*v, key) : std::nan("");
}

std::string kind(const json& e) { return e["event"].get<std::string>(); }

// -- writing ------------------------------------------------------------------------

std::string cell(double x) { return std::isnan(x) ? std::string("NaN") : fmt::format("{:.9g}", x); }

struct figure {
  std::string name;
  std::string data;    // NAME.dat
  std::string script;  // gnuplot commands after the terminal and output lines
  size_t points = 0;
  std::string skipped;             // why the figure is not drawn (no data for it), or ""
  std::vector<std::string> notes;  // panels or parts left out, and why
};

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) throw std::runtime_error(fmt::format("cannot write {}: {}", path, std::strerror(errno)));
}

// gnuplot quotes: single-quoted strings take '' for a quote.
std::string gp_quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

// Runs gnuplot on `script`; what went wrong, or "".
std::string run_gnuplot(const std::string& script, std::chrono::seconds bound) {
  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) return std::string("pipe: ") + std::strerror(errno);
  pid_t pid = ::fork();
  if (pid < 0) return std::string("fork: ") + std::strerror(errno);
  if (pid == 0) {
    ::dup2(err_pipe[1], 2);
    int null = ::open("/dev/null", O_WRONLY);
    if (null >= 0) ::dup2(null, 1);
    ::execlp("gnuplot", "gnuplot", script.c_str(), static_cast<char*>(nullptr));
    ::_exit(errno == ENOENT ? 127 : 126);
  }
  ::close(err_pipe[1]);
  ::fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);
  std::string err;
  auto deadline = std::chrono::steady_clock::now() + bound;
  int status = 0;
  for (;;) {
    char tmp[512];
    ssize_t n;
    while ((n = ::read(err_pipe[0], tmp, sizeof tmp)) > 0) err.append(tmp, static_cast<size_t>(n));
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      ::close(err_pipe[0]);
      return fmt::format("gnuplot did not finish within {} s", bound.count());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the command's own thread, waiting for a child
  }
  char tmp[512];
  ssize_t n;
  while ((n = ::read(err_pipe[0], tmp, sizeof tmp)) > 0) err.append(tmp, static_cast<size_t>(n));
  ::close(err_pipe[0]);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
    return "gnuplot is not installed (tools/setup installs gnuplot-nox)";
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return "gnuplot failed: " + (err.empty() ? std::string("status ") + std::to_string(WEXITSTATUS(status)) : err);
  return {};
}

// -- the figures --------------------------------------------------------------------

figure epochs_figure(const std::vector<json>& ev) {
  figure f{"epochs", "# epoch loss accuracy val_loss val_accuracy\n", {}, 0, {}, {}};
  bool has_acc = false, has_val = false;
  for (auto& e : ev) {
    if (kind(e) != "epoch") continue;
    double ep = num(e, "epoch") + 1;
    double loss = value(e, "loss"), acc = value(e, "accuracy"), vl = value(e, "val_loss"), va = value(e, "val_accuracy");
    has_acc = has_acc || !std::isnan(acc);
    has_val = has_val || !std::isnan(vl);
    f.data += fmt::format("{} {} {} {} {}\n", cell(ep), cell(loss), cell(acc), cell(vl), cell(va));
    ++f.points;
  }
  if (f.points == 0) {
    f.skipped = "no epoch ended in this run";
    return f;
  }
  // A panel is drawn only for what the run has: no accuracy metric, no accuracy panel.
  bool has_val_acc = false;
  for (auto& e : ev)
    if (kind(e) == "epoch" && !std::isnan(value(e, "val_accuracy"))) has_val_acc = true;
  bool accuracy_panel = has_acc || has_val_acc;
  if (!accuracy_panel) f.notes.push_back("no accuracy metric: the loss panel only");
  f.script = std::string(accuracy_panel ? "set multiplot layout 1,2 title 'per epoch'\n" : "") +
             "set xlabel 'epoch'\nset xtics 1\nset grid\nset key top right\n"
             "set title 'loss'\n"
             "plot DATA using 1:2 with linespoints lw 2 title 'training'" +
             std::string(has_val ? ", DATA using 1:4 with linespoints lw 2 title 'validation'" : "") + "\n";
  if (accuracy_panel)
    f.script += "set title 'accuracy'\nset key bottom right\nplot " +
                std::string(has_acc ? "DATA using 1:3 with linespoints lw 2 title 'training'" : "") +
                std::string(has_acc && has_val_acc ? ", " : "") +
                std::string(has_val_acc ? "DATA using 1:5 with linespoints lw 2 title 'validation'" : "") +
                "\nunset multiplot\n";
  return f;
}

// What timeline_figure marks (mark_class), where: its time and how many steps had been
// applied by then (the x of the steps figure).
struct mark {
  double time;
  size_t step;
  std::string cls, label;
};

const char* mark_class(const json& e);
std::string mark_label(const json& e);

std::vector<mark> marks_of(const std::vector<json>& ev) {
  std::vector<mark> out;
  size_t k = 0;
  for (auto& e : ev) {
    if (kind(e) == "step") ++k;
    else if (auto c = mark_class(e))
      out.push_back(mark{num(e, "time"), k, c, mark_label(e)});
  }
  return out;
}

// Vertical lines at the marks (failures red, recoveries such as a roll-back green,
// checkpoint pauses gray and dashed), x by time or by applied step, and a key entry for
// each kind present. The x range spans the data's [lo, hi] and every mark (a final
// checkpoint comes after the last step), so that no line is drawn outside the plot.
std::string mark_lines(const std::vector<mark>& ms, bool by_time, double lo, double hi, std::string& keys) {
  // A failure and its recovery often fall on one applied step: the failure's line is
  // wider, drawn first, so that both show.
  struct style {
    const char* cls;
    const char* color;
    int dash;
    double width;
    const char* title;
  };
  static const style styles[] = {{"failure", "#d02020", 1, 5, "failure"},
                                 {"recovery", "#20a020", 1, 1.5, "recovery (re-join, roll-back)"},
                                 {"checkpoint", "#909090", 2, 1, "checkpoint"}};
  std::string s;
  for (auto& m : ms) {
    double x = by_time ? m.time : static_cast<double>(m.step);
    if (std::isnan(x)) continue;
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  if (hi > lo) s += fmt::format("set xrange [{}:{}]\n", cell(lo), cell(hi));
  for (auto& st : styles) {
    bool any = false;
    for (auto& m : ms) {
      if (m.cls != st.cls) continue;
      double x = by_time ? m.time : static_cast<double>(m.step);
      if (std::isnan(x)) continue;
      any = true;
      s += fmt::format("set arrow from {}, graph 0 to {}, graph 1 nohead lc rgb '{}' lw {} dt {} back\n", cell(x),
                       cell(x), st.color, st.width, st.dash);
    }
    if (any)
      keys += fmt::format(", NaN with lines lc rgb '{}' lw {} dt {} title '{}'", st.color, st.width, st.dash, st.title);
  }
  return s;
}

figure steps_figure(const std::vector<json>& ev, int smooth) {
  // A centered moving mean (the finite losses within smooth/2 steps on either side): a
  // trailing average lags behind the fast fall of the first steps.
  figure f{"steps", fmt::format("# step time loss smoothed_loss(centered mean over {} steps)\n", smooth), {}, 0, {}, {}};
  std::vector<double> times, losses;
  for (auto& e : ev) {
    if (kind(e) != "step") continue;
    times.push_back(num(e, "time"));
    losses.push_back(num(e, "loss"));
  }
  std::vector<double> sum(losses.size() + 1, 0.0);
  std::vector<size_t> finite(losses.size() + 1, 0);
  for (size_t i = 0; i < losses.size(); ++i) {
    const bool ok = std::isfinite(losses[i]);
    sum[i + 1] = sum[i] + (ok ? losses[i] : 0.0);
    finite[i + 1] = finite[i] + (ok ? 1 : 0);
  }
  const size_t half = static_cast<size_t>(smooth) / 2;
  size_t k = 0;
  for (size_t i = 0; i < losses.size(); ++i) {
    const size_t lo = i >= half ? i - half : 0, hi = std::min(losses.size(), i + half + 1);
    const size_t n = finite[hi] - finite[lo];
    const double mean = n > 0 ? (sum[hi] - sum[lo]) / static_cast<double>(n) : std::nan("");
    f.data += fmt::format("{} {} {} {}\n", ++k, cell(times[i]), cell(losses[i]), cell(mean));
    ++f.points;
  }
  if (f.points == 0) {
    f.skipped = "no step was applied in this run";
    return f;
  }
  std::string keys;
  f.script = "set title 'loss per applied step'\nset xlabel 'applied step'\nset ylabel 'loss'\nset grid\n" +
             mark_lines(marks_of(ev), /*by_time=*/false, 1, static_cast<double>(k), keys) +
             "plot DATA using 1:3 with points pt 7 ps 0.3 lc rgb '#b0c4de' title 'step', "
             "DATA using 1:4 with lines lw 2 lc rgb '#1f4e99' title 'smoothed'" +
             keys + "\n";
  return f;
}

figure throughput_figure(const std::vector<json>& ev, double bin) {
  std::set<int64_t> workers;
  double t0 = std::nan(""), t1 = 0;
  for (auto& e : ev) {
    if (kind(e) != "step") continue;
    double t = num(e, "time");
    if (std::isnan(t)) continue;
    t0 = std::isnan(t0) ? t : std::min(t0, t);
    t1 = std::max(t1, t);
  }
  if (std::isnan(t0)) t0 = 0;
  // The bins tile [t0, t1] exactly: the asked-for width is rounded so that no sliver of a last bin
  // divides its samples by almost nothing.
  double span = t1 - t0;
  if (bin <= 0) bin = std::max(0.05, span / 60);
  int64_t count = span > 0 ? std::max<int64_t>(1, std::llround(span / bin)) : 1;
  if (span > 0) bin = span / static_cast<double>(count);
  std::map<int64_t, std::map<int64_t, double>> per_bin;
  for (auto& e : ev) {
    if (kind(e) != "step") continue;
    double t = num(e, "time");
    if (std::isnan(t)) continue;
    auto w = static_cast<int64_t>(num(e, "worker", -1));
    workers.insert(w);
    auto b = std::clamp<int64_t>(static_cast<int64_t>((t - t0) / bin), 0, count - 1);
    per_bin[b][w] += num(e, "examples", 0);
  }
  figure f{"throughput", fmt::format("# bins of {:.9g} s tiling the run: start time, then samples/s of worker", bin),
           {}, 0, {}, {}};
  for (auto w : workers) f.data += fmt::format(" {}", w);
  f.data += "\n";
  if (!per_bin.empty())
    for (int64_t b = 0; b < count; ++b) {
      f.data += cell(t0 + static_cast<double>(b) * bin);
      auto i = per_bin.find(b);
      for (auto w : workers) {
        double n = i == per_bin.end() || !i->second.count(w) ? 0 : i->second.at(w);
        f.data += " " + cell(n / bin);
      }
      f.data += "\n";
      ++f.points;
    }
  if (f.points == 0) {
    f.skipped = "no step was applied in this run";
    return f;
  }
  std::string keys;
  f.script = "set title 'samples/s per worker'\nset xlabel 'seconds'\nset ylabel 'samples/s'\nset grid\n"
             "set key outside right\n" +
             mark_lines(marks_of(ev), /*by_time=*/true, t0, t0 + static_cast<double>(count) * bin, keys);
  std::string plots;
  size_t col = 2;
  for (auto w : workers)
    plots += fmt::format("{}DATA using 1:{} with steps lw 2 title 'worker {}'", plots.empty() ? "" : ", ", col++, w);
  f.script += "plot " + plots + keys + "\n";
  return f;
}

figure staleness_figure(const std::vector<json>& ev) {
  std::map<int64_t, size_t> hist;
  for (auto& e : ev)
    if (kind(e) == "step") ++hist[static_cast<int64_t>(num(e, "staleness", 0))];
  figure f{"staleness", "# staleness steps\n", {}, 0, {}, {}};
  for (auto& [s, n] : hist) {
    f.data += fmt::format("{} {}\n", s, n);
    ++f.points;
  }
  if (f.points == 0) f.skipped = "no step was applied in this run";
  f.script = "set title 'staleness of the applied steps'\nset xlabel 'staleness (versions behind)'\n"
             "set ylabel 'steps'\nset grid ytics\nset boxwidth 0.8\nset style fill solid 0.6\nset xtics 1\n"
             "plot DATA using 1:2 with boxes lc rgb '#1f4e99' notitle\n";
  return f;
}

// What a timeline mark is: a failure, a recovery, or neither.
const char* mark_class(const json& e) {
  auto k = kind(e);
  if (k == "worker_lost" || k == "ps_lost" || k == "dataset_lost") return "failure";
  if ((k == "worker_joined" && num(e, "generation", 1) > 1) || k == "ps_restored" || k == "dataset_rebuilt" ||
      k == "resumed")
    return "recovery";
  if (k == "steps_requeued") return "requeued";
  if (k == "checkpoint") return "checkpoint";
  return nullptr;
}

std::string mark_label(const json& e) {
  auto k = kind(e);
  if (k == "worker_lost" || k == "worker_joined") return fmt::format("{}:{}", k, num(e, "worker", -1));
  if (k == "ps_lost") return fmt::format("ps_lost:{}", num(e, "ps", -1));
  if (k == "dataset_lost" || k == "dataset_rebuilt") return fmt::format("{}:{}", k, num(e, "pipeline", -1));
  if (k == "steps_requeued") return fmt::format("requeued:{}", num(e, "count", 0));
  return fmt::format("{}@{}", k, num(e, "step", 0));
}

struct timeline {
  figure fig;
  std::string events;  // timeline_events.dat
  size_t failures = 0, recoveries = 0;
};

timeline timeline_figure(const std::vector<json>& ev) {
  timeline t;
  t.fig = figure{"timeline", "# time applied_steps\n", {}, 0, {}, {}};
  t.events = "# time class applied_steps_then label\n";
  size_t applied = 0;
  for (auto& e : ev) {
    double time = num(e, "time");
    if (kind(e) == "step") {
      ++applied;
      t.fig.data += fmt::format("{} {}\n", cell(time), applied);
      ++t.fig.points;
    } else if (auto c = mark_class(e)) {
      // A restore rolls the run back to its checkpoint: the steps after it run again.
      if ((kind(e) == "ps_restored" || kind(e) == "resumed") && e.contains("step"))
        applied = static_cast<size_t>(num(e, "step", static_cast<double>(applied)));
      t.events += fmt::format("{} {} {} {}\n", cell(time), c, applied, mark_label(e));
      t.failures += std::strcmp(c, "failure") == 0;
      t.recoveries += std::strcmp(c, "recovery") == 0;
    }
  }
  if (t.fig.points == 0) t.fig.skipped = "no step was applied in this run";
  t.fig.script =
    "set title 'applied steps over time; failures (red), recoveries (green), re-queued (orange), checkpoints "
    "(gray)'\nset xlabel 'seconds'\nset ylabel 'applied steps'\nset grid\nset key top left\n"
    "plot DATA using 1:2 with lines lw 2 lc rgb '#1f4e99' title 'applied steps', "
    "EVENTS using 1:(strcol(2) eq 'checkpoint' ? $3 : NaN) with points pt 6 ps 1 lc rgb '#909090' title 'checkpoint', "
    "EVENTS using 1:(strcol(2) eq 'requeued' ? $3 : NaN) with points pt 9 ps 1.5 lc rgb '#e08000' title 're-queued', "
    "EVENTS using 1:(strcol(2) eq 'failure' ? $3 : NaN) with impulses lw 2 lc rgb '#d02020' title 'failure', "
    "EVENTS using 1:(strcol(2) eq 'failure' ? $3 : NaN):4 with labels left offset 0.5,0.5 tc rgb '#d02020' "
    "font ',8' notitle, "
    "EVENTS using 1:(strcol(2) eq 'recovery' ? $3 : NaN) with points pt 7 ps 1.5 lc rgb '#20a020' title 'recovery', "
    "EVENTS using 1:(strcol(2) eq 'recovery' ? $3 : NaN):4 with labels left offset 0.5,-0.7 tc rgb '#20a020' "
    "font ',8' notitle\n";
  return t;
}

// Writes NAME.dat, NAME.gp and NAME.png into `dir`.
std::string render(const std::string& dir, const figure& f, const std::string& extra_defs = "") {
  auto dat = dir + "/" + f.name + ".dat", gp = dir + "/" + f.name + ".gp", png = dir + "/" + f.name + ".png";
  write_file(dat, f.data);
  std::string script = "set terminal pngcairo size 1100,600 noenhanced font 'Sans,10'\nset output " + gp_quoted(png) +
                       "\nDATA = " + gp_quoted(dat) + "\n" + extra_defs + "set datafile missing 'NaN'\n" + f.script;
  write_file(gp, script);
  if (auto err = run_gnuplot(gp, std::chrono::seconds(60)); !err.empty())
    throw std::runtime_error(fmt::format("{}: {}", f.name, err));
  struct stat s{};
  if (::stat(png.c_str(), &s) != 0 || s.st_size == 0) throw std::runtime_error(f.name + ": gnuplot wrote no " + png);
  return png;
}

}  // namespace

std::string render_figure(const std::string& dir, const std::string& name, const std::string& data,
                          const std::string& script) {
  figure f;
  f.name = name;
  f.data = data;
  f.script = script;
  return render(dir, f);
}

namespace {

// -- runs -----------------------------------------------------------------------------

// One run's events. Files written since metrics lines carry "id" (metrics_writer) are
// split by it; events of run 0 (workers joining before a fit) go with the writer's next
// run. Older files: a new run at a second run_begin, or where the time goes back
// (another process's clock).
struct run_part {
  std::string id;  // "" in an older file
  uint64_t run = 0;
  std::vector<json> events;
};

std::vector<run_part> split_runs(const std::vector<json>& ev) {
  std::vector<run_part> parts;
  std::map<std::string, size_t> by_id;
  std::map<std::string, std::vector<json>> waiting;  // run 0's events, by writer
  bool legacy_begun = false;
  double legacy_last = -1e300;
  for (auto& e : ev) {
    auto idp = e.find("id");
    auto run = static_cast<uint64_t>(num(e, "run", 0));
    if (idp != e.end() && idp->is_string()) {
      auto id = idp->get<std::string>();
      auto writer = id.substr(0, id.rfind('-'));
      if (run == 0) {
        waiting[writer].push_back(e);
        continue;
      }
      auto [it, fresh] = by_id.emplace(id, parts.size());
      if (fresh) {
        parts.push_back(run_part{id, run, {}});
        auto w = waiting.find(writer);
        if (w != waiting.end()) {
          parts.back().events = std::move(w->second);
          waiting.erase(w);
        }
      }
      parts[it->second].events.push_back(e);
      continue;
    }
    double t = num(e, "time", legacy_last);
    bool begins = kind(e) == "run_begin";
    if (parts.empty() || parts.back().id != "" || (begins && legacy_begun) || t < legacy_last - 1e-9) {
      parts.push_back(run_part{"", run, {}});
      legacy_begun = false;
    }
    if (begins) {
      legacy_begun = true;
      parts.back().run = run;
    }
    legacy_last = t;
    parts.back().events.push_back(e);
  }
  for (auto& [writer, events] : waiting) parts.push_back(run_part{writer + "-0", 0, std::move(events)});
  return parts;
}

// Draws one run's figures into `dir`; a figure without data is left out (and an older
// one of that name removed), saying why.
void plot_run(const run_part& r, const std::string& dir, int smooth, double bin, const std::string& prefix) {
  size_t steps = 0, epoch_ends = 0;
  std::set<std::pair<double, double>> epochs;  // (run, epoch): an epoch redone after a roll-back ends twice
  const json* done = nullptr;
  for (auto& e : r.events) {
    steps += kind(e) == "step";
    if (kind(e) == "run_done") done = &e;
    if (kind(e) == "epoch") {
      ++epoch_ends;
      epochs.emplace(num(e, "run", 0), num(e, "epoch", 0));
    }
  }
  auto tl = timeline_figure(r.events);
  std::string ended = "no run_done line: killed, or still running";
  if (done)
    ended = done->value("failed", false)
              ? "failed: " + done->value("text", std::string("(no reason given)"))
              : std::string("done");
  std::cout << fmt::format("{}{}{} events ({} applied steps, {} epochs, {} failures, {} recoveries; {})", prefix,
                           r.id.empty() ? "" : "id " + r.id + ", ", r.events.size(), steps, epochs.size(),
                           tl.failures, tl.recoveries, ended);
  if (epoch_ends > epochs.size())
    std::cout << fmt::format("; {} epoch end(s) of epochs redone after a roll-back", epoch_ends - epochs.size());
  std::cout << "\n";
  auto leave_out = [&](const figure& fig) {
    for (auto ext : {".png", ".dat", ".gp"}) ::unlink((dir + "/" + fig.name + ext).c_str());
    std::cout << fmt::format("  {}: not drawn: {}\n", fig.name, fig.skipped);
  };
  std::vector<figure> figs{epochs_figure(r.events), steps_figure(r.events, smooth), throughput_figure(r.events, bin),
                           staleness_figure(r.events)};
  for (auto& fig : figs) {
    if (!fig.skipped.empty()) {
      leave_out(fig);
      continue;
    }
    std::cout << fmt::format("  {} ({} points, data {}/{}.dat)", render(dir, fig), fig.points, dir, fig.name);
    for (auto& n : fig.notes) std::cout << "; " << n;
    std::cout << "\n";
  }
  auto events_path = dir + "/timeline_events.dat";
  if (!tl.fig.skipped.empty()) {
    leave_out(tl.fig);
    ::unlink(events_path.c_str());
    return;
  }
  write_file(events_path, tl.events);
  std::cout << fmt::format("  {} ({} points, data {}/timeline.dat and {})\n",
                           render(dir, tl.fig, "EVENTS = " + gp_quoted(events_path) + "\n"), tl.fig.points, dir,
                           events_path);
}

}  // namespace

int plot_command(int argc, char** argv, int first) {
  std::string out;
  int smooth = 50;
  double bin = 0;
  flags f{"actortrain plot METRICS.jsonl",
          "Writes figures of a run from its JSON-lines metrics file (--metrics of the examples,\n"
          "cluster_spec::metrics_file) into --out: epochs (loss and accuracy per epoch, training and\n"
          "validation), steps (loss per applied step, raw and smoothed), throughput (samples/s per\n"
          "worker over time), staleness (histogram) and timeline (applied steps over time with\n"
          "failures, recoveries, re-queued steps and checkpoints marked). Each as NAME.png (gnuplot),\n"
          "NAME.dat (the numbers plotted) and NAME.gp (the script). A figure the run has no data for\n"
          "(no epoch ended) is left out, saying why. Runs appended to one file (told apart by their\n"
          "ids) are drawn each into --out/run-N. Lines cut short by a run killed mid-write are\n"
          "skipped and counted; any other malformed line is an error naming it."};
  f.add("out", out, "directory for the figures (created if missing)")
    .add("smooth", smooth, "steps in the loss's centered moving mean (the steps figure)")
    .add("bin", bin, "seconds per throughput bin, rounded so the bins tile the run (0: a 60th of the run, at least 0.05)");
  if (!f.parse(argc, argv, first)) return 0;
  if (f.positional().size() != 1) throw usage_error("expected one METRICS.jsonl file (see --help)");
  if (out.empty()) throw usage_error("--out DIR is required");
  if (smooth < 1) throw usage_error("--smooth must be >= 1");
  if (bin < 0) throw usage_error("--bin must be >= 0");
  const auto path = f.positional()[0];
  auto m = read_metrics(path);
  if (::mkdir(out.c_str(), 0755) != 0 && errno != EEXIST)
    throw std::runtime_error(fmt::format("cannot create {}: {}", out, std::strerror(errno)));
  auto runs = split_runs(m.events);
  std::cout << fmt::format("plot: {} events from {}", m.events.size(), path);
  if (m.partial > 0) std::cout << fmt::format("; skipped {} partial line(s)", m.partial);
  if (runs.size() > 1) std::cout << fmt::format("; {} runs, each drawn in its own directory", runs.size());
  std::cout << "\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    auto dir = runs.size() == 1 ? out : fmt::format("{}/run-{}", out, i + 1);
    if (runs.size() > 1 && ::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
      throw std::runtime_error(fmt::format("cannot create {}: {}", dir, std::strerror(errno)));
    plot_run(runs[i], dir, smooth, bin, runs.size() > 1 ? fmt::format("run {} of {}: ", i + 1, runs.size()) : "");
  }
  return 0;
}

}  // namespace actortrain::tools
