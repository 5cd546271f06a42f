// The communicators of one rank on the process grid, built once at start-up: the world, the
// DP group of this rank's pipeline stage (gradient all-reduce), the pipeline of this rank's
// DP replica (activations and gradients between stages) and its TP group (a stage's
// tensor-parallel all-reduces). Sub-communicators come from
// MPI_Comm_split with the colours of ProcessGrid, so MPI's group ranks equal the grid's dp
// index (DP group) and stage index (pipeline). Collective: every rank constructs it together.
#pragma once

#include "comm/communicator.h"
#include "comm/process_grid.h"

#include <memory>

namespace omnibal::comm {

/// Which backend carries tensors.
enum class Backend {
  kMpi,   ///< CPU tensors over MPI
  kNccl,  ///< CUDA tensors over NCCL (CPU tensors over MPI)
};

/// This rank's place on the grid and its communicators. Owns them; not copyable.
class ParallelComms {
 public:
  /// Splits MPI_COMM_WORLD. `device` is the CUDA device for kNccl (ignored for kMpi).
  /// Throws omnibal::Error when the grid does not match MPI's world size or NCCL is missing.
  ParallelComms(const ProcessGrid& grid, const WaitPolicy& policy, Backend backend = Backend::kMpi,
                int device = 0);

  const ProcessGrid& grid() const { return grid_; }
  int rank() const { return rank_; }          ///< world rank
  GridCoord coord() const { return coord_; }  ///< this rank's (dp, stage)
  Communicator& world() { return *world_; }
  /// Ranks holding this stage in every replica; group rank = dp index.
  Communicator& dp_group() { return *dp_; }
  /// The tensor-parallel group of this rank's stage and replica; group rank = tp index.
  /// Carries the TP all-reduces of every block (models/tensor_parallel.h).
  Communicator& tp_group() { return *tp_; }
  /// This replica's stages; group rank = stage index. Peers for TensorMessenger.
  Communicator& pipeline() { return *pp_; }
  /// Stage index of the previous/next stage in pipeline(), or -1 at the ends.
  int prev_stage() const { return coord_.pp > 0 ? coord_.pp - 1 : -1; }
  int next_stage() const { return coord_.pp + 1 < grid_.shape().pp ? coord_.pp + 1 : -1; }
  std::shared_ptr<const Watchdog> watchdog() const { return watchdog_; }

 private:
  ProcessGrid grid_;
  int rank_ = 0;
  GridCoord coord_;
  std::shared_ptr<const Watchdog> watchdog_;
  std::unique_ptr<Communicator> world_, dp_, pp_, tp_;
};

}  // namespace omnibal::comm
