#include "comm/parallel_comms.h"

#include "comm/mpi_check.h"

#include "core/error.h"

#include <fmt/format.h>

namespace omnibal::comm {
namespace {

std::unique_ptr<Communicator> make(Backend backend, MPI_Comm comm, std::string name,
                                   const std::shared_ptr<const Watchdog>& dog, int device) {
  if (backend == Backend::kNccl) return make_nccl_communicator(comm, std::move(name), dog, device);
  return make_mpi_communicator(comm, std::move(name), dog);
}

}  // namespace

ParallelComms::ParallelComms(const ProcessGrid& grid, const WaitPolicy& policy, Backend backend,
                             int device)
    : grid_(grid), watchdog_(std::make_shared<Watchdog>(policy)) {
  int world_size = 0;
  OMNIBAL_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  OMNIBAL_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size));
  OMNIBAL_CHECK(world_size == grid.world_size(),
                "parallel.tp * parallel.dp * parallel.pp = ", grid.world_size(),
                " but mpirun started ", world_size, " ranks");
  coord_ = grid.coord(rank_);
  const GridShape& s = grid.shape();
  MPI_Comm dp_comm, pp_comm, tp_comm;
  // Colour = the coordinates that stay fixed within the group; key = the varying index.
  OMNIBAL_MPI_CHECK(
      MPI_Comm_split(MPI_COMM_WORLD, coord_.pp * s.tp + coord_.tp, coord_.dp, &dp_comm));
  OMNIBAL_MPI_CHECK(
      MPI_Comm_split(MPI_COMM_WORLD, coord_.dp * s.tp + coord_.tp, coord_.pp, &pp_comm));
  OMNIBAL_MPI_CHECK(
      MPI_Comm_split(MPI_COMM_WORLD, coord_.pp * s.dp + coord_.dp, coord_.tp, &tp_comm));
  world_ = make(backend, MPI_COMM_WORLD, "world", watchdog_, device);
  tp_ = make(backend, tp_comm, fmt::format("tp group of dp {} stage {}", coord_.dp, coord_.pp),
             watchdog_, device);
  dp_ = make(backend, dp_comm, fmt::format("dp group of stage {}", coord_.pp), watchdog_, device);
  pp_ = make(backend, pp_comm, fmt::format("pipeline of dp {}", coord_.dp), watchdog_, device);
  // The communicators hold duplicates; the split handles are no longer needed.
  MPI_Comm_free(&dp_comm);
  MPI_Comm_free(&pp_comm);
  MPI_Comm_free(&tp_comm);
}

}  // namespace omnibal::comm
