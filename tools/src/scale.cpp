// `actortrain scale`: the main job's scaling predicted by the fault simulator with its
// cost model (actortrain/actors/sim/cost_model.hpp): the real coordinator, ps and worker
// logic on simulated time.
//
//   predict    8..256 workers x 1..32 ps shards: samples/s, staleness, busiest shard
//   calibrate  profile the job here, fit the two free parameters on 2 workers + 2 ps
//              processes, print the model's parameters (then frozen in the repository)
//   validate   the calibration, in one run, against measured configurations it was not
//              fitted to (and the frozen model beside it)
#include "scale.hpp"

#include "bench.hpp"
#include "flags.hpp"
#include "plot.hpp"
#include "transport_costs.hpp"

#include <actortrain/actors/jobs/jobs.hpp>
#include <actortrain/actors/sim/cost_model.hpp>
#include <actortrain/actors/sim/simulator.hpp>
#include <actortrain/dataset/all.hpp>
#include <actortrain/model/all.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <unistd.h>


#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace actortrain::tools {

namespace {

namespace ds = actortrain::dataset;
namespace md = actortrain::model;
using clock_type = std::chrono::steady_clock;

struct data {
  std::shared_ptr<const ds::fashion_mnist_arrays> train, test;
};

data load(const std::string& dir) {
  data d;
  d.train = std::make_shared<const ds::fashion_mnist_arrays>(ds::load_fashion_mnist(ds::split::train, dir));
  d.test = std::make_shared<const ds::fashion_mnist_arrays>(ds::load_fashion_mnist(ds::split::test, dir));
  return d;
}

// -- the model's parameters ---------------------------------------------------------------

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(fmt::format("{}: cannot be read", path));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The frozen parameters: in the source tree, else where `make install` put them.
std::string frozen_model_path() {
  for (const char* dir : {ACTORTRAIN_BENCH_SOURCE_DIR, ACTORTRAIN_BENCH_INSTALL_DIR}) {
    auto p = std::string(dir) + "/scaling_model.json";
    if (::access(p.c_str(), R_OK) == 0) return p;
  }
  throw std::runtime_error("scaling_model.json is neither in the source tree nor installed (give --model FILE)");
}

cost_params read_model(const std::string& path) { return cost_params::parse(read_text(path), path); }

// -- the job's own costs, profiled here ------------------------------------------------------

// A worker's CPU per training step (a batch from the pipeline, forward, loss, backward)
// and a shard's CPU per float applied (Adam over every variable at once), each the median
// of `reps` repetitions on one thread.
double step_profile(const data& d, int reps);

void profile(const data& d, int reps, cost_params& p) {
  p.step_seconds = step_profile(d, reps);
  jobs::fashion_mnist_options o;
  o.train_arrays = d.train;
  o.test_arrays = d.test;
  auto j = jobs::fashion_mnist(o);
  auto params = j.structure.initial_parameters(1);
  md::gradient_store grads{j.structure.variables()};  // zeros: the same arithmetic
  size_t floats = 0;
  for (size_t v = 0; v < params.size(); ++v) floats += static_cast<size_t>(params[static_cast<md::variable_id>(v)].size());
  std::vector<double> applies;
  auto opt = j.optimizer->clone();
  std::vector<md::slot_block> slots;
  for (size_t v = 0; v < params.size(); ++v) slots.push_back(opt->make_slots(static_cast<size_t>(params[static_cast<md::variable_id>(v)].size())));
  for (int r = 0; r < reps + 2; ++r) {
    auto t0 = clock_type::now();
    for (size_t v = 0; v < params.size(); ++v) {
      auto id = static_cast<md::variable_id>(v);
      opt->apply_dense(params[id].data(), grads.dense[v].data(), static_cast<size_t>(params[id].size()), slots[v]);
    }
    if (r >= 2) applies.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
  }
  p.apply_seconds_per_float = median(applies) / static_cast<double>(floats);
}

// A step's median time on this thread (as profile() measures it).
double step_profile(const data& d, int reps) {
  jobs::fashion_mnist_options o;
  o.train_arrays = d.train;
  o.test_arrays = d.test;
  auto j = jobs::fashion_mnist(o);
  md::executor exec{j.structure};
  auto params = j.structure.initial_parameters(1);
  md::gradient_store grads{j.structure.variables()};
  auto it = j.train(ds::input_context{1, 0, 1}).iterate(0);
  std::vector<double> steps;
  md::matrix d_out;
  for (int r = 0; r < reps + 2; ++r) {
    auto t0 = clock_type::now();
    auto b = it->next();
    if (!b) it = j.train(ds::input_context{1, 0, 1}).iterate(static_cast<uint64_t>(r)), b = it->next();
    grads.zero();
    const auto& out = exec.forward(params, b->features, true, static_cast<uint64_t>(r));
    j.loss->compute(out, b->labels, &d_out);
    exec.backward(params, d_out, grads);
    if (r >= 2) steps.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
  }
  return median(steps);
}

// -- simulated and measured runs ------------------------------------------------------------------

// The exchange the model was frozen and validated on: tasks of one step, each step a push
// and a pull of its own. The main job's tasks are of 8 steps (its pulls ride on the pushes
// before them); measured against those, the in-run fit put one worker 22-26% too fast
// (docs/scaling.md, "Tasks of 8 steps"), so every run here keeps tasks of one step.
constexpr int steps_per_task = 1;

struct prediction {
  sim_timing timing;
  double wall_seconds = 0;
  std::string error;
};

// The main job (its defaults: batch 128, Adam, lookahead(6)) on `workers` x `ps` in steady
// state: each pipeline repeats, one epoch of `steps` steps, no validation, no faults.
prediction predict(const data& d, const cost_params& p, int workers, int ps, const std::string& partitioner, int64_t steps,
                   uint64_t seed) {
  jobs::fashion_mnist_options o;
  o.train_arrays = d.train;
  o.test_arrays = d.test;
  o.seed = seed;
  o.steps_per_execution = steps_per_task;
  auto j = jobs::fashion_mnist(o);
  auto inner = j.train;
  j.train = [inner](const ds::input_context& ctx) { return inner(ctx).repeat(); };
  j.fit.epochs = 1;
  j.fit.steps_per_epoch = steps;
  j.fit.validation.reset();
  j.spec.num_workers = workers;
  j.spec.num_ps = ps;
  if (!partitioner.empty() && partitioner != "none") j.spec.partitioner = md::make_partitioner(partitioner);
  sim_options so;
  so.seed = seed;
  so.compare_values = false;
  so.checkpoint_every = 0;
  so.costs = std::make_shared<const cost_params>(p);
  prediction out;
  auto t0 = clock_type::now();
  auto r = simulate(j, so, nullptr);
  out.wall_seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  out.timing = r.timing;
  if (!r.ok()) out.error = r.report();
  return out;
}

struct measured {
  double samples_per_second = 0;
  // The workers' per-step `pull` time: its median and its 10th percentile.
  double pull_seconds = 0, pull_p10_seconds = 0;
};

// The `us.pull` of every step in a metrics file, in seconds, sorted.
std::vector<double> pulls_of(const std::string& metrics) {
  std::ifstream in(metrics);
  std::vector<double> v;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.value("event", "") == "step" && j.contains("us") && j["us"].is_object() &&
        j["us"].contains("pull") && j["us"]["pull"].is_number())
      v.push_back(j["us"]["pull"].get<double>() * 1e-6);
  }
  std::sort(v.begin(), v.end());
  return v;
}

// One run of `actortrain launch` on loopback: its samples/s (training time from the
// chief's metrics file, evaluation excluded) and its workers' median and 10th
// percentile pull time.
measured measure_once(int workers, int ps, int epochs, uint64_t seed) {
  auto metrics = fmt::format("/tmp/actortrain-scale-{}.jsonl", ::getpid());
  std::remove(metrics.c_str());
  struct remover {
    std::string path;
    ~remover() { std::remove(path.c_str()); }
  } gone{metrics};
  std::vector<std::string> cmd{"actortrain", "launch",  "--example", "fashion_mnist", "--ps", std::to_string(ps),
                               "--workers",  std::to_string(workers), "--",       "--epochs", std::to_string(epochs),
                               "--metrics",  metrics, "--verbose", "0", "--seed", std::to_string(seed),
                               "--steps-per-execution", std::to_string(steps_per_task)};
  if (int rc = run_self(cmd, "/dev/null", false); rc != 0)
    throw std::runtime_error(fmt::format("actortrain launch --ps {} --workers {} failed ({})", ps, workers, rc));
  measured m;
  m.samples_per_second = read_figures(metrics).samples_per_second;
  auto p = pulls_of(metrics);
  if (!p.empty()) {
    m.pull_seconds = p[p.size() / 2];
    m.pull_p10_seconds = p[p.size() / 10];
  }
  return m;
}

// The medians of runs (each figure on its own).
measured median_of(const std::vector<measured>& runs) {
  std::vector<double> v, pulls, p10s;
  for (auto& m : runs) {
    v.push_back(m.samples_per_second);
    if (m.pull_seconds > 0) {  // a run whose metrics held no pulls says nothing of them
      pulls.push_back(m.pull_seconds);
      p10s.push_back(m.pull_p10_seconds);
    }
  }
  return {median(v), median(pulls), median(p10s)};
}

// `rounds` runs of one configuration, seeds seed, seed + 1, ...: their medians.
measured measure(int workers, int ps, int epochs, int rounds, uint64_t seed) {
  std::vector<measured> runs;
  for (int r = 0; r < rounds; ++r) runs.push_back(measure_once(workers, ps, epochs, seed + static_cast<uint64_t>(r)));
  return median_of(runs);
}

std::vector<int> int_list(const std::string& flag, const std::string& text, int lo, int hi) {
  std::vector<int> out;
  std::stringstream s(text);
  std::string item;
  while (std::getline(s, item, ',')) {
    char* end = nullptr;
    long x = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || x < lo || x > hi)
      throw usage_error(fmt::format("--{}: '{}' is not a whole number from {} to {}", flag, item, lo, hi));
    out.push_back(static_cast<int>(x));
  }
  if (out.empty()) throw usage_error(fmt::format("--{}: empty list", flag));
  return out;
}

// Link rates in Gbit/s, comma-separated, each 0 (unlimited) or above.
std::vector<double> rate_list(const std::string& flag, const std::string& text) {
  std::vector<double> out;
  std::stringstream s(text);
  std::string item;
  while (std::getline(s, item, ',')) {
    char* end = nullptr;
    errno = 0;
    double x = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || errno == ERANGE || !(x >= 0) || x > 1e6)
      throw usage_error(fmt::format("--{}: '{}' is not a rate in Gbit/s from 0 (unlimited) to 1000000", flag, item));
    out.push_back(x);
  }
  if (out.empty()) throw usage_error(fmt::format("--{}: empty list", flag));
  return out;
}

double busiest(const sim_timing& t) {
  double b = 0;
  for (auto x : t.ps_load) b = std::max(b, x);
  return b;
}

}  // namespace

int scale_command(int argc, char** argv, int first) {
  std::string mode = argc > first ? argv[first] : "";
  if (mode != "predict" && mode != "calibrate" && mode != "validate" && mode != "--help" && mode != "-h")
    throw usage_error(mode.empty() ? "actortrain scale: which? predict, calibrate or validate (see --help)"
                                   : fmt::format("actortrain scale: unknown mode '{}' (predict, calibrate, validate)", mode));
  std::string model_file, workers_text = "8,16,32,64,128,256", ps_text = "1,2,4,8,16,32", partitioner = "none", out_dir,
    measured_text;
  std::string data_dir = ds::fashion_mnist_default_dir;
  int64_t steps_per_worker = 8;
  int rounds = 3, epochs = 3, reps = 200, cores = 0;
  std::string bandwidth_text;
  double latency_us = 0;
  bool tls = false, tcp = false, across_namespaces = false, one_host = false;
  uint64_t seed = 1;
  flags f{"actortrain scale predict|calibrate|validate",
          "The main job's (fashion_mnist, asynchronous, lookahead(6); tasks of one step, as the model was frozen on)\n"
          "scaling on simulated time: the fault simulator runs the real coordinator, ps and worker logic, and a\n"
          "cost model (CPU cores, links, single-threaded actors) delays every message by what it costs\n"
          "(docs/scaling.md).\n"
          "  predict    every --workers x --ps: predicted samples/s, mean staleness, the busiest ps shard's CPU load\n"
          "  calibrate  profile the job here (a step's CPU, the apply's CPU per float), measure 2 workers + 2 ps as\n"
          "             processes on loopback, fit the CPU per byte moved on the critical path and in the background\n"
          "             so the simulation's samples/s and pull time match, print the parameters as JSON\n"
          "             (tools/bench/scaling_model.json holds the frozen ones)\n"
          "  validate   measure 2 workers + 2 ps, 1 + 1, 1 + 2 and 2 + 1 as processes on loopback, round by round;\n"
          "             calibrate on 2 + 2 of this run (the machine's speed moves between runs) and print the\n"
          "             predictions of the other three beside what was measured, and the frozen model's; exit 1\n"
          "             when one of the three is off by more than 20%"};
  f.add("model", model_file, "the cost model's parameters (JSON; default: the frozen tools/bench/scaling_model.json)")
    .add("workers", workers_text, "predict: worker counts, comma-separated")
    .add("ps", ps_text, "predict: ps shard counts, comma-separated")
    .add("partitioner", partitioner,
         "how variables are split over the shards (none: whole variables round-robin, as the job runs; e.g. "
         "fixed_shards(32) to spread each over every shard)")
    .add("steps-per-worker", steps_per_worker, "simulated steps per worker (the run has at least 469 steps in all, one epoch)", range<int64_t>{1, 1000})
    .add("cores", cores, "predict: CPU cores per host (0: the model's, 2)", range<int>{0, 4096})
    .add("one-host", one_host,
         "predict: every process shares one host's cores, as on this machine (default: a host per process)")
    .add("bandwidth", bandwidth_text,
         "predict: each process's link in Gbit/s, each way (0: unlimited; default: the model's); a comma-separated "
         "list gives a table per rate, with --tls and --tcp measured once for all")
    .add("tls", tls,
         "predict: every byte between processes also pays TLS's CPU at each end, as between hosts (a TLS 1.3 "
         "session's beyond plain TCP's, measured here)")
    .add("tcp", tcp,
         "predict: between hosts, where there is no shared memory: every byte between processes also pays TCP's "
         "CPU at each end beyond the copy shared memory makes (measured here, on loopback or with --netns), and "
         "a message streams (its CPU at both ends overlaps its time on the link)")
    .add("netns", across_namespaces,
         "predict: measure --tcp and --tls between two network namespaces on a bridge instead of on loopback, "
         "as between tools/bench/netns_cluster's hosts: the veth hops and the bridge cost CPU too (root)")
    .add("latency-us", latency_us, "predict: one-way latency between processes in microseconds (default: the model's)",
         range<double>{0, 1e7})
    .add("rounds", rounds, "calibrate, validate: measured runs per configuration (median)", range<int>{1, 100})
    .add("measured", measured_text,
         "calibrate: refit the model's two fitted parameters to these figures of 2 workers + 2 ps, "
         "SAMPLES_PER_S,PULL_US (as a calibration prints them), keeping its profiled ones: nothing is measured")
    .add("epochs", epochs, "calibrate, validate: epochs of each measured run", range<int>{1, 100})
    .add("reps", reps, "calibrate, validate: repetitions of the profile (median)", range<int>{5, 100000})
    .add("seed", seed, "the job's seed")
    .add("out", out_dir, "predict: also write scaling.dat, scaling.gp and scaling.png (gnuplot) into this directory")
    .add("data-dir", data_dir, "the Fashion-MNIST files");
  if (!f.parse(argc, argv, mode == "--help" || mode == "-h" ? first : first + 1)) return 0;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress as it comes, also into a file
  // Bad input first, before the data is read. calibrate and validate measure processes
  // on this machine's loopback, as the job runs: what only a prediction can vary is refused.
  if (mode != "predict")
    for (const char* only :
         {"cores", "one-host", "bandwidth", "latency-us", "tls", "tcp", "netns", "partitioner", "workers", "ps", "out"})
      if (f.given(only)) throw usage_error(fmt::format("--{} is for predict only (see --help)", only));
  if (mode != "calibrate" && f.given("measured")) throw usage_error("--measured is for calibrate only (see --help)");
  if (across_namespaces && !tls && !tcp) throw usage_error("--netns says where --tcp and --tls are measured: give one");
  if (across_namespaces && ::geteuid() != 0) throw usage_error("--netns makes network namespaces: it needs root");
  auto frozen = model_file.empty() ? frozen_model_path() : model_file;
  const auto frozen_params = read_model(frozen);
  const auto ws = int_list("workers", workers_text, 1, 4096);
  const auto pss = int_list("ps", ps_text, 1, 1024);
  const auto rates = f.given("bandwidth") ? rate_list("bandwidth", bandwidth_text) : std::vector<double>{};
  if (rates.size() > 1 && !out_dir.empty()) throw usage_error("--out plots one --bandwidth: give one rate");
  std::vector<int> given_figures;
  if (!measured_text.empty()) {
    given_figures = int_list("measured", measured_text, 1, 100000000);
    if (given_figures.size() != 2)
      throw usage_error(fmt::format("--measured: '{}' is not SAMPLES_PER_S,PULL_US", measured_text));
  }
  if (!partitioner.empty() && partitioner != "none") (void)md::make_partitioner(partitioner);
  auto d = load(data_dir);
  auto adjust = [&](cost_params p) {
    if (f.given("latency-us")) p.latency_seconds = latency_us * 1e-6;
    if (cores > 0) p.cores = cores;
    p.one_host = mode != "predict" || one_host;
    return p;
  };
  auto steps_for = [&](int workers) { return std::max<int64_t>(469, steps_per_worker * workers); };

  // Fits the model's two free parameters (p's CPU per byte, on the critical path and in
  // the background) to figures of 2 workers + 2 ps; `at` is the fitted simulation.
  auto fit = [&](cost_params& p, const measured& m, prediction& at) {
    // Two free parameters, two figures of the one configuration. The pulls show the CPU
    // per byte on the critical path (the sender's and the receiver's copies); the
    // samples/s show all the CPU the processes burn, on the critical path or not: given
    // the CPU per byte on the path, the rest is CPU per byte in the background (the data
    // plane's reader and writer threads). For a CPU per byte on the path, bisect the
    // background one until the simulated samples/s match (they fall as it grows); bisect
    // the one on the path until the simulated pulls take as long as measured (median;
    // at the same samples/s they grow with it). The CPU per message (on the path and in
    // the background) is the model file's, assumed.
    auto fit_background = [&](cost_params q, prediction& at) {
      double lo = 0, hi = 4e-9;
      q.background_byte_seconds = lo;
      at = predict(d, q, 2, 2, partitioner, steps_for(2), seed);
      if (!at.error.empty()) throw std::runtime_error("the simulation failed:\n" + at.error);
      if (at.timing.samples_per_second() < m.samples_per_second) return -1.0;  // too slow already
      for (int i = 0; i < 11; ++i) {
        q.background_byte_seconds = (lo + hi) / 2;
        at = predict(d, q, 2, 2, partitioner, steps_for(2), seed);
        (at.timing.samples_per_second() > m.samples_per_second ? lo : hi) = q.background_byte_seconds;
      }
      if (lo > 0.999 * 4e-9) throw std::runtime_error("the fit needs more than 4 ns of background CPU per byte: no fit");
      q.background_byte_seconds = (lo + hi) / 2;
      at = predict(d, q, 2, 2, partitioner, steps_for(2), seed);
      return q.background_byte_seconds;
    };
    double b_lo = 1e-12, b_hi = 1e-8;
    for (int i = 0; i < 9; ++i) {
      p.byte_seconds = std::sqrt(b_lo * b_hi);
      double bg = fit_background(p, at);
      if (bg < 0 || at.timing.pull_seconds > m.pull_seconds)
        b_hi = p.byte_seconds;
      else
        b_lo = p.byte_seconds;
    }
    p.byte_seconds = std::sqrt(b_lo * b_hi);
    p.background_byte_seconds = fit_background(p, at);
    if (p.background_byte_seconds < 0) {
      p.byte_seconds = b_lo;
      p.background_byte_seconds = fit_background(p, at);
    }
    if (p.background_byte_seconds < 0) throw std::runtime_error("no background CPU makes the simulation as fast as measured");
  };

  if (mode == "calibrate") {
    cost_params p = frozen_params;  // the assumptions (message CPU, latency) it keeps
    p.one_host = true;
    p.cores = static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
    if (measured_text.empty()) {
      profile(d, reps, p);
      std::printf("profiled here: a step %.1f us of CPU, the apply %.3f ns per float\n", p.step_seconds * 1e6,
                  p.apply_seconds_per_float * 1e9);
    } else {
      p.cores = frozen_params.cores;  // a refit of the model's own measurements
      std::printf("from %s: a step %.1f us of CPU, the apply %.3f ns per float\n", frozen.c_str(), p.step_seconds * 1e6,
                  p.apply_seconds_per_float * 1e9);
    }
    measured m;
    if (measured_text.empty()) {
      m = measure(2, 2, epochs, rounds, seed);
    } else {
      const auto& v = given_figures;
      m.samples_per_second = v[0];
      m.pull_seconds = m.pull_p10_seconds = v[1] * 1e-6;
    }
    if (m.pull_seconds <= 0) throw std::runtime_error("the measured runs' metrics hold no pull times (us.pull)");
    if (measured_text.empty())
      std::printf("measured: 2 workers + 2 ps as processes, %.0f samples/s; a step's pulls took %.0f us (median), %.0f us "
                  "(10th percentile) (medians of %d runs)\n",
                  m.samples_per_second, m.pull_seconds * 1e6, m.pull_p10_seconds * 1e6, rounds);
    else
      std::printf("given (--measured): 2 workers + 2 ps, %.0f samples/s, pulls of %.0f us (median)\n",
                  m.samples_per_second, m.pull_seconds * 1e6);
    prediction at;
    fit(p, m, at);
    std::printf("fitted: %.3f ns of CPU per byte on the critical path and %.3f ns in the background, at each end; "
                "simulated %.0f samples/s, pulls %.0f us (median)\n",
                p.byte_seconds * 1e9, p.background_byte_seconds * 1e9, at.timing.samples_per_second(),
                at.timing.pull_seconds * 1e6);
    std::printf("%s\n", p.to_json().c_str());
    return 0;
  }

  cost_params p = adjust(frozen_params);
  const auto costs = measure_transport_costs(tcp, tls, across_namespaces);
  const double tls_cost = costs.tls, tcp_cost = costs.tcp;
  p.byte_seconds += tls_cost + tcp_cost;
  p.streamed = tcp;
  if (mode == "validate") {
    // The machine's speed moves between runs by as much as the goal allows (16-19% in
    // an hour, docs/scaling.md). So the model is calibrated again in this run (the profile, and the fit on
    // 2 workers + 2 ps measured in the same rounds as the rest) and judged on the
    // configurations it was not fitted to. The frozen model's predictions are printed
    // beside them.
    struct config {
      int workers, ps;
    };
    const std::vector<config> configs{{2, 2}, {1, 1}, {1, 2}, {2, 1}};
    cost_params here = frozen_params;  // its assumptions (message CPU, latency)
    here.one_host = true;
    here.cores = static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
    profile(d, reps, here);
    std::printf("profiled here: a step %.1f us of CPU, the apply %.3f ns per float (frozen: %.1f us, %.3f ns)\n",
                here.step_seconds * 1e6, here.apply_seconds_per_float * 1e9, p.step_seconds * 1e6,
                p.apply_seconds_per_float * 1e9);
    // Round by round, every configuration once per round, so that the machine's drift
    // during the run falls on all of them alike.
    std::vector<std::vector<measured>> runs(configs.size());
    for (int r = 0; r < rounds; ++r)
      for (size_t i = 0; i < configs.size(); ++i)
        runs[i].push_back(measure_once(configs[i].workers, configs[i].ps, epochs, seed + static_cast<uint64_t>(r)));
    auto fitted_on = median_of(runs[0]);
    if (fitted_on.pull_seconds <= 0) throw std::runtime_error("the measured runs' metrics hold no pull times (us.pull)");
    prediction at;
    fit(here, fitted_on, at);
    std::printf("fitted on 2 workers + 2 ps of this run (%.0f samples/s, pulls %.0f us): %.3f ns of CPU per byte on "
                "the critical path, %.3f ns in the background (frozen: %.3f, %.3f)\n",
                fitted_on.samples_per_second, fitted_on.pull_seconds * 1e6, here.byte_seconds * 1e9,
                here.background_byte_seconds * 1e9, p.byte_seconds * 1e9, p.background_byte_seconds * 1e9);
    std::printf("Processes on loopback, %d epochs, median of %d rounds, the configurations alternated:\n", epochs, rounds);
    std::printf("%-8s %-4s %10s %10s %8s %10s %8s %9s %9s\n", "workers", "ps", "measured", "predicted", "error", "frozen",
                "error", "pull us", "predicted");
    bool all = true;
    for (size_t i = 0; i < configs.size(); ++i) {
      auto c = configs[i];
      auto m = median_of(runs[i]);
      auto pr = predict(d, here, c.workers, c.ps, partitioner, steps_for(c.workers), seed);
      auto fr = predict(d, p, c.workers, c.ps, partitioner, steps_for(c.workers), seed);
      if (!pr.error.empty() || !fr.error.empty())
        throw std::runtime_error("the simulation failed:\n" + pr.error + fr.error);
      double e = pr.timing.samples_per_second() / m.samples_per_second - 1;
      double ef = fr.timing.samples_per_second() / m.samples_per_second - 1;
      bool fitted = i == 0;
      all = all && (fitted || std::abs(e) <= 0.2);
      std::printf("%-8d %-4d %10.0f %10.0f %+7.1f%% %10.0f %+7.1f%% %9.0f %9.0f%s\n", c.workers, c.ps,
                  m.samples_per_second, pr.timing.samples_per_second(), e * 100, fr.timing.samples_per_second(), ef * 100,
                  m.pull_seconds * 1e6, pr.timing.pull_seconds * 1e6, fitted ? "  (fitted)" : "");
      std::fflush(stdout);
    }
    std::printf("goal: every held-out configuration within 20%%: %s\n", all ? "met" : "NOT MET");
    return all ? 0 : 1;
  }

  auto plot = [&](const std::string& dat) {
    std::string script =
      "set multiplot layout 1,2 title 'fashion_mnist, predicted on simulated time'\n"
      "set logscale x 2\nset xlabel 'workers'\nset key left top\nset grid\n"
      "set ylabel 'samples/s'\n"
      "plot for [i=0:" + std::to_string(pss.size() - 1) + "] DATA index i using 1:3 with linespoints lw 2 "
      "title sprintf('%d ps', word('" + [&] {
        std::string s;
        for (int ps : pss) s += std::to_string(ps) + " ";
        return s;
      }() + "', i+1) + 0)\n"
      "set ylabel 'mean staleness'\n"
      "plot for [i=0:" + std::to_string(pss.size() - 1) + "] DATA index i using 1:4 with linespoints lw 2 notitle\n"
      "unset multiplot\n";
    auto png = render_figure(out_dir, "scaling", dat, script);
    std::printf("wrote %s\n", png.c_str());
  };
  // predict: a table per link rate (the transport's costs above measured once for all)
  const double model_rate = p.bandwidth;
  for (double gbit : rates.empty() ? std::vector<double>{model_rate * 8 / 1e9} : rates) {
    p.bandwidth = rates.empty() ? model_rate : gbit * 1e9 / 8;
    std::printf("The main job predicted on simulated time (%s; %s, %d cores %s%s%s%s):\n", frozen.c_str(),
                p.bandwidth > 0 ? fmt::format("links {:.3g} Gbit/s", gbit).c_str() : "links unlimited", p.cores,
                p.one_host ? "shared by every process" : "per process",
                tls ? fmt::format("; TLS {:.3f} ns per byte", tls_cost * 1e9).c_str() : "",
                tcp ? fmt::format("; TCP {:.3f} ns per byte", tcp_cost * 1e9).c_str() : "",
                across_namespaces ? ", measured across namespaces" : "");
    std::printf("%-8s %-4s %14s %10s %10s %10s %10s\n", "workers", "ps", "samples/s", "staleness", "busiest", "pull us",
                "wall s");
    std::string dat = "# workers ps samples_per_second mean_staleness busiest_shard_load\n";
    for (int ps : pss) {
      for (int w : ws) {
        auto pr = predict(d, p, w, ps, partitioner, steps_for(w), seed);
        if (!pr.error.empty())
          throw std::runtime_error(fmt::format("the simulation of {} workers, {} ps failed:\n{}", w, ps, pr.error));
        std::printf("%-8d %-4d %14.0f %10.2f %9.0f%% %10.0f %10.1f\n", w, ps, pr.timing.samples_per_second(),
                    pr.timing.mean_staleness, busiest(pr.timing) * 100, pr.timing.pull_seconds * 1e6, pr.wall_seconds);
        std::fflush(stdout);
        dat += fmt::format("{} {} {:.6g} {:.6g} {:.6g}\n", w, ps, pr.timing.samples_per_second(),
                           pr.timing.mean_staleness, busiest(pr.timing));
      }
      dat += "\n\n";  // a gnuplot index per ps count
    }
    if (!out_dir.empty()) plot(dat);
  }
  return 0;
}

}  // namespace actortrain::tools
