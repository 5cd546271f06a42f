// Event-driven timing of one pipeline's per-stage instruction lists (one DP rank, one step).
// Every instruction is an event on its stage's clock: compute (Forward, Backward) occupies the
// stage for its duration; sends are non-blocking and deliver their message after a transfer time
// (transfers on the same link direction are serialised); a receive waits until its message has
// arrived. Walking stops at ReduceGrads: the time each stage reaches it is returned, and the
// DP-level collective, DP wait and optimizer are the caller's (training_simulator.h), because
// they couple the pipelines of all DP ranks. Micro-batches may differ in cost (ISF packs vs
// random micro-batches have different shapes). It also tracks the activation bytes each stage
// holds: kept_bytes from a Forward to its Backward, plus transient_bytes during a Backward.
#pragma once

#include <vector>

#include "schedule/instruction.h"

namespace omnibal::schedule {

/// Costs of one step of one pipeline: every matrix is [P][m] (stage, micro-batch).
struct PipelineStepCosts {
  std::vector<std::vector<double>> forward_s;          ///< Forward duration, seconds
  std::vector<std::vector<double>> backward_s;         ///< Backward duration incl. recompute, s
  std::vector<std::vector<double>> send_activation_s;  ///< transfer s -> s+1 (last stage unused)
  std::vector<std::vector<double>> send_grad_s;        ///< transfer s -> s-1 (stage 0 unused)
  std::vector<std::vector<double>> kept_bytes;         ///< activations held Forward..Backward
  std::vector<std::vector<double>> transient_bytes;    ///< extra bytes while Backward runs

  /// Zero-filled costs for P stages and m micro-batches.
  static PipelineStepCosts zeros(int stages, int micro_batches);
};

/// What one stage did during a step, up to its ReduceGrads.
struct StageTimeline {
  double ready_for_reduce_s = 0;     ///< time the stage reaches ReduceGrads (step starts at 0)
  double forward_busy_s = 0;         ///< sum of Forward durations
  double backward_busy_s = 0;        ///< sum of Backward durations
  double idle_s = 0;                 ///< waiting in receives before ReduceGrads (the bubble)
  double peak_activation_bytes = 0;  ///< max over time of held kept + transient bytes
  int peak_in_flight = 0;            ///< max micro-batches forwarded and not yet backwarded
};

/// Walks `lists` with `costs`. Throws omnibal::Error when the lists deadlock or the cost
/// matrices do not have shape [P][m] with m = the number of Forward instructions of stage 0.
std::vector<StageTimeline> run_pipeline_timeline(const StageSchedules& lists,
                                                 const PipelineStepCosts& costs);

}  // namespace omnibal::schedule
