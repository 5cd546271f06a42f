#include "profile/memory_meter.h"

#include "core/error.h"
#include "profile/counting_allocator.h"

namespace omnibal::profile {

MemoryMeter::MemoryMeter(const torch::Device& device) : device_(device) {
  if (device.is_cpu()) {
    cpu_ = std::make_unique<ScopedCpuAllocatorCounter>();
    cpu_->reset_peak();
    return;
  }
  OMNIBAL_CHECK(device.is_cuda(), "memory meter: device ", device.str(),
                " is neither CPU nor CUDA");
  OMNIBAL_CHECK(cuda_memory_stats_available(), "memory meter: ", device.str(),
                " needs a CUDA LibTorch build (this one is CPU-only)");
  reset_cuda_peak(device.index() < 0 ? 0 : device.index());
}

MemoryMeter::~MemoryMeter() = default;

int64_t MemoryMeter::current_bytes() const {
  if (cpu_) return cpu_->current_bytes();
  return cuda_memory_stats(device_.index() < 0 ? 0 : device_.index()).current_bytes;
}

int64_t MemoryMeter::peak_bytes() const {
  if (cpu_) return cpu_->peak_bytes();
  return cuda_memory_stats(device_.index() < 0 ? 0 : device_.index()).peak_bytes;
}

void MemoryMeter::reset_peak() {
  if (cpu_) return cpu_->reset_peak();
  reset_cuda_peak(device_.index() < 0 ? 0 : device_.index());
}

}  // namespace omnibal::profile
