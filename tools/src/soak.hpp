#pragma once
// `actortrain soak`: the fault simulator over many seeds.

namespace actortrain::tools {

/// `actortrain soak [flags]`; returns the process exit code (1 on any violation).
int soak(int argc, char** argv, int first);

}  // namespace actortrain::tools
