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

}  // namespace actortrain::tools
