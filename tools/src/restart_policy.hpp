#pragma once
// Which ended task `actortrain launch` restarts: Kubeflow's ExitCode restart policy,
// which the tasks' own exit statuses follow (actortrain/actors/net/process.hpp,
// exit_status). CAF-free and pure, with its own unit test.

namespace actortrain::tools {

/// True for a wait status (waitpid's) worth a restart: killed by SIGINT, SIGKILL or
/// SIGTERM, or exited 130, 137, 143 (a shell's report of those) or 138 ("retry me").
/// False for success, exit 1 (the job failed), 2 (bad input), any other status, and a
/// crash (SIGSEGV, SIGABRT, ...), which would happen again.
bool retryable(int wait_status);

}  // namespace actortrain::tools
