// Event-driven timing of one pipeline's per-stage instruction lists (one DP rank, one step), for
// 1F1B, interleaved 1F1B, ZB-H1 and ZB-V (schedules.h). Every instruction is an event on its
// rank's clock: compute (Forward, Backward, BackwardInput, BackwardWeight) occupies the rank for
// its duration; sends are non-blocking and deliver their message after a transfer time,
// transfers from one rank to another (one ordered rank pair, all kinds and chunks) serialised; a
// same-rank hand-over (P == 1 with v > 1, ZB-V's P-1 -> P) is free; a receive waits until its
// message has arrived, and messages of one rank pair are matched in posting order (NCCL,
// schedule_checker.h).
// Walking stops at ReduceGrads: the time each rank reaches it is returned, and the DP-level
// collective, DP wait and optimizer are the caller's (training_simulator.h), because they couple
// the pipelines of all DP ranks. Micro-batches may differ in cost (ISF packs vs random
// micro-batches have different shapes). It also tracks the activation bytes each rank holds:
// kept_bytes from a Forward to its Backward; under the split backward, kept_bytes until
// BackwardInput and weight_kept_bytes from there to BackwardWeight; plus transient_bytes while
// any backward compute runs.
#pragma once

#include <vector>

#include "schedule/instruction.h"

namespace omnibal::schedule {

/// Costs of one step of one pipeline. Every matrix is [V][m]: V = P x v virtual stages (row k =
/// virtual_stage(chunk, stage, P, layout), instruction.h), m micro-batches; without
/// interleaving V = P.
struct PipelineStepCosts {
  /// How the rows' virtual stages lie on the ranks: kLoop (1F1B, interleaved, ZB-H1) or kV
  /// (ZB-V, schedules.h). Rows are always in virtual-stage (model) order.
  ChunkLayout layout = ChunkLayout::kLoop;
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
  std::vector<std::vector<double>> transient_bytes;  ///< extra bytes while a backward runs
  /// [P] or empty: work another thread does on each rank's core from the step's start (seconds
  /// at the core's full speed; a CPU rank's loader building the next step's packs). It shares
  /// the core with compute: while both run each gets half (a Forward of c seconds lasts up to
  /// 2c), and it runs alone while the rank waits in a receive. What is left at ReduceGrads
  /// delays it.
  std::vector<double> background_s;

  /// Zero-filled costs for V virtual stages and m micro-batches.
  static PipelineStepCosts zeros(int virtual_stages, int micro_batches);
};

/// What one stage (pipeline rank, all its chunks) did during a step, up to its ReduceGrads.
struct StageTimeline {
  double ready_for_reduce_s = 0;      ///< time the stage reaches ReduceGrads (step starts at 0)
  double forward_busy_s = 0;          ///< sum of Forward durations
  double backward_busy_s = 0;         ///< sum of Backward and BackwardInput durations
  double backward_weight_busy_s = 0;  ///< sum of BackwardWeight durations (0 without ZB)
  double idle_s = 0;                  ///< waiting in receives before ReduceGrads (the bubble)
  double peak_activation_bytes = 0;   ///< max over time of held kept + transient bytes
  /// Most autograd graphs alive: (micro-batch, chunk) forwarded, Backward / BackwardInput not run.
  int peak_in_flight = 0;
};

/// One timed instruction of a walked timeline (the optional event log of run_pipeline_timeline):
/// compute ops span their duration; a receive spans its wait (start == end when the message was
/// already there); a send is posted at start_s (== end_s: sends do not block) and its message
/// arrives at arrival_s (the transfer on its link; == start_s for a same-rank hand-over).
/// Seconds from the step's start.
struct TimelineEvent {
  int stage = 0;  ///< pipeline rank
  Instruction instruction;
  double start_s = 0, end_s = 0;
  double arrival_s = 0;  ///< sends only: when the message is at the receiver
};

/// Walks `lists` (P = lists.size() ranks) with `costs` (V = P x v rows, v = V / P chunks per
/// rank; instruction {mb, c} on rank s reads row virtual_stage(c, s, P, costs.layout), column
/// mb). Returns one entry per
/// rank. Throws omnibal::Error when the lists deadlock, a receive meets another message, an
/// instruction's micro-batch or chunk is out of range, the nine cost matrices do not all have
/// shape [V][m] with V a positive multiple of P, or background_s is neither empty nor P values
/// >= 0.
std::vector<StageTimeline> run_pipeline_timeline(const StageSchedules& lists,
                                                 const PipelineStepCosts& costs);
/// The same walk, also appending every executed instruction before ReduceGrads to `events` (in
/// execution order per rank; ranks interleave) when it is not null. Used for simulated traces
/// (schedule/step_trace.h); the returned timelines are those of the overload above.
std::vector<StageTimeline> run_pipeline_timeline(const StageSchedules& lists,
                                                 const PipelineStepCosts& costs,
                                                 std::vector<TimelineEvent>* events);

}  // namespace omnibal::schedule
