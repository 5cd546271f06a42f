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
  bool last() const { return stage == stages - 1; }
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
