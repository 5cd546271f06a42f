// Forwarding of exceptions from background threads (data loader, prefetchers) to the main
// thread. A background thread posts its exception; the main thread rethrows it at its next
// communication wait (every Watchdog poll checks) or when it calls rethrow_if_any() itself, so
// a failing loader ends the job even while the main thread is blocked in a receive or an
// all-reduce. It does not stop or join the threads; their owner does.
#pragma once

#include <atomic>
#include <exception>
#include <functional>
#include <mutex>
#include <string>

namespace omnibal::comm {

/// Holds the first exception posted by any thread. Thread-safe.
class ErrorForwarder {
 public:
  /// Records `error` raised in thread `thread_name`; later posts are ignored (the first error
  /// is the cause, the rest are usually consequences).
  void post(std::exception_ptr error, const std::string& thread_name);
  /// True once an error was posted (lock-free; cheap enough for every poll).
  bool has_error() const { return has_error_.load(std::memory_order_acquire); }
  /// Throws omnibal::Error("in thread '<name>': <what>") when an error was posted.
  void rethrow_if_any() const;
  /// Runs `body` and posts anything it throws; for the top of a background thread's function.
  void run_guarded(const std::string& thread_name, const std::function<void()>& body);

 private:
  mutable std::mutex mutex_;
  std::atomic<bool> has_error_{false};
  std::exception_ptr error_;
  std::string thread_name_;
};

}  // namespace omnibal::comm
