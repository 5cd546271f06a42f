#pragma once
// Host heap policy: how much freed memory glibc's malloc keeps for reuse instead of handing it
// back to the kernel.
//
// A CPU training step allocates and frees the same activation tensors every micro-batch.
// glibc's defaults serve blocks above a dynamic threshold (128 KiB at start) with mmap and trim
// the heap's free top above 128 KiB; each such block then costs a fresh page fault per 4 KiB
// page it touches, every micro-batch. Measured at DP 2 x PP 1 on the demo with ISF packs:
// 147-226k minor faults per rank in 24 steps and 329 ms a step (median of 3), against 52k
// faults and 249 ms with the heap kept (docs/results.md, "The host heap"). Keeping the heap is what LibTorch's
// CUDA caching allocator, jemalloc and tcmalloc do for their own memory.

#include <cstdint>
#include <string>

namespace omnibal {

/// What configure_host_heap() applied.
struct HostHeapPolicy {
  int64_t keep_mib = 0;        ///< runtime.heap_keep_mb asked for (0 = allocator defaults)
  int64_t mmap_threshold = 0;  ///< bytes: blocks at or above it are mmap'ed (0 = default)
  int64_t trim_threshold = 0;  ///< bytes of free heap top kept before trimming (0 = default)
  bool applied = false;        ///< false where the C library is not glibc or keep_mib is 0
  /// One line for the start-up log, e.g.
  /// "host heap: keep 1024 MiB of freed memory (mmap for blocks >= 32 MiB)".
  std::string describe() const;
};

/// glibc's ceiling for M_MMAP_THRESHOLD on 64-bit (HEAP_MAX_SIZE / 2): mallopt refuses more.
inline constexpr int64_t kMaxMmapThresholdBytes = int64_t{32} << 20;

/// Sets the process's malloc to keep up to `keep_mib` MiB of freed memory: M_TRIM_THRESHOLD =
/// keep_mib MiB and M_MMAP_THRESHOLD = min(keep_mib MiB, 32 MiB), so blocks below that come
/// from the heap and stay mapped between micro-batches. Both are set: setting either turns off
/// glibc's dynamic mmap threshold, and the trim threshold alone leaves it at 128 KiB (measured:
/// 1.2-3.1M faults per rank in 24 steps, 3-7x slower steps). keep_mib = 0 leaves glibc's dynamic
/// defaults. Process-wide; call once, before the model is built. Peak RSS is unchanged; RSS
/// between steps stays near the peak instead of falling.
/// Throws omnibal::Error if keep_mib < 0 or glibc rejects a setting.
HostHeapPolicy configure_host_heap(int64_t keep_mib);

}  // namespace omnibal
