#pragma once
// `actortrain bench ...`: benchmarks printed as ratios against a baseline measured in
// the same run (machines are shared and noisy, so absolute numbers only inform).

#include <string>
#include <utility>
#include <vector>

namespace actortrain::tools {

/// The median (0 for none).
double median(std::vector<double> v);

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
/// `actortrain bench cluster [flags]`: the main job embedded against 5 processes on loopback.
int bench_cluster(int argc, char** argv, int first);

}  // namespace actortrain::tools
