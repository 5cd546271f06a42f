// The world communicator the multi-rank checkpoint tests share: MPI backend with a 30 s watchdog,
// so a hung collective fails the test instead of stalling ctest.
#pragma once

#include <mpi.h>

#include <memory>

#include "comm/communicator.h"
#include "comm/watchdog.h"

namespace omnibal::checkpoint::testing {

/// A communicator over MPI_COMM_WORLD whose waits time out after 30 s.
inline std::unique_ptr<comm::Communicator> world_comm() {
  comm::WaitPolicy policy;
  policy.timeout_s = 30;
  return comm::make_mpi_communicator(MPI_COMM_WORLD, "world",
                                     std::make_shared<comm::Watchdog>(policy));
}

}  // namespace omnibal::checkpoint::testing
