// CUDA builds only (lib/profile/CMakeLists.txt): the caching allocator's statistics.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include "profile/memory_meter.h"

namespace omnibal::profile {

namespace {
// StatType::AGGREGATE (all pools) is index 0 in every LibTorch version; the enum's namespace
// moved in 2.x, the index did not.
constexpr size_t kAggregate = 0;
}  // namespace

bool cuda_memory_stats_available() { return true; }

CudaMemoryStats cuda_memory_stats(int index) {
  const auto stats =
      c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(index));
  const auto& allocated = stats.allocated_bytes[kAggregate];
  return {allocated.current, allocated.peak};
}

void reset_cuda_peak(int index) {
  c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(index));
}

int64_t cuda_device_memory_bytes(int index) {
  return static_cast<int64_t>(at::cuda::getDeviceProperties(index)->totalGlobalMem);
}

}  // namespace omnibal::profile
