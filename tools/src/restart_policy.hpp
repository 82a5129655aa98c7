#pragma once
#include <string>

// Which ended task `actortrain launch` restarts: Kubeflow's ExitCode restart policy,
// which the tasks' own exit statuses follow (actortrain/actors/net/process.hpp,
// exit_status). CAF-free and pure, with its own unit test.

namespace actortrain::tools {

/// True for a wait status (waitpid's) worth a restart: killed by SIGINT, SIGKILL or
/// SIGTERM, or exited 130, 137, 143 (a shell's report of those) or 138 ("retry me").
/// False for success, exit 1 (the job failed), 2 (bad input), any other status, and a
/// crash (SIGSEGV, SIGABRT, ...), which would happen again.
bool retryable(int wait_status);

/// After the job's end (its coordinator's task exited 0), whether a task that has no
/// part in that end may be stopped, or end retryable, without failing the job: a worker
/// or ps task (`task` as "worker:1", "ps:0") that launch restarted or killed since it
/// was first started. The coordinator ended well, so it no longer needed that task;
/// what a ps applied is in the ledger its earlier life wrote, if it wrote one (a ps
/// that never held a partition writes none); `actortrain ledger check` reads them, and
/// fails on one that is missing. Never the chief or
/// the evaluator, nor a task that failed without launch's hand in it.
bool excused_after_end(bool job_done, const std::string& task, bool restarted_or_killed);

}  // namespace actortrain::tools
