#include "profile/counting_allocator.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <torch/version.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "core/error.h"

// The c10::Allocator interface changed in LibTorch 2.3: allocate() lost its const and
// copy_data() became a pure virtual. This is the one place that depends on it (the allocator
// class never appears in a header).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define OMNIBAL_ALLOCATE_CONST
#define OMNIBAL_ALLOCATOR_HAS_COPY_DATA 1
#else
#define OMNIBAL_ALLOCATE_CONST const
#define OMNIBAL_ALLOCATOR_HAS_COPY_DATA 0
#endif

namespace omnibal::profile {
namespace {

/// Process-wide counting allocator. Never destroyed: blocks it handed out may be freed at any
/// time, even after the scope that installed it has ended.
class CountingCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) OMNIBAL_ALLOCATE_CONST override {
    c10::DataPtr inner = base_->allocate(n);
    void* data = inner.get();
    if (data == nullptr) return inner;  // zero-byte storages: nothing to count
    // LibTorch requires data == context for CPU storages (raw_deleter contract), so the
    // counter cannot wrap the base's context; it takes the block over and frees it with the
    // base's raw deleter instead.
    OMNIBAL_CHECK(inner.get_context() == data,
                  "counting allocator: the CPU allocator it wraps returned a context that is not "
                  "the data pointer");
    inner.release_context();
    instance().add(data, static_cast<int64_t>(n));  // allocate() is const in 1.13
    return {data, data, &CountingCpuAllocator::free_block, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &CountingCpuAllocator::free_block; }

#if OMNIBAL_ALLOCATOR_HAS_COPY_DATA
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
#endif

  static CountingCpuAllocator& instance() {
    static auto* allocator = new CountingCpuAllocator();  // intentionally leaked (see above)
    return *allocator;
  }

  /// Installs (depth 0 -> 1) or just counts another nested scope.
  void acquire() {
    std::lock_guard<std::mutex> lock(install_mutex_);
    if (depth_++ > 0) return;
    base_ = c10::GetAllocator(c10::DeviceType::CPU);
    OMNIBAL_CHECK(base_ != nullptr && base_->raw_deleter() != nullptr,
                  "counting allocator: the installed CPU allocator has no raw deleter");
    base_deleter_ = base_->raw_deleter();
    c10::SetAllocator(c10::DeviceType::CPU, this, kPriority);
    if (c10::GetAllocator(c10::DeviceType::CPU) != this) {
      depth_ = 0;
      OMNIBAL_FAIL(
          "counting allocator: c10::SetAllocator(kCPU) kept another allocator "
          "(registered with a priority above ",
          int(kPriority), ")");
    }
    active_.store(true);
  }

  void release() {
    std::lock_guard<std::mutex> lock(install_mutex_);
    if (--depth_ > 0) return;
    c10::SetAllocator(c10::DeviceType::CPU, base_, kPriority);
    active_.store(false);
  }

  CpuAllocatorCounts counts() const { return {current_.load(), peak_.load(), allocations_.load()}; }
  void reset_peak() { peak_.store(current_.load()); }
  bool active() const { return active_.load(); }

 private:
  static constexpr uint8_t kPriority = 0;  // the default CPU allocator's priority

  static void free_block(void* data) {
    auto& self = instance();
    int64_t bytes = 0;
    {
      std::lock_guard<std::mutex> lock(self.blocks_mutex_);
      const auto it = self.blocks_.find(data);
      if (it != self.blocks_.end()) {
        bytes = it->second;
        self.blocks_.erase(it);
      }
    }
    self.current_.fetch_sub(bytes);
    self.base_deleter_(data);
  }

  void add(void* data, int64_t bytes) {
    {
      std::lock_guard<std::mutex> lock(blocks_mutex_);
      blocks_[data] = bytes;
    }
    allocations_.fetch_add(1);
    const int64_t now = current_.fetch_add(bytes) + bytes;
    int64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
  }

  c10::Allocator* base_ = nullptr;
  c10::DeleterFnPtr base_deleter_ = nullptr;
  std::mutex install_mutex_, blocks_mutex_;
  std::unordered_map<void*, int64_t> blocks_;
  std::atomic<int64_t> current_{0}, peak_{0}, allocations_{0};
  std::atomic<bool> active_{false};
  int depth_ = 0;
};

}  // namespace

ScopedCpuAllocatorCounter::ScopedCpuAllocatorCounter() {
  CountingCpuAllocator::instance().acquire();
}
ScopedCpuAllocatorCounter::~ScopedCpuAllocatorCounter() {
  CountingCpuAllocator::instance().release();
}

CpuAllocatorCounts ScopedCpuAllocatorCounter::counts() const {
  return CountingCpuAllocator::instance().counts();
}
int64_t ScopedCpuAllocatorCounter::current_bytes() const { return counts().current_bytes; }
int64_t ScopedCpuAllocatorCounter::peak_bytes() const { return counts().peak_bytes; }
void ScopedCpuAllocatorCounter::reset_peak() { CountingCpuAllocator::instance().reset_peak(); }
bool ScopedCpuAllocatorCounter::active() { return CountingCpuAllocator::instance().active(); }

}  // namespace omnibal::profile
