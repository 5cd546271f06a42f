#include "core/host_heap.h"

#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace omnibal {

std::string HostHeapPolicy::describe() const {
  if (keep_mib == 0) return "host heap: allocator defaults (runtime.heap_keep_mb 0)";
  if (!applied)
    return fmt::format(
        "host heap: keep {} MiB asked, but the C library is not glibc; "
        "allocator left as is",
        keep_mib);
  return fmt::format("host heap: keep {} MiB of freed memory (mmap for blocks >= {} MiB)", keep_mib,
                     mmap_threshold >> 20);
}

HostHeapPolicy configure_host_heap(int64_t keep_mib) {
  OMNIBAL_CHECK(keep_mib >= 0,
                "runtime.heap_keep_mb: expected MiB >= 0 (0 = allocator defaults), got ", keep_mib);
  HostHeapPolicy policy;
  policy.keep_mib = keep_mib;
  if (keep_mib == 0) return policy;
#if defined(__GLIBC__)
  const int64_t keep_bytes = keep_mib << 20;
  policy.mmap_threshold = std::min(keep_bytes, kMaxMmapThresholdBytes);
  // mallopt takes an int: cap the trim threshold below 2 GiB.
  policy.trim_threshold = std::min<int64_t>(keep_bytes, int64_t{2047} << 20);
  OMNIBAL_CHECK(mallopt(M_MMAP_THRESHOLD, static_cast<int>(policy.mmap_threshold)) == 1,
                "host heap: glibc refused M_MMAP_THRESHOLD = ", policy.mmap_threshold, " bytes");
  OMNIBAL_CHECK(mallopt(M_TRIM_THRESHOLD, static_cast<int>(policy.trim_threshold)) == 1,
                "host heap: glibc refused M_TRIM_THRESHOLD = ", policy.trim_threshold, " bytes");
  policy.applied = true;
#endif
  return policy;
}

}  // namespace omnibal
