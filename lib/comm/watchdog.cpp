#include "comm/watchdog.h"

#include "comm/stop_signal.h"
#include "core/error.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

namespace omnibal::comm {

Watchdog::Watchdog(WaitPolicy policy) : policy_(std::move(policy)) {
  OMNIBAL_CHECK(policy_.timeout_s > 0, "comm.timeout_s: expected > 0 seconds, got ",
                policy_.timeout_s);
  OMNIBAL_CHECK(policy_.stop_grace_s > 0, "comm.stop_grace_s: expected > 0 seconds, got ",
                policy_.stop_grace_s);
}

void Watchdog::wait(const std::function<bool()>& test, const std::string& what,
                    const std::function<void()>& on_timeout) const {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto limit = std::chrono::duration<double>(policy_.timeout_s);
  // MPI progress only happens inside MPI_Test, so polls must continue. Yield-spin for the first
  // 2 ms (a reply usually arrives within microseconds; sched_yield hands the core to a peer
  // when ranks oversubscribe the cores), then sleep with a backoff capped at 250 us, so a long
  // wait (a pipeline bubble) costs little CPU and at most ~0.25 ms of extra latency.
  const auto spin = std::chrono::milliseconds(2);
  auto sleep = std::chrono::microseconds(25);
  const auto grace = std::chrono::duration<double>(policy_.stop_grace_s);
  std::optional<Clock::time_point> stop_seen;  // when this wait first saw a stop signal
  for (;;) {
    if (test()) return;
    if (policy_.errors) policy_.errors->rethrow_if_any();
    const auto now = Clock::now();
    const auto waited = now - start;
    if (waited > limit) {
      if (on_timeout) on_timeout();
      OMNIBAL_FAIL(what, " timed out after ", policy_.timeout_s, " s (comm.timeout_s)");
    }
    if (!stop_seen && stop_requested()) stop_seen = now;
    if (stop_seen && now - *stop_seen > grace) {
      if (on_timeout) on_timeout();
      OMNIBAL_FAIL(what, " still blocked ", policy_.stop_grace_s,
                   " s after a stop signal (comm.stop_grace_s): the peer rank has probably "
                   "ended; giving up without a checkpoint");
    }
    if (waited < spin) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(sleep);
      sleep = std::min(std::chrono::microseconds(250), sleep * 2);
    }
  }
}

}  // namespace omnibal::comm
