#include "comm/error_forwarder.h"

#include "core/error.h"

namespace omnibal::comm {

void ErrorForwarder::post(std::exception_ptr error, const std::string& thread_name) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (error_) return;
  error_ = std::move(error);
  thread_name_ = thread_name;
  has_error_.store(true, std::memory_order_release);
}

void ErrorForwarder::rethrow_if_any() const {
  if (!has_error()) return;
  std::string what;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    try {
      std::rethrow_exception(error_);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
      what = "unknown exception";
    }
  }
  throw Error("in thread '" + thread_name_ + "': " + what);
}

void ErrorForwarder::run_guarded(const std::string& thread_name,
                                 const std::function<void()>& body) {
  try {
    body();
  } catch (...) {
    post(std::current_exception(), thread_name);
  }
}

}  // namespace omnibal::comm
