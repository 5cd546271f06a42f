// Per-stage device memory under 1F1B (OmniBal §3.3, docs/paper.md): for stage s of P with m
// micro-batches,
//   static      = weights + gradients + optimizer state of the stage's units (the optimizer
//                 state divided by dp under ZeRO-1; frozen units have neither grads nor state)
//   activations = min(m, P - s) micro-batches in flight, each keeping, per unit, either its
//                 activations (not recomputed) or only its input (recomputed), plus, while a
//                 recomputed unit runs its backward, that unit's activations once (transient)
//   buffers     = the received input and sent output of one micro-batch in both directions
//                 (activation and gradient: 2 x (input + output)) plus a fixed workspace
// against a budget. Unit sizes come from the per-unit cost table at a reference load (use the
// largest micro-batch the plan admits, e.g. the ISF budget Q_v / Q_t, so the plan holds for
// every micro-batch). Default bytes per parameter follow mixed-precision Adam as in Megatron:
// bf16 weights (2), fp32 main gradients (4), fp32 master weights + Adam m and v (12).
// Tensor parallelism: everything is per TP rank because the table is (unit_cost_table.h: a
// profiled table at tp > 1 holds the TP-sharded units, the analytic model shards itself:
// block matrices, column-parallel biases, qk-norm weights, vocab-parallel embedding and head
// 1/tp; norms, row-parallel biases, layer scales, vit_embed and the projector full). Weights,
// gradients and optimizer state follow from the per-rank parameter bytes; ZeRO-1 shards the
// per-rank optimizer state over the DP group of that TP rank.
// Sharding (MemoryOptions::shard, train.shard): none keeps everything on every DP rank;
// optimizer (ZeRO-1) divides the optimizer state by dp; full (ZeRO-3 / FSDP) divides weights,
// gradients and optimizer state by dp and adds `gathered`: the unsharded units in flight. While
// a unit computes its forward it holds its full parameters and the next unit's, prefetched;
// during its backward its full parameters, its full gradient (grad_bytes_per_param, before the
// reduce-scatter) and the next unit's parameters in backward order (FSDP2 / DeepSpeed prefetch
// one unit ahead); `gathered` is the largest such moment over the rank's units, chunks taken in
// order. Counted at dp 1 too (a runtime that skips the gather there holds less); the padding of
// each flat shard to a multiple of dp (< dp elements per unit) is not counted. Activations: the column-parallel
// outputs 1/tp, the rest full; buffers: full activations (no sequence parallelism). The model
// never divides by tp itself; MemoryOptions::tp must equal the table's tp.
// Schedules (schedule/schedules.h; ScheduleLayout): the split has P x v chunks (chunk k on rank
// k % P, or ZB-V's V: rank s holds k = s and 2P - 1 - s) and memory is per pipeline rank, the sum over its chunks of static bytes and buffers (one
// workspace). Activations are counted from the schedule's own lists (in_flight_states): at every
// moment of rank s's list, per chunk c, graphs[c] micro-batches forwarded and not yet backwarded
// (B under ZB-H1) keep their activations (or checkpoints) and deferred[c] micro-batches whose W is
// pending keep the chunk's deferred_weight_bytes (unit_cost_table.h); the activations term is the
// largest such sum. 1F1B: min(m, P - s) graphs. ZB-H1: min(m, P - s) graphs and up to s deferred
// W's before a B, one graph fewer and one W more right after it (Qi et al. §3.1: the W inputs are
// what B does not free). Interleaved: Megatron's warm-up of (P - s - 1) * 2 + (v - 1) * P
// forwards plus one, spread over the rank's chunks (tests/memory: P 4, v 2, m 8 -> rank 0 holds
// (7, 4) or (8, 3) over its two chunks). ZB-V: the lists built on equal costs (zb_v_schedule.h;
// every build holds at most 2P graphs plus deferred W's per rank); a recomputed unit's W runs
// right after its B (lib/schedule/README.md), so only the units kept deferred_weight_bytes()
// count for a deferred W, and a recomputed unit keeps its checkpoint until B and nothing after.
// Not modelled: allocator fragmentation (keep a margin in the budget), CUDA context.
#pragma once

#include <vector>

#include "core/choices.h"

#include "partition/stage_partition.h"
#include "partition/unit_cost_table.h"

namespace omnibal::memory {

/// Memory accounting options.
struct MemoryOptions {
  int dp = 1;  ///< data-parallel ranks (the sharding divides by these)
  int tp = 1;  ///< tensor-parallel ranks (the table's tp)
  /// What DP shards: kNone, kOptimizer (ZeRO-1: optimizer state / dp), kFull (ZeRO-3: weights,
  /// gradients and optimizer state / dp, plus the gathered units in flight)
  ShardMode shard = ShardMode::kOptimizer;
  double weight_bytes_per_param = 2;            ///< bf16 weights (the table's parameter_bytes unit)
  double grad_bytes_per_param = 4;              ///< fp32 gradient accumulation buffer
  double optimizer_bytes_per_param = 12;        ///< fp32 master + Adam m + v
  double workspace_bytes = 1.0 * (1ull << 30);  ///< cuBLAS/NCCL workspaces, 1 GiB
};

/// Bytes of one stage, by category.
struct StageMemory {
  double weights = 0, gradients = 0, optimizer = 0, activations = 0, transient = 0, buffers = 0;
  /// Under ShardMode::kFull: the largest unsharded parameters + gradient in flight (see the
  /// file comment); 0 otherwise.
  double gathered = 0;
  /// Everything except activations and transient: what does not depend on in-flight data.
  double static_bytes() const { return weights + gradients + optimizer + buffers + gathered; }
  double total() const { return static_bytes() + activations + transient; }
};

/// The pipeline schedule memory is counted under.
struct ScheduleLayout {
  PipelineSchedule schedule = PipelineSchedule::k1F1B;  ///< not kAuto
  int ranks = 1;                                        ///< P pipeline ranks
  int virtual_stages = 1;  ///< v chunks per rank under kInterleaved; ignored otherwise
  int micro_batches = 1;   ///< m

  /// v under kInterleaved, else 1.
  int chunks_per_rank() const;
  /// Parts of the split: P x chunks_per_rank().
  int chunks() const { return ranks * chunks_per_rank(); }
  /// The part (virtual stage) of chunk `chunk` of pipeline rank `rank`: c P + s, or ZB-V's V
  /// (schedule::chunk_layout).
  int virtual_stage(int chunk, int rank) const;
  /// The layout of a split of `chunks` parts under `schedule`; throws omnibal::Error when the
  /// parts do not divide into ranks of chunks_per_rank chunks.
  static ScheduleLayout of(PipelineSchedule schedule, int virtual_stages, int chunks,
                           int micro_batches);
};

/// One moment of a rank's list at which its activations may peak; per chunk c of the rank
/// (virtual stage ScheduleLayout::virtual_stage(c, s)): graphs[c] autograd graphs alive,
/// deferred[c] pending W's.
struct InFlightState {
  std::vector<int> graphs, deferred;
  bool operator==(const InFlightState& o) const {
    return graphs == o.graphs && deferred == o.deferred;
  }
};

/// Every rank's candidate peak moments, [rank][state]: the states right before each backward
/// compute (Backward / BackwardInput) and right after each BackwardInput of
/// schedule::build_schedule(layout), none dominated by another (all counts <=). 1F1B gives one
/// state, {min(m, P - s)}. Throws what build_schedule throws.
std::vector<std::vector<InFlightState>> in_flight_states(const ScheduleLayout& layout);

/// Per chunk, the most graphs and deferred W's of `states` (each chunk's own peak: an upper bound
/// of every state, used where one linear count is needed, the recompute knapsack of interleaved
/// v > 1; ZB-V's knapsack bounds every state itself, multi_state_knapsack.h).
InFlightState peak_per_chunk(const std::vector<InFlightState>& states);

/// Memory of pipeline rank `rank` of `partition` (layout.chunks() parts) under `layout`, with
/// `states` = in_flight_states(layout)[rank] (passed in: planners evaluate many splits of one
/// layout), per-unit recompute flags and options, bytes per TP rank. Throws omnibal::Error when
/// sizes disagree or the table's tp differs from options.tp.
StageMemory rank_memory(const partition::UnitCostTable& table,
                        const partition::Partition& partition, int rank,
                        const ScheduleLayout& layout, const std::vector<InFlightState>& states,
                        const std::vector<bool>& recompute, const MemoryOptions& options);

/// Memory of stage `stage` of `partition` with `micro_batches` in flight per 1F1B, the given
/// per-unit recompute flags (indexed by unit, size = table units) and options, in bytes per TP
/// rank. Throws omnibal::Error when sizes disagree or the table's tp differs from options.tp.
StageMemory stage_memory(const partition::UnitCostTable& table,
                         const partition::Partition& partition, int stage, int micro_batches,
                         const std::vector<bool>& recompute, const MemoryOptions& options);

/// Bytes one in-flight micro-batch keeps in units [begin, end) under the recompute flags.
double kept_activation_bytes(const partition::UnitCostTable& table, int begin, int end,
                             const std::vector<bool>& recompute);
/// Bytes one deferred W keeps in units [begin, end) (UnitCost::deferred_weight_bytes).
double deferred_weight_bytes(const partition::UnitCostTable& table, int begin, int end);

/// The trainer's bytes per parameter (train/distributed_optimizer.h) for train.precision and
/// train.shard at `dp` ranks: weights 4 (fp32) or 2 (bf16); gradients: the fp32 main gradient
/// (4; in bf16 each parameter's bf16 gradient is folded into it as autograd produces it, by a
/// post-accumulate-grad hook, so none is kept: on LibTorch < 2.1, which folds after each
/// backward, 2 more are alive until then and not counted here); optimizer state: Adam's fp32
/// moments (8) plus, in bf16, the fp32 master weights (4); divided by dp as `shard` says
/// (MemoryOptions::shard). Workspace as the default.
/// `tp`: parallel.tp, the TP degree of the cost table the options are used with (per-rank
/// bytes per parameter do not change with tp). Throws omnibal::Error when dp or tp < 1.
MemoryOptions trainer_memory_options(Precision precision, ShardMode shard, int dp, int tp = 1);

/// Under ShardMode::kFull, the largest unsharded bytes in flight over units [begin, end) of
/// `table` (StageMemory::gathered; units in forward order, the rank's chunks concatenated):
/// max over units u of P_u + P_next (forward) and P_u + G_u + P_prev (backward), P = a unit's
/// parameter bytes, G = its gradient at options.grad_bytes_per_param (0 when frozen).
double gathered_unit_bytes(const partition::UnitCostTable& table, const std::vector<int>& units,
                           const MemoryOptions& options);

/// Default budget for a device: its memory minus 8% for the CUDA context, NCCL buffers and
/// allocator fragmentation (the paper's "remaining free memory" is measured; we must estimate).
double default_budget_bytes(double device_memory_bytes);

}  // namespace omnibal::memory
