// Shared helpers of the multi-rank comm tests: a world communicator with a short watchdog (so
// a broken test fails in seconds instead of hanging ctest) and deterministic tensor contents.
#pragma once

#include "comm/communicator.h"

#include <mpi.h>

#include <memory>

namespace omnibal::comm::testing {

/// A fresh duplicate of MPI_COMM_WORLD (messages of one test never reach another) with a
/// 20 s watchdog.
inline std::unique_ptr<Communicator> world_comm() {
  WaitPolicy policy;
  policy.timeout_s = 20;
  return make_mpi_communicator(MPI_COMM_WORLD, "world", std::make_shared<Watchdog>(policy));
}

/// A float32 tensor of `shape` whose every element is unique to (seed, index).
inline torch::Tensor pattern(std::vector<int64_t> shape, int seed) {
  auto n = torch::ones(shape, torch::kLong).sum().item<int64_t>();
  return (torch::arange(n, torch::kFloat) + 1000.0f * seed).reshape(shape);
}

}  // namespace omnibal::comm::testing
