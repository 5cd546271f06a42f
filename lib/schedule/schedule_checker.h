// A one-process checker for per-stage pipeline instruction lists. It walks every stage's list
// as the executor would, with non-blocking sends (a send enqueues on the channel to its peer) and
// blocking receives (a receive waits until its channel holds a message), and verifies:
//  - every receive meets the send of the same micro-batch, in the same order (FIFO channels);
//  - no stage waits forever (a round in which no stage advances while some are unfinished is a
//    deadlock; the report names each blocked stage and instruction);
//  - every send is received (no message left on a channel at the end);
//  - data dependencies inside a stage: Forward{mb} after its RecvActivation, Backward{mb} after
//    its Forward and RecvGrad, SendActivation/SendGrad after the compute producing them, each
//    micro-batch forwarded and backwarded exactly once, ReduceGrads after the last Backward and
//    OptimizerStep after ReduceGrads.
// It does not model time or finite send buffers (the runtime posts paired non-blocking
// operations, docs/conventions.md); timing is training_simulator.h's job.
#pragma once

#include <string>
#include <vector>

#include "schedule/instruction.h"

namespace omnibal::schedule {

/// Outcome of check_schedule.
struct ScheduleCheckReport {
  bool ok = false;                  ///< true when every rule above holds
  std::string message;              ///< the first violation, naming stage, index and instruction
  std::vector<int> peak_in_flight;  ///< per stage: most micro-batches forwarded, not backwarded
};

/// Checks `lists` (one program per stage, P = lists.size()) for `micro_batches` micro-batches.
/// Never throws on a bad schedule: violations are reported in the result.
ScheduleCheckReport check_schedule(const StageSchedules& lists, int micro_batches);

}  // namespace omnibal::schedule
