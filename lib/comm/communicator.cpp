#include "comm/communicator.h"

#include "core/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <mutex>

namespace omnibal::comm {
namespace {

// Handles dropped before completion end here so MPI never writes into freed memory.
void leak(std::unique_ptr<RequestImpl> impl) {
  static std::mutex mutex;
  static std::vector<std::unique_ptr<RequestImpl>> graveyard;
  std::lock_guard<std::mutex> lock(mutex);
  graveyard.push_back(std::move(impl));
}

class AllRequest : public RequestImpl {
 public:
  explicit AllRequest(std::vector<Request> parts) : parts_(std::move(parts)) {}
  bool test() override {
    bool all = true;
    for (auto& p : parts_) all = p.test() && all;
    return all;
  }

 private:
  std::vector<Request> parts_;
};

}  // namespace

Request::Request(std::unique_ptr<RequestImpl> impl, std::string what,
                 std::shared_ptr<const Watchdog> dog)
    : impl_(std::move(impl)), what_(std::move(what)), watchdog_(std::move(dog)), done_(!impl_) {}

Request::Request(Request&& other) noexcept
    : impl_(std::move(other.impl_)),
      what_(std::move(other.what_)),
      watchdog_(std::move(other.watchdog_)),
      done_(other.done_) {
  other.done_ = true;
}

Request& Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    if (impl_ && !done_) leak(std::move(impl_));
    impl_ = std::move(other.impl_);
    what_ = std::move(other.what_);
    watchdog_ = std::move(other.watchdog_);
    done_ = other.done_;
    other.done_ = true;
  }
  return *this;
}

Request::~Request() {
  if (impl_ && !done_) leak(std::move(impl_));
}

bool Request::test() {
  if (!done_ && impl_->test()) done_ = true;
  return done_;
}

void Request::wait() {
  if (done_) return;
  OMNIBAL_CHECK(watchdog_, "request '", what_, "' has no watchdog");
  RequestImpl* impl = impl_.get();
  watchdog_->wait([this] { return test(); }, what_, [impl] { impl->on_timeout(); });
}

Request Request::all(std::vector<Request> parts, std::string what) {
  std::shared_ptr<const Watchdog> dog;
  for (auto& p : parts) {
    if (p.watchdog_) dog = p.watchdog_;
  }
  return Request(std::make_unique<AllRequest>(std::move(parts)), std::move(what), dog);
}

void wait_all(std::vector<Request>& requests) {
  for (auto& r : requests) r.wait();
}

void Communicator::all_reduce(torch::Tensor tensor, ReduceOp op, std::string what) {
  if (what.empty()) what = fmt::format("all-reduce of {} over {}", describe_tensor(tensor), name());
  iall_reduce(std::move(tensor), op, std::move(what)).wait();
}

void Communicator::broadcast(torch::Tensor tensor, int root, std::string what) {
  if (what.empty()) {
    what = fmt::format("broadcast of {} from rank {} over {}", describe_tensor(tensor),
                       world_rank(root), name());
  }
  ibroadcast(std::move(tensor), root, std::move(what)).wait();
}

void Communicator::reduce_scatter(torch::Tensor input, torch::Tensor output, std::string what) {
  if (what.empty())
    what = fmt::format("reduce-scatter of {} over {}", describe_tensor(input), name());
  ireduce_scatter(std::move(input), std::move(output), std::move(what)).wait();
}

void Communicator::all_gather(torch::Tensor input, torch::Tensor output, std::string what) {
  if (what.empty()) what = fmt::format("all-gather of {} over {}", describe_tensor(input), name());
  iall_gather(std::move(input), std::move(output), std::move(what)).wait();
}

void Communicator::barrier(std::string what) {
  if (what.empty()) what = "barrier over " + name();
  ibarrier(std::move(what)).wait();
}

int64_t Communicator::all_reduce_int(int64_t value, ReduceOp op, std::string what) {
  auto t = torch::full({1}, value, torch::kInt64);
  if (what.empty()) what = "all-reduce of a flag over " + name();
  all_reduce(t, op, std::move(what));
  return t.item<int64_t>();
}

bool same_on_every_rank(Communicator& group, uint64_t value, std::string what) {
  // Both halves fit in 32 bits, so their negations cannot overflow: max(-x) = -min(x).
  const int64_t hi = static_cast<int64_t>(value >> 32),
                lo = static_cast<int64_t>(value & 0xffffffffu);
  auto t = torch::tensor({hi, -hi, lo, -lo}, torch::kInt64);
  if (what.empty()) what = "agreement check over " + group.name();
  group.all_reduce(t, ReduceOp::kMax, std::move(what));
  const auto a = t.accessor<int64_t, 1>();
  return a[0] == -a[1] && a[2] == -a[3];
}

std::string dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kByte: return "uint8";
    case at::kChar: return "int8";
    case at::kShort: return "int16";
    case at::kInt: return "int32";
    case at::kLong: return "int64";
    case at::kBool: return "bool";
    default: return c10::toString(dtype);
  }
}

std::string describe_tensor(const torch::Tensor& tensor) {
  if (!tensor.defined()) return "undefined tensor";
  return fmt::format("{} [{}]", dtype_name(tensor.scalar_type()),
                     fmt::join(tensor.sizes().vec(), ", "));
}

}  // namespace omnibal::comm
