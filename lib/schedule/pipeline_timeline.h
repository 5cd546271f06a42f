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

/// Costs of one step of one pipeline. Every matrix is [V][m]: V = P x v virtual stages (row
/// k = chunk * P + stage, instruction.h), m micro-batches; without interleaving V = P.
struct PipelineStepCosts {
  std::vector<std::vector<double>> forward_s;          ///< Forward duration, seconds
  std::vector<std::vector<double>> backward_s;         ///< Backward (B + W) incl. recompute, s
  std::vector<std::vector<double>> backward_input_s;   ///< BackwardInput (ZB's B) incl. recompute
  std::vector<std::vector<double>> backward_weight_s;  ///< BackwardWeight (ZB's W), seconds
  std::vector<std::vector<double>> send_activation_s;  ///< transfer k -> k+1 (last unused)
  std::vector<std::vector<double>> send_grad_s;        ///< transfer k -> k-1 (first unused)
  /// Activations held from Forward to Backward (or to BackwardWeight under ZB-H1).
  std::vector<std::vector<double>> kept_bytes;
  /// The part of kept_bytes still held between BackwardInput and BackwardWeight (each linear's
  /// input and output gradient); the rest is freed at BackwardInput.
  std::vector<std::vector<double>> weight_kept_bytes;
  std::vector<std::vector<double>> transient_bytes;    ///< extra bytes while a backward runs

  /// Zero-filled costs for V virtual stages and m micro-batches.
  static PipelineStepCosts zeros(int virtual_stages, int micro_batches);
};

/// What one stage (pipeline rank, all its chunks) did during a step, up to its ReduceGrads.
struct StageTimeline {
  double ready_for_reduce_s = 0;     ///< time the stage reaches ReduceGrads (step starts at 0)
  double forward_busy_s = 0;         ///< sum of Forward durations
  double backward_busy_s = 0;        ///< sum of Backward durations
  double idle_s = 0;                 ///< waiting in receives before ReduceGrads (the bubble)
  double peak_activation_bytes = 0;  ///< max over time of held kept + transient bytes
  int peak_in_flight = 0;            ///< max micro-batches forwarded and not yet backwarded
};

/// Walks `lists` (P = lists.size() ranks) with `costs` (V = P x v rows). Returns one entry per
/// rank. Throws omnibal::Error when the lists deadlock or the cost matrices do not have shape
/// [V][m] with V a multiple of P.
std::vector<StageTimeline> run_pipeline_timeline(const StageSchedules& lists,
                                                 const PipelineStepCosts& costs);

}  // namespace omnibal::schedule
