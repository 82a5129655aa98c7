#pragma once
// `actortrain bench ...`: benchmarks printed as ratios against a baseline measured in
// the same run (machines are shared and noisy, so absolute numbers only inform).

#include <vector>

namespace actortrain::tools {

/// The median (0 for none).
double median(std::vector<double> v);

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
