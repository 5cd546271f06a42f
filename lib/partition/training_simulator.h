// Event-driven simulation of training steps over DP x PP (TP enters as a cost factor of the
// cost model). Each DP rank's pipeline walks the 1F1B instruction lists of schedule/ with
// per-micro-batch costs from a CostModel (micro-batches differ in shape), via
// schedule::run_pipeline_timeline. Recomputed units add their forward time to the backward.
// The DP level couples the pipelines: stage s's gradient all-reduce (or ZeRO-1 reduce-scatter
// + all-gather, same volume) starts when the slowest DP rank's stage s is ready, takes
// 2 (dp-1)/dp * bytes / bandwidth, then the (memory-bound) optimizer step runs; the step ends
// when the last stage finishes. No overlap of the all-reduce with backward is modelled.
//
// Per device, step time = useful + padding + recompute + bubble + dp_wait + comm, where
//   padding   = compute spent on padded positions (padded minus unpadded cost),
//   recompute = forward time re-run in backward,
//   bubble    = pipeline idle before ReduceGrads + waiting after its own optimizer for the
//               step's last stage,
//   dp_wait   = waiting at ReduceGrads for the slowest DP rank,
//   comm      = all-reduce + optimizer.
// Reports average these over devices, so they add up to the step time exactly.
// Not modelled: network contention between pipelines, kernel launch gaps, stragglers.
//
// StageOverheads carries costs outside the per-unit table that a measured host run has and the
// analytic GPU model leaves out (both default to none): a fixed cost per micro-batch on each
// stage (pack hand-over, message headers, the input-gradient buffer; added to every Forward)
// and a measured per-step cost per stage that replaces the analytic optimizer time (optimizer,
// gradient norm and clipping on the host). `omnibal-plan simulate` and
// scripts/bench/sim_vs_measured.sh use them; where the figures come from is documented there.
#pragma once

#include <cstdint>
#include <vector>

#include "partition/cost_model.h"
#include "partition/device_spec.h"
#include "partition/stage_partition.h"

namespace omnibal::partition {

/// Micro-batch loads of one step: loads[r][i] is DP rank r's i-th micro-batch (every rank
/// the same count m).
using StepLoads = std::vector<std::vector<MicroBatchLoad>>;

/// Per-stage costs outside the unit table, seconds (empty vectors: none).
struct StageOverheads {
  std::vector<double> per_micro_batch_s;  ///< [stage]: added to every Forward of the stage
  std::vector<double> per_step_s;         ///< [stage]: replaces the analytic optimizer time
};

/// Everything fixed for a run.
struct SimulatorSetup {
  const CostModel* model = nullptr;
  Partition partition;
  std::vector<bool> recompute;  ///< per unit: checkpointed (re-run forward in backward)
  int dp = 1;
  int tp = 1;  ///< only for rank placement (TP innermost, then DP, then PP)
  DeviceSpec device;
  std::vector<double> static_bytes;  ///< per stage: params + grads + optimizer + buffers
  bool zero1 = true;                 ///< optimizer state sharded over DP (optimizer time / dp)
  StageOverheads overheads;          ///< host costs outside the unit table (default: none)
};

/// Device-averaged time components of one step or a whole epoch, seconds.
struct TimeBreakdown {
  double useful_s = 0, padding_s = 0, recompute_s = 0, bubble_s = 0, dp_wait_s = 0, comm_s = 0;
  double total() const {
    return useful_s + padding_s + recompute_s + bubble_s + dp_wait_s + comm_s;
  }
  TimeBreakdown& operator+=(const TimeBreakdown& o);
  TimeBreakdown scaled(double f) const;
};

/// Per-stage view of a step, averaged over DP ranks (peak memory: max over ranks).
struct StageReport {
  double forward_s = 0, backward_s = 0, idle_s = 0, dp_wait_s = 0, reduce_s = 0;
  double peak_memory_bytes = 0;
};

/// One simulated step.
struct StepReport {
  double step_s = 0;
  TimeBreakdown breakdown;  ///< device averages; breakdown.total() == step_s
  std::vector<StageReport> stages;
  double peak_memory_bytes = 0;  ///< max over devices
  int64_t samples = 0;
  int64_t tiles = 0;
  int64_t tokens = 0;  ///< real LLM tokens
};

/// A run of steps (an epoch or part of one).
struct RunReport {
  double seconds = 0;          ///< sum of step times
  TimeBreakdown breakdown;     ///< sums of the step breakdowns
  double bubble_fraction = 0;  ///< bubble / seconds
  double peak_memory_bytes = 0;
  std::vector<double> stage_busy_s, stage_idle_s;  ///< per stage, summed over steps
  int64_t steps = 0, samples = 0;
};

/// Simulates one step. Throws omnibal::Error when ranks have different micro-batch counts,
/// the setup's vectors (recompute flags, static bytes, non-empty overheads) do not match the
/// model's units and stages, an overhead is negative, or model is null.
StepReport simulate_step(const SimulatorSetup& setup, const StepLoads& loads);

/// Simulates every step in order and sums.
RunReport simulate_run(const SimulatorSetup& setup, const std::vector<StepLoads>& steps);

/// Bandwidth between neighbouring pipeline stages: NVLink when dp * tp < gpus_per_node (the
/// next stage is in the same node), else the per-GPU network link.
double pipeline_link_bandwidth(const DeviceSpec& device, int dp, int tp);
/// Bandwidth of the DP all-reduce: NVLink when the DP group fits in a node, else the network.
double data_parallel_bandwidth(const DeviceSpec& device, int dp, int tp);

}  // namespace omnibal::partition
