// Megatron-style tensor parallelism (TP) as the planners see it: which TP all-reduces a unit
// runs per micro-batch, what they cost on the TP link, and the preset checks the trainer makes.
// The trainer's layout (Megatron-LM, Shoeybi et al. 2019, §3):
//  - every ViT block: column-parallel qkv (split by heads) and fc1, row-parallel proj and fc2;
//    every LLM block: column-parallel wq / wk / wv (by heads / KV heads), w1, w3; row-parallel
//    wo, w2. Per block and micro-batch 2 all-reduces of the block's [tokens, d] activation in the
//    forward (after the row-parallel outputs) and 2 in the backward (the input gradients of the
//    column-parallel layers). InternViT's qk-norm adds one [tokens] fp32 all-reduce of the sum of
//    squares for q and one for k, forward and backward.
//  - llm_embed is vocab-parallel: 1 forward all-reduce of [tokens, d_llm]; the head is
//    vocab-parallel: 3 forward all-reduces of [tokens] fp32 (max, sum of exp, target logit of the
//    vocab-parallel cross-entropy) and 1 backward all-reduce of its [tokens, d_llm] input
//    gradient. The vocabulary is padded to a multiple of tp (padded_vocab_size).
//  - vit_embed, the projector, norms, row-parallel biases and layer scales are replicated: no
//    collectives. A frozen unit has no backward, so no backward all-reduces.
//  - recomputation re-runs a unit's forward, its forward all-reduces included, in the backward.
// TP is innermost in the rank order tp-dp-pp, so a TP group sits inside one node: its all-
// reduces run on the intra-node link (ring all-reduce: each rank sends and receives
// 2 (tp - 1) / tp of the buffer). Not modelled: sequence parallelism, overlap of TP
// communication with compute (Megatron's tp-comm-overlap), contention with the DP all-reduce.
#pragma once

#include <cstdint>

#include "core/model_preset.h"
#include "partition/device_spec.h"
#include "partition/unit_cost_table.h"

namespace omnibal::partition {

/// The link one TP group's all-reduces run on.
struct TpLink {
  double bandwidth = 0;  ///< achieved all-reduce bus bandwidth, bytes/s per rank and direction
  double latency_s = 0;  ///< fixed seconds per all-reduce call (launch, synchronisation)
};

/// The TP link of `device` for `tp` ranks: its intra-node link (the network when tp exceeds
/// gpus_per_node) at 80% (NCCL's all-reduce bus bandwidth on NVLink in nccl-tests: ~230 of 300
/// GB/s on A100, ~360 of 450 on H100) and device.collective_latency_s per call. Throws
/// omnibal::Error when tp < 1.
TpLink tp_link(const DeviceSpec& device, int tp);

/// Seconds of `calls` ring all-reduces over `ranks` ranks moving `bytes` in total (per rank):
/// calls * latency + 2 (ranks - 1) / ranks * bytes / bandwidth; 0 when ranks == 1 or nothing
/// moves. Throws omnibal::Error when ranks < 1 or the link has no bandwidth but bytes move.
double all_reduce_seconds(double bytes, int calls, int ranks, const TpLink& link);

/// Seconds of a unit's forward TP all-reduces at `tp` ranks on `link`.
double tp_forward_seconds(const UnitCost& unit, int tp, const TpLink& link);
/// Seconds of a unit's backward TP all-reduces; with `recomputed` the forward's again (a
/// recomputed trainable block re-runs its forward inside the backward).
double tp_backward_seconds(const UnitCost& unit, bool recomputed, int tp, const TpLink& link);

/// Heads padded with zero "dummy" heads to a multiple of tp: ceil(heads / tp) * tp (Megatron-LM's
/// NVLM InternViT adds 7 to InternViT-6B's 25 heads for TP 8). Throws when tp < 1.
int64_t padded_heads(int64_t heads, int tp);

/// The TP all-reduces of one unit of `kind` for one micro-batch of `tiles` ViT tiles and
/// `tokens` computed LLM tokens at `tp` ranks, activations in `dtype_bytes` per element (2 for
/// bf16, 4 for fp32; the cross-entropy and qk-norm reductions are fp32 whatever the dtype).
/// `trainable` false: no backward all-reduces. All zero at tp 1.
TpAllReduces unit_tp_all_reduces(const ModelPreset& preset, UnitKind kind, int64_t tiles,
                                 int64_t tokens, int tp, double dtype_bytes, bool trainable);

/// Fills every unit's tp_all_reduce of `table` from `preset` at the table's load and tp (for a
/// profiled table, whose times exclude the all-reduces; the volumes follow from the
/// architecture). Throws omnibal::Error when the table's unit count does not match the preset.
void set_tp_all_reduces(UnitCostTable& table, const ModelPreset& preset, double dtype_bytes);

}  // namespace omnibal::partition
