// CPU-only LibTorch builds (lib/profile/CMakeLists.txt): no CUDA statistics.
#include "core/error.h"
#include "profile/memory_meter.h"

namespace omnibal::profile {

bool cuda_memory_stats_available() { return false; }

CudaMemoryStats cuda_memory_stats(int index) {
  OMNIBAL_FAIL("CUDA memory statistics of device ", index,
               ": omnibal was built against a CPU-only LibTorch");
}

void reset_cuda_peak(int index) {
  OMNIBAL_FAIL("CUDA memory statistics of device ", index,
               ": omnibal was built against a CPU-only LibTorch");
}

int64_t cuda_device_memory_bytes(int index) {
  OMNIBAL_FAIL("memory of CUDA device ", index, ": omnibal was built against a CPU-only LibTorch");
}

}  // namespace omnibal::profile
