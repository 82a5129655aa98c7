#pragma once
// The tools' names for the library's command-line layer (actortrain/actors/cli/flags.hpp),
// which every program of the project parses its flags with.
#include <actortrain/actors/cli/flags.hpp>

namespace actortrain::tools {

using cli::flags;
using cli::range;
using cli::run_main;
using cli::usage_error;

}  // namespace actortrain::tools
