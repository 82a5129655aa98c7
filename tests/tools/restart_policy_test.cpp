// Which ended task `actortrain launch` restarts, and which it excuses after the job's end
// (restart_policy.hpp): the wait statuses of real children, so the test reads what
// waitpid reports, not hand-made bits.

#include <boost/test/unit_test.hpp>

#include "../../tools/src/restart_policy.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

using actortrain::tools::excused_after_end;
using actortrain::tools::retryable;

namespace {

// The wait status of a child that exits with `code`, or (code < 0) is killed by -code.
int status_of(int code) {
  pid_t pid = ::fork();
  if (pid == 0) {
    if (code < 0) {
      ::signal(-code, SIG_DFL);
      ::raise(-code);
      ::pause();
    }
    ::_exit(code);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

}  // namespace

BOOST_AUTO_TEST_CASE(killed_by_a_stop_signal_or_retry_me_is_restarted) {
  BOOST_TEST(retryable(status_of(-SIGKILL)));
  BOOST_TEST(retryable(status_of(-SIGTERM)));
  BOOST_TEST(retryable(status_of(-SIGINT)));
  BOOST_TEST(retryable(status_of(138)));
  BOOST_TEST(retryable(status_of(137)));  // a shell's report of SIGKILL
  BOOST_TEST(retryable(status_of(143)));
  BOOST_TEST(retryable(status_of(130)));
}

BOOST_AUTO_TEST_CASE(success_failures_and_crashes_are_not) {
  BOOST_TEST(!retryable(status_of(0)));
  BOOST_TEST(!retryable(status_of(1)));    // the job failed for good
  BOOST_TEST(!retryable(status_of(2)));    // bad flags or input
  BOOST_TEST(!retryable(status_of(127)));
  BOOST_TEST(!retryable(status_of(139)));  // Kubeflow: permanent
  BOOST_TEST(!retryable(status_of(-SIGSEGV)));
  BOOST_TEST(!retryable(status_of(-SIGABRT)));
}

// The race it mends: a ps killed by launch's fault schedule as the job ends was
// restarted into a finished job, waited for a chief that was gone, and failed the job.
BOOST_AUTO_TEST_CASE(after_the_end_a_restarted_worker_or_ps_is_excused) {
  BOOST_TEST(excused_after_end(true, "worker:1", true));
  BOOST_TEST(excused_after_end(true, "ps:0", true));
}

BOOST_AUTO_TEST_CASE(before_the_end_or_untouched_or_the_coordinator_is_not) {
  BOOST_TEST(!excused_after_end(false, "ps:0", true));     // the job still needs it
  BOOST_TEST(!excused_after_end(true, "ps:0", false));     // it failed by itself
  BOOST_TEST(!excused_after_end(true, "worker:0", false));
  BOOST_TEST(!excused_after_end(true, "chief:0", true));   // the job's end is its own
  BOOST_TEST(!excused_after_end(true, "evaluator:0", true));
  BOOST_TEST(!excused_after_end(true, "psx:0", true));
}
