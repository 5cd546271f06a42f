// A one-process checker for per-stage pipeline instruction lists (1F1B, interleaved, ZB-H1). It
// walks every stage's list as the executor would, with non-blocking sends (a send enqueues on the
// channel to its peer rank) and blocking receives (a receive waits until a message is there):
//  - channels are per virtual-stage edge: RecvActivation{mb c} on virtual stage k meets
//    SendActivation{mb c'} of k - 1, RecvGrad{mb c} meets SendGrad{mb c'} of k + 1 (same kind,
//    micro-batch, and the chunk c' of the neighbouring virtual stage, instruction.h);
//  - NCCL order: NCCL matches point-to-point operations in call order per ordered rank pair, so
//    for each (src rank, dst rank) the receives, all kinds and chunks merged, must come in the
//    order the sends were posted; a same-rank hand-over (P == 1 with v > 1, or ZB-V's P-1 -> P on
//    rank P - 1) is ordered the same way;
//  - no stage waits forever (a round in which no stage advances while some are unfinished is a
//    deadlock; the report names each blocked stage and instruction);
//  - every send is received (no message left on a channel at the end);
//  - data dependencies inside a stage, per (micro-batch, chunk): Forward after its
//    RecvActivation (except on virtual stage 0); either one Backward, or one BackwardInput and
//    later one BackwardWeight, never both kinds; Backward/BackwardInput after the Forward and its
//    RecvGrad (except on the last virtual stage); SendActivation after the Forward, SendGrad after
//    Backward/BackwardInput; ReduceGrads after the last Backward and the last BackwardWeight;
//    OptimizerStep after ReduceGrads.
// It does not model time or finite send buffers (the runtime posts paired non-blocking
// operations, docs/conventions.md); timing is pipeline_timeline.h's job.
#pragma once

#include <string>
#include <vector>

#include "schedule/instruction.h"

namespace omnibal::schedule {

/// Outcome of check_schedule. The peaks feed the memory model; all are counts of
/// (micro-batch, chunk) pairs, per stage (pipeline rank) s in [0, P).
struct ScheduleCheckReport {
  bool ok = false;      ///< true when every rule above holds
  std::string message;  ///< the first violation, naming stage, index and instruction
  /// Most autograd graphs alive: forwarded, input gradient (Backward / BackwardInput) not done.
  std::vector<int> peak_in_flight;
  /// Most deferred weight gradients: BackwardInput done, BackwardWeight not yet (0 without ZB).
  std::vector<int> peak_deferred_weights;
  /// Most held at once: forwarded, weight gradient (Backward / BackwardWeight) not yet done,
  /// i.e. graphs plus deferred W inputs. Equals peak_in_flight without the split backward.
  std::vector<int> peak_held;
  /// [P][v]: most graphs alive per chunk (peak of each chunk on its own, not at one instant).
  std::vector<std::vector<int>> peak_in_flight_per_chunk;
};

/// Checks `lists` (one program per stage, P = lists.size()) for `micro_batches` micro-batches and
/// `virtual_stages` model chunks per rank (v; 0 infers 1 + the largest chunk in the lists),
/// laid on the ranks as `layout` says (instruction.h: kLoop, or kV for ZB-V's lists).
/// Never throws on a bad schedule: violations are reported in the result.
ScheduleCheckReport check_schedule(const StageSchedules& lists, int micro_batches,
                                   int virtual_stages = 0, ChunkLayout layout = ChunkLayout::kLoop);

}  // namespace omnibal::schedule
