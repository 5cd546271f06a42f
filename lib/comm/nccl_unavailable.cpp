// Built instead of nccl_communicator.cpp when CMake did not find NCCL (CPU LibTorch builds).
#include "comm/communicator.h"

#include "core/error.h"

namespace omnibal::comm {

bool nccl_available() { return false; }

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm, std::string name,
                                                     std::shared_ptr<const Watchdog>, int) {
  OMNIBAL_FAIL("communicator '", name,
               "': this build has no NCCL backend (it needs a CUDA "
               "LibTorch and NCCL at configure time; see OMNIBAL_WITH_NCCL); use the MPI backend "
               "with CPU tensors");
}

}  // namespace omnibal::comm
