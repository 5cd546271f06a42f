// Event-driven simulation of training steps over TP x DP x PP. Each DP rank's pipeline walks the
// instruction lists of its schedule (schedule/schedules.h: 1F1B, interleaved 1F1B, ZB-H1, ZB-V) with
// per-micro-batch costs from a CostModel (micro-batches differ in shape), via
// schedule::run_pipeline_timeline. A recomputed unit's forward costs its checkpointed forward and
// its backward adds the rerun (UnitCost::checkpointed_forward, rerun_seconds).
// Schedules: the split has P x v chunks in virtual-stage order (chunk k on pipeline rank
// stage_of_virtual(k, P, chunk_layout(schedule)): k % P, or ZB-V's V; v = virtual_stages under
// interleaved, 2 under ZB-V, else 1). Under ZB-H1 and ZB-V each chunk's backward is split into
// B = backward - W and W = the units' weight_backward_s() (unit_cost_table.h); recomputation and
// the TP all-reduces (input gradients) stay in B; a deferred W keeps deferred_weight_bytes().
// Under ZB-V a recomputed unit's W runs inside its B (lib/schedule/README.md) and keeps nothing
// past it, and each DP rank's lists are built for its own step costs (zb_v_schedule.h).
// Static bytes, optimizer time, the DP all-reduce and overheads are per rank (its chunks summed),
// and every per-stage report below is per pipeline rank.
// TP (tensor_parallel.h): the cost tables are per TP rank (their `tp` must equal setup.tp); the
// TP ranks of a stage run in lockstep, so one TP rank stands for its group. Each unit's TP
// all-reduces (forward; backward, plus the forward's again when recomputed) are added to its
// Forward / Backward on the TP link, blocking (no overlap with compute, as in Megatron without
// tp-comm-overlap).
// The DP level couples the pipelines: stage s's gradient all-reduce (or ZeRO-1 reduce-scatter
// + all-gather, same volume) starts when the slowest DP rank's stage s is ready, takes
// 2 (dp-1)/dp * bytes / bandwidth, then the (memory-bound) optimizer step runs; the step ends
// when the last stage finishes.
// DP collectives (SimulatorSetup::shard, ::overlap, issue 40), on the DP link (bandwidth
// data_parallel_bandwidth, the bytes of the bf16 weights, as above; each per-unit call also pays
// the link's latency, device.collective_latency_s by default; the one blocking reduction per
// stage keeps the formula above, without latency):
//   none / optimizer, overlap off: the blocking reduction above (bit for bit what the simulator
//     always did).
//   none / optimizer, overlap on (Megatron overlap_grad_reduce / overlap_param_gather, DeepSpeed
//     overlap_comm): each unit is a bucket; its all-reduce (none: 2 (dp-1)/dp B / bw) or
//     reduce-scatter (optimizer: (dp-1)/dp B / bw) starts when the unit's backward of the step's
//     last micro-batch is done and the link is free, so it hides behind the backward of the
//     units after it in backward order; what runs past the end of that backward (at least the
//     last bucket's) stays exposed after ReduceGrads. The window is the last micro-batch's
//     backward on the rank of the DP rank that starts the reduction (the slowest), its chunks
//     from the last to the first, their units in reverse, each unit's whole backward (under
//     ZB-H1 too, B and W: a simplification). Under optimizer the updated parameters are
//     all-gathered bucket by bucket ahead of the next step's forward: each unit's all-gather
//     must end before its forward of the first micro-batch (this step's first micro-batch
//     stands for the next step's), and what delays that forward chain is exposed. Both
//     exposures are the stage's reduce_s, in the dp_reduce span.
//   full (ZeRO-3 / FSDP, PP 1 only: PP > 1 is refused, as DeepSpeed does): per micro-batch each
//     unit's parameters are all-gathered before its forward and again before its backward
//     ((dp-1)/dp B / bw each), its gradient reduce-scattered after its backward (trainable units;
//     frozen ones skip it, and the backward gather too when they have no backward); every
//     collective takes every DP rank and starts when the last of them issues it, one after
//     another on the link. Overlap on: the next compute's all-gather is issued when the current
//     compute starts (prefetch one ahead: per unit max(compute, comm)), a reduce-scatter when
//     its backward ends, and nothing blocks but a compute on its own all-gather; the first
//     all-gather of the step and the last reduce-scatter never hide. Overlap off: every
//     collective blocks every rank (compute + comm). The optimizer updates the 1/dp shard.
//     The DP ranks are coupled at every unit, so a step costs about the sum over units of the
//     slowest rank's time. A rank's wait is comm while the link is busy and dp_wait while it
//     waits for another rank to issue; bubble is 0. Not modelled under full: dp_jitter and the
//     loader's background work (refused), the collectives in the trace (its gaps are the waits).
//
// Per device, step time = useful + padding + recompute + tp_comm + bubble + dp_wait + comm,
// where
//   padding   = compute spent on padded positions (padded minus unpadded compute),
//   recompute = the reruns of recomputed units in the backward (rerun_seconds),
//   tp_comm   = the TP all-reduces (those of padded positions and of recomputation included),
//   bubble    = pipeline idle before ReduceGrads + waiting after its own optimizer for the
//               step's last stage,
//   dp_wait   = waiting at ReduceGrads for the slowest DP rank,
//   comm      = all-reduce + optimizer.
// Reports average these over devices, so they add up to the step time exactly.
// Not modelled: network contention between pipelines, kernel launch gaps, stragglers.
//
// StageOverheads carries costs outside the per-unit table that a measured host run has and the
// analytic GPU model leaves out (all default to none): per micro-batch on each stage a fixed part
// plus parts proportional to the micro-batch's tiles, real tokens and samples (pack hand-over,
// image and token tensors, message headers, the loader thread sharing the rank's core; added to
// every Forward), a fraction of the stage's table compute (scales Forward and Backward), and a
// measured per-step cost per stage that replaces the analytic optimizer
// time (optimizer, gradient norm and clipping on the host). `omnibal-plan simulate` and
// scripts/bench/sim_vs_measured.sh use them; where the figures come from is documented there.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/choices.h"
#include "partition/cost_model.h"
#include "partition/device_spec.h"
#include "partition/stage_partition.h"
#include "partition/tensor_parallel.h"
#include "schedule/instruction.h"
#include "schedule/pipeline_timeline.h"
#include "schedule/step_trace.h"

namespace omnibal::partition {

/// Micro-batch loads of one step: loads[r][i] is DP rank r's i-th micro-batch (every rank
/// the same count m).
using StepLoads = std::vector<std::vector<MicroBatchLoad>>;

/// Per-stage costs outside the unit table, seconds (empty vectors: none; otherwise one entry
/// per pipeline rank, each >= 0; a compute fraction > -1). A micro-batch of t tiles, n real tokens and k samples costs
/// per_micro_batch_s[s] + t per_tile_s[s] + n per_token_s[s] + k per_sample_s[s] on stage s,
/// added to its Forward (split evenly over the stage's v chunks under interleaved: a cost of
/// the micro-batch, not of the chunk). compute_fraction[s] scales the unit table's compute on
/// stage s (forward, backward, recomputation) by 1 + compute_fraction[s]: time the table's
/// units, profiled one by one, do not show when chained on a stage, or (negative) a table
/// profiled while the host ran slower than during the run. loader_per_micro_batch_s[s] m is
/// work on stage s's core from the step's start (PipelineStepCosts::background_s): the loader
/// thread building the next step's m packs shares the core with the first forwards (each runs
/// at half speed while it lasts) and has it alone while the stage waits in a receive, so part
/// of it hides in the bubble (traces of the 2-core host: stage 0's first one or two forwards
/// run up to twice as long as the others, by about 4-8 ms per micro-batch of the step).
/// checkpoint_fraction[s] scales stage s's checkpointed compute (a recomputed unit's forward
/// without autograd and its rerun in the backward) by a further fraction: it runs at
/// 1 + compute_fraction[s] + checkpoint_fraction[s] times its table time (> -1 in all), for
/// what a table profiled unit by unit does not show of recomputation inside a training step
/// (the 2-core host: a fully recomputed stage's forward about 15 % faster than a plain one, its
/// reruns faster than the profiled ones).
struct StageOverheads {
  std::vector<double> per_micro_batch_s;    ///< [stage]: fixed part per micro-batch
  std::vector<double> per_tile_s;           ///< [stage]: per tile of the micro-batch
  std::vector<double> per_token_s;          ///< [stage]: per real LLM token of the micro-batch
  std::vector<double> per_sample_s;         ///< [stage]: per sample of the micro-batch
  std::vector<double> compute_fraction;     ///< [stage]: extra fraction of the table's compute
  std::vector<double> checkpoint_fraction;  ///< [stage]: further fraction of checkpointed compute
  std::vector<double> per_step_s;           ///< [stage]: replaces the analytic optimizer time
  /// [stage]: per micro-batch of the step, work sharing the stage's core from the step's start
  /// (the loader's workers building the next packs when the step takes its m)
  std::vector<double> loader_per_micro_batch_s;

  /// Seconds stage s adds to micro-batch `load` (0 where a vector is empty).
  double micro_batch_s(int stage, const MicroBatchLoad& load) const;
};

/// Everything fixed for a run.
struct SimulatorSetup {
  const CostModel* model = nullptr;
  /// P x v chunks in virtual-stage order (v = chunks_per_rank(schedule, virtual_stages)).
  Partition partition;
  PipelineSchedule schedule = PipelineSchedule::k1F1B;  ///< not kAuto
  int virtual_stages = 1;                               ///< v under kInterleaved (>= 2), else 1
  std::vector<bool> recompute;  ///< per unit: checkpointed (re-run forward in backward)
  int dp = 1;
  int tp = 1;  ///< TP ranks per group (innermost, then DP, then PP); the tables' tp
  DeviceSpec device;
  /// The TP all-reduce link; unset: tp_link(device, tp) (NVLink for a GPU). Give a measured
  /// bandwidth and latency for a host run (`omnibal-plan simulate --tp-link-gbps`).
  std::optional<TpLink> tp_link;
  std::vector<double> static_bytes;  ///< per rank: params + grads + optimizer + buffers
  /// What DP shards (train.shard): the optimizer time is per shard under optimizer and full,
  /// and the DP collectives follow from it (file comment).
  ShardMode shard = ShardMode::kOptimizer;
  /// comm.overlap: DP collectives overlapped with compute (file comment); false: blocking.
  bool overlap = false;
  /// The DP link; unset: data_parallel_bandwidth(device, dp, tp) and
  /// device.collective_latency_s per call of the per-unit collectives.
  std::optional<TpLink> dp_link;
  StageOverheads overheads;  ///< per rank: host costs outside the table (default: none)
  /// Relative standard deviation (>= 0) of each DP rank's time to its gradient reduction, per
  /// step and independent between ranks (host jitter, clocks); 0: none. The collective waits
  /// for the slowest rank, so with dp > 1 a stage's reduction starts at the expected maximum
  /// over ranks of N(ready_r, (dp_jitter ready_r)^2) instead of the maximum of ready_r
  /// (expected_maximum). On the 2-core host the slower DP rank's busy time is 1-6 % of a step
  /// above the ranks' mean beyond what the packs explain (scripts/bench/host_overheads.py
  /// --pass jitter measures it).
  double dp_jitter = 0;

  /// Pipeline ranks P: partition.stages() / chunks per rank.
  int ranks() const;
  /// dp_link, or the device's DP link for dp x tp ranks (see dp_link).
  TpLink data_parallel_link() const;
};

/// Device-averaged time components of one step or a whole epoch, seconds.
struct TimeBreakdown {
  double useful_s = 0, padding_s = 0, recompute_s = 0, bubble_s = 0, dp_wait_s = 0, comm_s = 0;
  double tp_comm_s = 0;  ///< TP all-reduces inside Forward / Backward
  double total() const {
    return useful_s + padding_s + recompute_s + tp_comm_s + bubble_s + dp_wait_s + comm_s;
  }
  TimeBreakdown& operator+=(const TimeBreakdown& o);
  TimeBreakdown scaled(double f) const;
};

/// Per-stage view of a step, averaged over DP ranks (peak memory: max over ranks).
struct StageReport {
  double forward_s = 0, backward_s = 0, idle_s = 0, dp_wait_s = 0, reduce_s = 0;
  double tp_comm_s = 0;  ///< TP all-reduce seconds inside forward_s + backward_s
  /// Checkpointed compute inside forward_s + backward_s: recomputed units' forwards and reruns
  double checkpointed_s = 0;
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
  /// [DP rank]: forward + backward seconds summed over the rank's stages (the trainer's
  /// metrics.jsonl dp_ranks busy_s)
  std::vector<double> dp_busy_s;
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
/// model's units and ranks, an overhead is negative, model is null, tp < 1, the model's
/// tables are per rank of another tp than setup.tp, the schedule is kAuto, the chunks do not
/// divide into ranks, schedule::build_schedule refuses (interleaved: m % P != 0), or shard is
/// kFull with P > 1, a DP jitter or loader overheads.
StepReport simulate_step(const SimulatorSetup& setup, const StepLoads& loads);
/// The same step, also filling `trace` (when not null) with every DP rank's timeline as
/// trace spans (schedule/step_trace.h, microseconds from the step's start): the pipeline's
/// forward / backward / backward_input / backward_weight / recv / send, then per stage a
/// dp_reduce span from the stage's ReduceGrads (its DP wait included, as the trainer's blocking
/// collective measures it) to the end of the all-reduce, and an optimizer span; and each
/// micro-batch's (samples, tiles, real tokens). Under shard full: one forward and one backward
/// span per unit and micro-batch, then the optimizer.
StepReport simulate_step(const SimulatorSetup& setup, const StepLoads& loads,
                         schedule::StepTrace* trace);

/// One DP rank's pipeline costs of one step, what simulate_step walks for that rank: [P v][m]
/// (rows in virtual-stage order, layout schedule::chunk_layout(setup.schedule)) F, B, W and
/// transfer seconds and kept bytes per chunk and micro-batch `loads[i]`, from the cost model
/// under the recompute flags, with the TP all-reduces, the overheads (compute and checkpoint
/// fractions, host costs in F, the loader as background_s) and the pipeline link of
/// setup.device. Pure: the same setup and loads give bitwise the same costs on every process
/// (the trainer's ZB-V lists rely on it, lib/train/step_programs.h). Static bytes, dp_jitter and
/// the DP link are not read. Throws omnibal::Error when `loads` is empty, shard is kFull, or as
/// simulate_step on a bad model, schedule, split, tp, recompute flags or overheads.
schedule::PipelineStepCosts rank_step_costs(const SimulatorSetup& setup,
                                            const std::vector<MicroBatchLoad>& loads);

/// The instruction lists (one per pipeline rank) one DP rank's pipeline runs for a step of
/// `loads`, as simulate_step walks them: under ZB-V built for the rank's own costs
/// (schedule::build_zb_v_schedule on rank_step_costs), otherwise the schedule's fixed lists
/// (schedule::build_schedule, which do not depend on the loads). Pure, as rank_step_costs.
/// Throws what rank_step_costs or the builders throw.
schedule::StageSchedules rank_step_schedules(const SimulatorSetup& setup,
                                             const std::vector<MicroBatchLoad>& loads);

/// Simulates every step in order and sums.
RunReport simulate_run(const SimulatorSetup& setup, const std::vector<StepLoads>& steps);

/// E[max_i X_i] for independent X_i ~ N(mean[i], sd[i]^2) (sd >= 0, equal sizes, not empty),
/// by numerical integration of 1 - prod_i Phi((x - mean_i) / sd_i); max(mean) when every sd
/// is 0. Two equal means m and sd s: m + s / sqrt(pi). Throws omnibal::Error on bad input.
double expected_maximum(const std::vector<double>& mean, const std::vector<double>& sd);

/// Bandwidth between neighbouring pipeline stages: NVLink when dp * tp < gpus_per_node (the
/// next stage is in the same node), else the per-GPU network link.
double pipeline_link_bandwidth(const DeviceSpec& device, int dp, int tp);
/// Bandwidth of the DP all-reduce: NVLink when the DP group fits in a node, else the network.
double data_parallel_bandwidth(const DeviceSpec& device, int dp, int tp);

}  // namespace omnibal::partition
