#pragma once
// `actortrain bench ...`: benchmarks printed as ratios against a baseline measured in
// the same run (machines are shared and noisy, so absolute numbers only inform).

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace actortrain::tools {

/// The median (0 for none).
double median(std::vector<double> v);

/// Time to accuracy, the headline: the training seconds of the first of
/// `accuracy_at`'s (training seconds, test accuracy) points at or above `target`; NaN
/// when none is (not reached).
double time_to(const std::vector<std::pair<double, double>>& accuracy_at, double target);
/// The median of times where NaN (not reached) ranks after every time: NaN when the
/// median falls on one (more than half of them, or the upper middle of an even count).
double median_time(std::vector<double> times);
/// "12.3s", or "never" for NaN.
std::string seconds_text(double t);

/// One training run's figures, whatever ran it: samples/s over training time, the final
/// test accuracy, (training seconds, test accuracy) after each epoch, and the mean
/// staleness when it has one (NaN for Hogwild, which has no versions).
struct run_figures {
  double samples_per_second = 0;
  double accuracy = 0;
  std::vector<std::pair<double, double>> accuracy_at;
  double staleness = 0;

  /// The test accuracy after epoch `e` (from 1), or after the last one when it ran fewer.
  double accuracy_after(size_t e) const;
};
/// A cluster's run from its metrics file (read_training): samples/s over the training
/// time, the last epoch's accuracy, the per-epoch accuracies, the mean staleness.
run_figures read_figures(const std::string& metrics_file);

/// Runs this program (/proc/self/exe) with `args` (args[0] its name) and waits: its
/// stdout, and with `with_stderr` its stderr too, go to the file `out`. Returns the exit
/// code, or 128 + the signal that killed it. Throws std::runtime_error if it cannot fork.
int run_self(const std::vector<std::string>& args, const std::string& out, bool with_stderr);
/// The last `bytes` of the file at `path` ("" when it cannot be read).
std::string tail_of(const std::string& path, size_t bytes);

/// The PyTorch baseline `name` (pytorch_rpc_ps.py or pytorch_hogwild.py): its path in the
/// source tree, else where `make install` put it; throws std::runtime_error naming why it
/// cannot run here (no script, no python3-torch, or a PyTorch on the reference BLAS, which
/// would be no fair baseline: fashion_mnist_torch.py's blas_problem).
std::string torch_script(const std::string& name);
/// Runs a PyTorch baseline `script` for `epochs` from `seed` with the flags `more` (each quoted for the
/// shell; the rest at the scripts' defaults: 2 trainers of one thread, batch 128, Adam 0.001);
/// throws std::runtime_error with the tail of its stderr when it fails.
run_figures run_torch(const std::string& script, int epochs, uint64_t seed, const std::vector<std::string>& more = {});

/// What a run's JSON-lines metrics file says about its training: after each epoch, the
/// training seconds so far (each epoch from its epoch_begin to its last applied step, so
/// the evaluation that follows is left out) and that epoch's val_accuracy (when there is
/// one); over the run, the examples of its applied steps and their mean staleness. Lines
/// cut short by a crash are skipped. Throws std::runtime_error if the file cannot be read.
struct training_record {
  std::vector<std::pair<double, double>> accuracy_at;  ///< (training seconds, val_accuracy)
  double trained_seconds = 0;
  double examples = 0;
  double mean_staleness = 0;
};
training_record read_training(const std::string& metrics_file);

/// `actortrain bench fashion-mnist [flags]`; returns the process exit code.
int bench_fashion_mnist(int argc, char** argv, int first);
/// `actortrain bench consistency [flags]`: Fashion-MNIST in each consistency mode.
int bench_consistency(int argc, char** argv, int first);
/// `actortrain bench sparse [flags]`: embedding rows per second, row pulls against whole tables.
int bench_sparse(int argc, char** argv, int first);
/// `actortrain bench transport [flags]`: raw TCP against BASP between two processes.
int bench_transport(int argc, char** argv, int first);

/// Id v of a bench's table keyed by id, scattered over [0, 2^40) by an odd multiplier mod
/// 2^40 (one to one).
/// A comma-separated list of integers, each in [lo, hi] and a multiple of `multiple`, for
/// flag `flag`; throws usage_error "FLAG: 'ITEM' is not WHAT" or "FLAG: NONE" when empty.
std::vector<int64_t> parse_counts(const std::string& text, const std::string& flag, int64_t lo, int64_t hi,
                                  int64_t multiple, const std::string& what, const std::string& none);

inline int64_t scattered_id(int64_t v) {
  return static_cast<int64_t>((static_cast<uint64_t>(v) * 0x9e3779b97f4a7c15ull) & ((uint64_t{1} << 40) - 1));
}

/// A table keyed by id on a real ps shard in a process of its own, pulled and pushed
/// from the bench's process (`bench sparse --processes`).
struct table_bench_options {
  std::vector<int64_t> ids;       ///< distinct ids the table holds, one measurement each
  int dim = 16;
  int64_t batch = 100000;         ///< ids per pull and per push
  std::string optimizer = "adam"; ///< adam (two slots a row) or sgd (none)
  int rounds = 10;
};
/// Runs them; returns the process exit code.
int bench_table_across_processes(const char* argv0, const table_bench_options& o);
/// `actortrain bench cluster [flags]`: the main job embedded against 5 processes on loopback.
int bench_cluster(int argc, char** argv, int first);
/// `actortrain bench faults [flags]`: the main job's goodput under a schedule of kill -9.
int bench_faults(int argc, char** argv, int first);

}  // namespace actortrain::tools
