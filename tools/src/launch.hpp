#pragma once
// `actortrain node` and `actortrain launch` (see launch.cpp).

namespace actortrain::tools {

/// `actortrain node --example NAME [node flags] [-- example flags]`: one task.
int node_command(int argc, char** argv, int first);
/// `actortrain status [--cluster FILE] [TLS flags]`: a running cluster's live status.
int status_command(int argc, char** argv, int first);
/// `actortrain launch --ps N --workers M --example NAME [-- example flags]`: a whole cluster.
int launch_command(int argc, char** argv, int first);

}  // namespace actortrain::tools
