#include "restart_policy.hpp"

#include <signal.h>
#include <sys/wait.h>

namespace actortrain::tools {

bool retryable(int status) {
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return sig == SIGINT || sig == SIGKILL || sig == SIGTERM;
  }
  if (!WIFEXITED(status)) return false;
  int code = WEXITSTATUS(status);
  return code == 130 || code == 137 || code == 143 || code == 138;
}

bool excused_after_end(bool job_done, const std::string& task, bool restarted_or_killed) {
  bool role = task.rfind("worker:", 0) == 0 || task.rfind("ps:", 0) == 0;
  return job_done && role && restarted_or_killed;
}

}  // namespace actortrain::tools
