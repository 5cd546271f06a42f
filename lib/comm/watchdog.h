// The communication watchdog (`comm.timeout_s`): every blocking wait of a communicator polls
// its operation instead of blocking inside MPI/NCCL, so that it can (1) give up after the
// timeout with an error naming the operation ("recv activation mb 3 from rank 1 timed out after
// 30 s"), and (2) rethrow an error forwarded from a background thread while the main thread
// waits. It does not abort the job itself: the error propagates to the app's run_guarded(),
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
};

/// Polls an operation to completion under a WaitPolicy.
class Watchdog {
 public:
  explicit Watchdog(WaitPolicy policy);
  const WaitPolicy& policy() const { return policy_; }

  /// Calls `test` until it returns true. Between polls it yields for the first 2 ms, then
  /// sleeps with a backoff growing to 250 us (so long waits and oversubscribed ranks do not
  /// burn the cores their peers need).
  /// Throws omnibal::Error "<what> timed out after <t> s (comm.timeout_s)" on timeout, after
  /// calling `on_timeout` (e.g. ncclCommAbort); rethrows a forwarded background error.
  void wait(const std::function<bool()>& test, const std::string& what,
            const std::function<void()>& on_timeout = {}) const;

 private:
  WaitPolicy policy_;
};

}  // namespace omnibal::comm
