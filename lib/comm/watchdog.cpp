#include "comm/watchdog.h"

#include "core/error.h"

#include <algorithm>
#include <chrono>
#include <thread>

namespace omnibal::comm {

Watchdog::Watchdog(WaitPolicy policy) : policy_(std::move(policy)) {
  OMNIBAL_CHECK(policy_.timeout_s > 0, "comm.timeout_s: expected > 0 seconds, got ",
                policy_.timeout_s);
}

void Watchdog::wait(const std::function<bool()>& test, const std::string& what,
                    const std::function<void()>& on_timeout) const {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto limit = std::chrono::duration<double>(policy_.timeout_s);
  // Spin briefly for low latency, then back off: MPI progress only happens inside MPI_Test, so
  // polls must continue, but a 1 ms cap keeps the cost small next to a micro-batch.
  auto sleep = std::chrono::microseconds(0);
  for (int polls = 0;; ++polls) {
    if (test()) return;
    if (policy_.errors) policy_.errors->rethrow_if_any();
    if ((polls & 15) == 0 && Clock::now() - start > limit) {
      if (on_timeout) on_timeout();
      OMNIBAL_FAIL(what, " timed out after ", policy_.timeout_s, " s (comm.timeout_s)");
    }
    if (polls < 64) {
      std::this_thread::yield();
    } else {
      sleep = std::min(std::chrono::microseconds(1000),
                       std::max(std::chrono::microseconds(20), sleep * 2));
      std::this_thread::sleep_for(sleep);
    }
  }
}

}  // namespace omnibal::comm
