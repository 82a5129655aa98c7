#pragma once
// `actortrain inspect DIR`: what a checkpoint holds, validated.

namespace actortrain::tools {

/// `actortrain inspect DIR [flags]`; returns the process exit code (1 when DIR holds no
/// committed checkpoint or one fails validation).
int inspect_command(int argc, char** argv, int first);

}  // namespace actortrain::tools
