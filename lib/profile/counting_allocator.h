// Counting CPU memory accounting for the profiler and the memory tests (lib/profile/README.md):
// a c10::Allocator that forwards to the CPU allocator LibTorch had installed and counts the
// bytes of live blocks (current) and their high-water mark (peak). Installed for kCPU with
// c10::SetAllocator by ScopedCpuAllocatorCounter and restored when the scope ends, so every
// ATen CPU tensor allocated inside the scope is counted; blocks freed after the scope still
// decrement the count (their deleter is the counter's). Counted are the *requested* bytes
// (tensor storages), not malloc's rounding or alignment, nor memory that libraries (OpenBLAS,
// oneDNN scratch, the autograd engine's own C++ objects) take outside the c10 allocator.
// The CUDA counterpart is the caching allocator's statistics (memory_meter.h).
// Not here: per-tensor attribution (the profiler takes differences of the totals).
#pragma once

#include <cstdint>

namespace omnibal::profile {

/// A snapshot of the counted CPU bytes.
struct CpuAllocatorCounts {
  int64_t current_bytes = 0;  ///< bytes of blocks allocated through the counter and not freed
  int64_t peak_bytes = 0;     ///< max of current_bytes since install or the last reset_peak
  int64_t allocations = 0;    ///< blocks allocated since install (for tests and logs)
};

/// Installs the counting allocator for kCPU for its lifetime (nested scopes share one counter;
/// the original allocator is restored when the outermost scope ends). Throws omnibal::Error when
/// another allocator with a higher c10 priority keeps the counter from being installed.
/// Not thread-safe against other code calling c10::SetAllocator at the same time.
class ScopedCpuAllocatorCounter {
 public:
  ScopedCpuAllocatorCounter();
  ~ScopedCpuAllocatorCounter();
  ScopedCpuAllocatorCounter(const ScopedCpuAllocatorCounter&) = delete;
  ScopedCpuAllocatorCounter& operator=(const ScopedCpuAllocatorCounter&) = delete;

  /// Current, peak and allocation counts (process-wide, all threads).
  CpuAllocatorCounts counts() const;
  /// Bytes currently allocated through the counter.
  int64_t current_bytes() const;
  /// High-water mark of current_bytes since install or reset_peak().
  int64_t peak_bytes() const;
  /// Sets the peak to the current value.
  void reset_peak();
  /// True while any scope is active.
  static bool active();
};

}  // namespace omnibal::profile
