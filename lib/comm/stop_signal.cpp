#include "comm/stop_signal.h"

#include "comm/communicator.h"

#include "core/error.h"

#include <atomic>
#include <csignal>
#include <cstring>

namespace omnibal::comm {
namespace {
// Lock-free so the handler is async-signal-safe.
std::atomic<int> g_stop{0};
static_assert(std::atomic<int>::is_always_lock_free, "stop flag must be lock-free");

extern "C" void on_stop_signal(int) { g_stop.store(1, std::memory_order_relaxed); }
}  // namespace

void install_stop_handler() {
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  OMNIBAL_CHECK(sigaction(SIGTERM, &action, nullptr) == 0, "sigaction(SIGTERM) failed");
  OMNIBAL_CHECK(sigaction(SIGINT, &action, nullptr) == 0, "sigaction(SIGINT) failed");
}

bool stop_requested() { return g_stop.load(std::memory_order_relaxed) != 0; }

void request_stop() { g_stop.store(1, std::memory_order_relaxed); }

bool should_stop(Communicator& world) {
  const int64_t local = stop_requested() ? 1 : 0;
  return world.all_reduce_int(local, ReduceOp::kMax,
                              "stop agreement (should_stop) over " + world.name()) != 0;
}

}  // namespace omnibal::comm
