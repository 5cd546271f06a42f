// Scratch directories and file damage for the checkpoint tests. Scratch directories
// (tests/common/scratch_dir.h) are unique per process (and shared by the ranks of one mpiexec run
// when rank 0 owns one under an id all ranks agree on), removed at the end of the test.
#pragma once

#include <fstream>
#include <string>

#include "tests/common/scratch_dir.h"

namespace omnibal::checkpoint::testing {

/// The shared scratch directory (tests/common/scratch_dir.h), under the name these tests use.
using ::omnibal::testing::ScratchDir;

/// Flips bit 6 of the byte at offset `at` of `path` in place (a corrupted shard or manifest).
inline void flip_byte(const std::string& path, std::streamoff at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  const char c = static_cast<char>(f.get());
  f.seekp(at);
  f.put(static_cast<char>(c ^ 0x40));
}

}  // namespace omnibal::checkpoint::testing
