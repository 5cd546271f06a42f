// Device memory accounting behind one interface for the profiler and the memory tests: on the
// CPU the counting allocator (counting_allocator.h, installed for the meter's lifetime), on CUDA
// the caching allocator's statistics (bytes allocated to tensors, aggregated over pools:
// c10::cuda::CUDACachingAllocator::getDeviceStats). Both count tensor storages only; the CUDA
// figure excludes the allocator's cached-but-free segments, the CUDA context and cuBLAS / NCCL
// workspaces (the memory model's workspace term). The CUDA statistics exist only when omnibal is
// built against a CUDA LibTorch (memory_meter_cuda.cpp); otherwise a CUDA meter throws.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>

namespace omnibal::profile {

class ScopedCpuAllocatorCounter;

/// Current and peak tensor bytes on one device.
class MemoryMeter {
 public:
  /// Starts accounting on `device` (CPU: installs the counting allocator; CUDA: uses the caching
  /// allocator's statistics). Throws omnibal::Error for CUDA in a build without CUDA or for
  /// other device types.
  explicit MemoryMeter(const torch::Device& device);
  ~MemoryMeter();
  MemoryMeter(const MemoryMeter&) = delete;
  MemoryMeter& operator=(const MemoryMeter&) = delete;

  /// Bytes of live tensor storages counted on the device (CPU: allocated since the counter was
  /// installed; CUDA: all).
  int64_t current_bytes() const;
  /// High-water mark of current_bytes() since construction or the last reset_peak().
  int64_t peak_bytes() const;
  /// Sets the peak to the current value.
  void reset_peak();
  const torch::Device& device() const { return device_; }

 private:
  torch::Device device_;
  std::unique_ptr<ScopedCpuAllocatorCounter> cpu_;
};

/// CUDA caching-allocator figures of one device, bytes allocated to tensors.
struct CudaMemoryStats {
  int64_t current_bytes = 0;
  int64_t peak_bytes = 0;
};

/// True when this build has the CUDA caching-allocator statistics.
bool cuda_memory_stats_available();
/// Statistics of CUDA device `index`; throws omnibal::Error without CUDA support.
CudaMemoryStats cuda_memory_stats(int index);
/// Resets the peak statistics of CUDA device `index`; throws omnibal::Error without CUDA.
void reset_cuda_peak(int index);
/// Total memory of CUDA device `index` in bytes (cudaDeviceProp::totalGlobalMem); throws
/// omnibal::Error without CUDA.
int64_t cuda_device_memory_bytes(int index);

}  // namespace omnibal::profile
