// The communication watchdog (`comm.timeout_s`): every blocking wait of a communicator polls
// its operation instead of blocking inside MPI/NCCL, so that it can (1) give up after the
// timeout with an error naming the operation ("recv activation mb 3 from rank 1 timed out after
// 30 s"), and (2) rethrow an error forwarded from a background thread while the main thread
// waits, and (3) give up when SIGTERM/SIGINT arrived and the wait is still blocked after
// comm.stop_grace_s: a graceful stop completes its step within seconds, so a wait that outlives
// the grace is waiting on a rank that has died (mpirun signals the survivors of an MPI_Abort,
// and only SIGKILLs them after odls_base_sigkill_timeout). It does not abort the job itself: the error propagates to the app's run_guarded(),
// which prints "[rank r] <message>" and calls MPI_Abort (job_guard.h).
#pragma once

#include "comm/error_forwarder.h"

#include <functional>
#include <memory>
#include <string>

namespace omnibal::comm {

/// How blocking waits behave. Shared by all communicators of a job.
struct WaitPolicy {
  double timeout_s = 300;                  ///< comm.timeout_s; a wait longer than this throws
  std::shared_ptr<ErrorForwarder> errors;  ///< checked at every poll; may be null
  double stop_grace_s = 20;                ///< comm.stop_grace_s; see the file comment
};

/// Polls an operation to completion under a WaitPolicy.
class Watchdog {
 public:
  explicit Watchdog(WaitPolicy policy);
  const WaitPolicy& policy() const { return policy_; }

  /// Calls `test` until it returns true. Between polls it yields for the first 2 ms, then
  /// sleeps with a backoff growing to 250 us (so long waits and oversubscribed ranks do not
  /// burn the cores their peers need).
  /// Throws omnibal::Error "<what> timed out after <t> s (comm.timeout_s)" on timeout, or
  /// "<what> still blocked <g> s after a stop signal (comm.stop_grace_s) ..." once
  /// comm::stop_requested() has been true for stop_grace_s of this wait, after calling
  /// `on_timeout` (e.g. ncclCommAbort); rethrows a forwarded background error.
  void wait(const std::function<bool()>& test, const std::string& what,
            const std::function<void()>& on_timeout = {}) const;

 private:
  WaitPolicy policy_;
};

}  // namespace omnibal::comm
