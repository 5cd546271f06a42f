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
// per-rank optimizer state over the DP group of that TP rank. Activations: the column-parallel
// outputs 1/tp, the rest full; buffers: full activations (no sequence parallelism). The model
// never divides by tp itself; MemoryOptions::tp must equal the table's tp.
// Not modelled: allocator fragmentation (keep a margin in the budget), CUDA context.
#pragma once

#include <vector>

#include "core/choices.h"

#include "partition/stage_partition.h"
#include "partition/unit_cost_table.h"

namespace omnibal::memory {

/// Memory accounting options.
struct MemoryOptions {
  int dp = 1;                                   ///< data-parallel ranks (ZeRO-1 shards over these)
  int tp = 1;                                   ///< tensor-parallel ranks (the table's tp)
  bool zero1 = true;                            ///< shard optimizer state over DP
  double weight_bytes_per_param = 2;            ///< bf16 weights (the table's parameter_bytes unit)
  double grad_bytes_per_param = 4;              ///< fp32 gradient accumulation buffer
  double optimizer_bytes_per_param = 12;        ///< fp32 master + Adam m + v
  double workspace_bytes = 1.0 * (1ull << 30);  ///< cuBLAS/NCCL workspaces, 1 GiB
};

/// Bytes of one stage, by category.
struct StageMemory {
  double weights = 0, gradients = 0, optimizer = 0, activations = 0, transient = 0, buffers = 0;
  /// Everything except activations and transient: what does not depend on in-flight data.
  double static_bytes() const { return weights + gradients + optimizer + buffers; }
  double total() const { return static_bytes() + activations + transient; }
};

/// Memory of stage `stage` of `partition` with `micro_batches` in flight per 1F1B, the given
/// per-unit recompute flags (indexed by unit, size = table units) and options, in bytes per TP
/// rank. Throws omnibal::Error when sizes disagree or the table's tp differs from options.tp.
StageMemory stage_memory(const partition::UnitCostTable& table,
                         const partition::Partition& partition, int stage, int micro_batches,
                         const std::vector<bool>& recompute, const MemoryOptions& options);

/// Bytes one in-flight micro-batch keeps in units [begin, end) under the recompute flags.
double kept_activation_bytes(const partition::UnitCostTable& table, int begin, int end,
                             const std::vector<bool>& recompute);

/// The trainer's bytes per parameter (train/distributed_optimizer.h) for train.precision and
/// train.zero1 at `dp` ranks: weights 4 (fp32) or 2 (bf16); gradients: the fp32 main gradient
/// (4) plus, in bf16, the parameters' bf16 gradient, alive from a micro-batch's backward until
/// the optimizer folds it in (2); optimizer state: Adam's fp32 moments (8) plus, in bf16, the fp32
/// master weights (4); the optimizer state divided by dp under ZeRO-1. Workspace as the default.
/// `tp`: parallel.tp, the TP degree of the cost table the options are used with (per-rank
/// bytes per parameter do not change with tp). Throws omnibal::Error when dp or tp < 1.
MemoryOptions trainer_memory_options(Precision precision, bool zero1, int dp, int tp = 1);

/// Default budget for a device: its memory minus 8% for the CUDA context, NCCL buffers and
/// allocator fragmentation (the paper's "remaining free memory" is measured; we must estimate).
double default_budget_bytes(double device_memory_bytes);

}  // namespace omnibal::memory
