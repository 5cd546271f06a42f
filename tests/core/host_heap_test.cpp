// configure_host_heap: its own executable, since mallopt settings are process-wide.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/host_heap.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

using omnibal::configure_host_heap;

namespace {

void* volatile g_block = nullptr;  // keeps the compiler from eliding malloc/free pairs

#if defined(__GLIBC__)
struct HeapBytes {
  size_t mmapped, arena;  ///< mallinfo2: hblkhd (mmap'ed blocks), arena (main heap size)
};
HeapBytes heap_bytes() {
  const struct mallinfo2 m = mallinfo2();
  return {m.hblkhd, m.arena};
}
#endif

}  // namespace

TEST_CASE("host heap: 0 keeps the allocator's defaults; negative is an error") {
  const auto p = configure_host_heap(0);
  CHECK_FALSE(p.applied);
  CHECK(p.mmap_threshold == 0);
  CHECK(p.describe().find("allocator defaults") != std::string::npos);
  CHECK_THROWS_AS(configure_host_heap(-1), omnibal::Error);
}

#if defined(__GLIBC__)
TEST_CASE("host heap: a kept heap serves and keeps a block glibc would mmap and unmap") {
  constexpr size_t kBlock = size_t{24} << 20;  // activation-sized: 24 MiB
  // Defaults first (nothing configured yet in this process): the block is mmap'ed.
  const HeapBytes before = heap_bytes();
  g_block = std::malloc(kBlock);
  std::memset(g_block, 1, kBlock);
  CHECK(heap_bytes().mmapped >= before.mmapped + kBlock);
  std::free(g_block);
  CHECK(heap_bytes().mmapped == before.mmapped);  // unmapped again: next time, fresh faults

  const auto p = configure_host_heap(256);
  REQUIRE(p.applied);
  CHECK(p.mmap_threshold == omnibal::kMaxMmapThresholdBytes);
  CHECK(p.trim_threshold == int64_t{256} << 20);
  CHECK(p.describe() == "host heap: keep 256 MiB of freed memory (mmap for blocks >= 32 MiB)");

  const HeapBytes kept_before = heap_bytes();
  g_block = std::malloc(kBlock);
  std::memset(g_block, 1, kBlock);
  const HeapBytes during = heap_bytes();
  CHECK(during.mmapped == kept_before.mmapped);  // from the heap, not mmap
  std::free(g_block);
  const HeapBytes after = heap_bytes();
  CHECK(after.arena == during.arena);  // not trimmed: the pages stay for the next block
  CHECK(after.arena >= kBlock);

  // Above glibc's 32 MiB ceiling a block is still mmap'ed.
  g_block = std::malloc(size_t{40} << 20);
  CHECK(heap_bytes().mmapped >= after.mmapped + (size_t{40} << 20));
  std::free(g_block);
  // mallopt takes an int: the trim threshold is capped below 2 GiB.
  CHECK(configure_host_heap(4096).trim_threshold == int64_t{2047} << 20);
}
#endif
