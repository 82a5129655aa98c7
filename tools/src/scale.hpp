#pragma once
// `actortrain scale predict|calibrate|validate`: the main job's scaling predicted on
// simulated time by the fault simulator with its cost model (docs/scaling.md).
namespace actortrain::tools {
/// Returns the process exit code.
int scale_command(int argc, char** argv, int first);
}  // namespace actortrain::tools
