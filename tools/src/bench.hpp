#pragma once
// `actortrain bench ...`: benchmarks printed as ratios against a baseline measured in
// the same run (machines are shared and noisy, so absolute numbers only inform).

namespace actortrain::tools {

/// `actortrain bench fashion-mnist [flags]`; returns the process exit code.
int bench_fashion_mnist(int argc, char** argv, int first);

}  // namespace actortrain::tools
