#include "comm/run_on_root.h"

#include <cstring>
#include <exception>

#include "core/error.h"

namespace omnibal::comm {

void run_on_root(Communicator& group, const std::function<void()>& body, const std::string& what) {
  const bool root = group.rank() == 0;
  std::exception_ptr error;
  std::string message;  // empty = success
  if (root) {
    try {
      body();
    } catch (const std::exception& e) {
      error = std::current_exception();
      message = e.what();
      if (message.empty()) message = "an error without a message";
    } catch (...) {
      error = std::current_exception();
      message = "unknown exception (not derived from std::exception)";
    }
  }
  torch::Tensor size =
      torch::full({1}, root ? static_cast<int64_t>(message.size()) : 0, torch::kInt64);
  group.broadcast(size, 0, what + ": outcome on rank 0");
  const int64_t n = size.item<int64_t>();
  if (n == 0) return;
  torch::Tensor bytes = torch::zeros({n}, torch::kUInt8);
  if (root) std::memcpy(bytes.data_ptr(), message.data(), message.size());
  group.broadcast(bytes, 0, what + ": rank 0's error");
  if (root) std::rethrow_exception(error);
  OMNIBAL_FAIL(what, " failed on rank 0: ",
               std::string(static_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(n)));
}

}  // namespace omnibal::comm
