#pragma once
// The examples `actortrain node` and `actortrain launch` run as clusters of processes:
// each builds an actortrain::job from its own flags (what follows "--"), the same way
// on every task.

#include <actortrain/actors/net/process.hpp>

#include <string>
#include <vector>

namespace actortrain::tools {

struct example_entry {
  std::string name;
  std::string summary;
};

/// The registered examples, in the order --help lists them.
const std::vector<example_entry>& examples();
/// Their names, "linear, fashion_mnist" (for messages).
std::string example_names();

/// Builds example `name` from its flags; throws usage_error for an unknown name or bad
/// flags. With `--help` among the flags, prints the example's flags and returns false.
bool make_example(const std::string& name, const std::vector<std::string>& args, job& out);

}  // namespace actortrain::tools
