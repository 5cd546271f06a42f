// StageCoord: where one rank's pipeline stage sits in the TP x PP x DP job, read once from the
// process grid (comm/process_grid.h) and passed by value to what needs it.
#pragma once

#include "comm/parallel_comms.h"

namespace omnibal::train {

/// Where a rank's stage sits in the job.
struct StageCoord {
  int stage = 0, stages = 1;  ///< pipeline stage index and count
  int dp_rank = 0, dp = 1;    ///< DP index and size
  int tp_rank = 0;            ///< TP index (the TP ranks of a stage run the same program)
  bool first() const { return stage == 0; }
  /// The stage holding the model's last chunk (the loss): stages - 1, or 0 under ZB-V's V
  /// layout (StageRuntime sets it from the plan's schedule, schedule::stage_of_virtual); -1:
  /// stages - 1.
  int loss_stage = -1;
  /// Holds the loss (loss_stage).
  bool last() const { return stage == (loss_stage >= 0 ? loss_stage : stages - 1); }
  /// This rank's coordinates in `comms`' grid.
  static StageCoord of(comm::ParallelComms& comms) {
    StageCoord c;
    c.stage = comms.coord().pp;
    c.stages = comms.grid().shape().pp;
    c.dp_rank = comms.coord().dp;
    c.dp = comms.grid().shape().dp;
    c.tp_rank = comms.coord().tp;
    return c;
  }
};

}  // namespace omnibal::train
