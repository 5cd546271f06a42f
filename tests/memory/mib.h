// Bytes per MiB, shared by the memory tests (one definition: they compile as unity batches).
#pragma once

namespace omnibal::memory::testing {
inline constexpr double kMiB = 1 << 20;
}  // namespace omnibal::memory::testing
