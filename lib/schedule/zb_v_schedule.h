// ZB-V: the V-shaped zero-bubble schedule of Qi et al., "Pipeline Parallelism with Controllable
// Memory" (2024, the V-ZB schedule; the zero-bubble repository's V schedule), over variable
// micro-batch costs.
//
//   const StageSchedules lists = build_zb_v_schedule(/*P=*/4, /*m=*/8);       // equal costs
//   const StageSchedules tuned = build_zb_v_schedule(4, 8, &costs);          // this step's costs
//   check_schedule(lists, 8, 2, ChunkLayout::kV).ok                         // always true
//
// The model is cut into 2P chunks laid in a V (ChunkLayout::kV, instruction.h): rank s holds
// chunk 0 = virtual stage s and chunk 1 = virtual stage 2P - 1 - s, so the hand-over P-1 -> P
// stays on rank P - 1 and the loss (the last chunk) is on rank 0 beside the embedding. Every
// chunk's backward is split as in ZB-H1 into B (BackwardInput, the input gradient) and W
// (BackwardWeight). The lists come from a greedy list scheduler run on a simulated timeline of
// the given costs (the timeline of pipeline_timeline.h: compute occupies its rank, transfers
// serialised per ordered rank pair, a same-rank hand-over free): whenever a rank is free it runs,
// in this order of preference,
//   1. a W, when its deferred W's reached max_deferred_weights;
//   2. a B whose output gradient is there (the earliest there; ties: lower micro-batch, chunk 1);
//   3. an F whose input is there, chunk 1 before chunk 0, when the chunk's graphs stay under
//      1F1B's bound for its virtual stage k on 2P virtual stages (2P - k) and the rank's graphs
//      plus deferred W's under max_held (2P chunk graphs = P micro-batches of a whole stage,
//      1F1B's stage 0: the activation memory of 1F1B, the V-ZB paper's bound);
//   4. a deferred W (oldest first): W's fill the time a rank would otherwise wait;
// else it waits for the next message. F's and B's run in micro-batch order per chunk. Three runs
// are tried and the shortest simulated step kept (as the zero-bubble repository's V scheduler
// tries several settings): the greedy above, the same with at most P deferred W's, and for
// m >= 2P - 1 the hand-made F/B order of the zero-bubble repository and PyTorch's
// ScheduleZBVZeroBubble with the W's placed by rules 1 and 4 (an F waits for a W when the rank
// holds max_held). Variable shapes: the zero-bubble repository tunes its V for equal costs; here
// the portfolio runs on each step's own costs, so the W's of a long micro-batch move into the
// bubbles it leaves. Receives are placed before the compute that needs them, in the order the
// peer posted (NCCL's per rank pair order: a receive may be pulled ahead of its
// compute so that an earlier message of the same peer is taken first); sends right after the
// compute. Since the lists replay a timed execution in which every message arrived before it
// was needed, they never deadlock, and run_pipeline_timeline on the same costs reproduces the
// simulated times.
// Equal costs (T_F = T_B = T_W per chunk): the last rank starts P - 1 chunk-times late and has 6m
// of work, so no schedule beats 6m + P - 1; for m >= 2P - 1 the hand-made order reaches it and the
// bubble is (P-1)/(6m+P-1) (bubble_fraction in schedules.h; tests/schedule check the lists). With
// fewer micro-batches no hand-made order exists (the warm-up needs 2P - 1 of them) and the free
// greedy comes within a few chunk-times of the bounds max(6m + P - 1, 4P + 2m - 1) (rank P-1 runs
// both F's of every micro-batch before the last one's F and B chains and W).
#pragma once

#include "schedule/instruction.h"
#include "schedule/pipeline_timeline.h"

namespace omnibal::schedule {

/// The bounds of build_zb_v_schedule's greedy (0: the default).
struct ZbVOptions {
  /// Most chunk graphs plus deferred W's a rank holds at once; 0: 2P (1F1B's activation memory).
  int max_held = 0;
  /// Most deferred W's a rank holds; a B that would exceed it runs a W first. 0: 2P.
  int max_deferred_weights = 0;
};

/// ZB-V for P stages and m micro-batches: per rank, Forward / BackwardInput / BackwardWeight on
/// chunks 0 and 1 (ChunkLayout::kV) with their receives and sends, ending in ReduceGrads and
/// OptimizerStep. `costs` (may be null: every F, B and W 1 s, transfers free) are the step's
/// [2P][m] costs with costs->layout == kV (forward_s, backward_input_s, backward_weight_s,
/// send_activation_s, send_grad_s are read). The result is a pure function of its arguments: the
/// ranks of one pipeline given the same costs build the same lists. Throws omnibal::Error when
/// P < 1, m < 1, a bound is negative or the costs have another shape or layout.
StageSchedules build_zb_v_schedule(int stages, int micro_batches,
                                   const PipelineStepCosts* costs = nullptr,
                                   const ZbVOptions& options = {});

}  // namespace omnibal::schedule
