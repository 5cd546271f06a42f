// Analytic per-unit costs for presets that cannot run here (InternVL-Chat-1.5 6B+20B etc.):
// FLOPs and bytes of every pipeline unit from the architecture (core/model_preset.h) and the
// micro-batch load, turned into seconds with a device's peaks (device_spec.h) times stated
// efficiencies. What it counts (bf16 weights and activations, flash attention, no dropout):
//  - GEMM FLOPs: forward 2 * tokens * weights-in-matmuls; backward 2x forward (input and weight
//    gradients), 1x when the unit is frozen.
//  - attention FLOPs: ViT full attention per tile (1025 tokens) 4 n^2 d; LLM causal attention
//    2 L^2 d per sequence (flash attention skips masked blocks); backward 2.5x forward (flash
//    attention's backward runs five matmuls to the forward's two). Padded micro-batches pay for
//    every padded position in GEMMs and attention (Megatron-style dense padding).
//  - memory-bound element-wise traffic (norms, residual adds, activations, RoPE, layer scale,
//    softmax of the loss) at HBM bandwidth, backward 2x forward.
//  - activation bytes kept for backward, per token: ViT block 11 d + 2 f, LLM block
//    6 d + 2 d_kv + 3 f (SwiGLU), projector 8 d_vit + 2 d_llm; fp32 logits in the loss.
//  - the split backward (ZB-H1, unit_cost_table.h): W = the weight-gradient GEMMs (forward GEMM
//    FLOPs again), B = the rest (input-gradient GEMMs, attention backward, element-wise); a
//    deferred W keeps each linear's input and output gradient: ViT block 4 d + (4 d_a + 2 f) / tp,
//    LLM block 4 d + (2 d + 2 d_kv + 3 f) / tp per token (tp: see below).
// Tensor parallelism (tensor_parallel.h, Megatron TP without sequence parallelism): every
// figure is per TP rank. Sharded 1/tp: the block matrices, column-parallel biases, qk-norm
// weights, the vocab-parallel embedding and head (vocabulary padded to a multiple of tp), their
// GEMM and attention FLOPs, the column-parallel activations (ViT: q, k, v, attention output
// 4 d and the MLP hidden 2 f of the 11 d + 2 f; LLM: q, k, v, attention output 2 d + 2 d_kv and
// 3 f of the 6 d + 2 d_kv + 3 f; the head's logits) and the element-wise traffic on them.
// Replicated: vit_embed, the projector, norms, row-parallel biases, layer scales, the block
// input, norm outputs and residuals (7 d of a ViT block's kept activations, 4 d of an LLM
// block's; element-wise traffic 10 d per token in both). The TP all-reduces are not in the
// times: they are each unit's tp_all_reduce volumes (bf16), costed on the TP link by the
// simulator and the partition search.
// Efficiencies (AnalyticEfficiency) are documented assumptions, not fitted to any target.
#pragma once

#include "core/model_preset.h"
#include "partition/cost_model.h"
#include "partition/device_spec.h"

namespace omnibal::partition {

/// Fractions of the device peaks that kernels reach. Defaults: large bf16 GEMMs reach ~70% of
/// the A100/H100 tensor-core peak (cuBLAS on shapes of this size); FlashAttention-2 reports
/// 50-73% of peak forward and lower backward on A100; element-wise kernels stream at ~80% of
/// HBM bandwidth. (TP's all-reduces have their own link efficiency: tensor_parallel.h.)
struct AnalyticEfficiency {
  double gemm = 0.70;
  double attention_forward = 0.60;
  double attention_backward = 0.45;
  double memory = 0.80;
};

/// Per-unit FLOPs and bytes of one TP rank for one micro-batch (before conversion to seconds).
struct UnitWork {
  double gemm_flops = 0;       ///< forward matmul FLOPs
  double attention_flops = 0;  ///< forward attention FLOPs
  double memory_bytes = 0;     ///< forward element-wise HBM traffic
};

/// What the model does with ViT heads that tp does not divide (InternViT-6B has 25).
enum class VitHeadPadding {
  kRefuse,      ///< the trainer's rule: refuse (check_tensor_parallel)
  kDummyHeads,  ///< Megatron-LM NVLM: pad with zero heads to a multiple of tp (tensor_parallel.h);
                ///< they cost FLOPs, weights and activations like real heads. Planning only.
};

/// The analytic cost model of one preset on one device.
class AnalyticCostModel : public CostModel {
 public:
  /// `freeze_vit`: the ViT (embedding + blocks) is frozen, so it has no backward, no kept
  /// activations, no gradients and no optimizer state (train.freeze: [vit]). `tp` >= 1: the
  /// tables are per rank of tp (UnitCostTable::tp = tp). Throws omnibal::Error when tp < 1, the
  /// preset's heads or KV heads do not divide by tp (check_tensor_parallel) or the device lacks peaks.
  /// `padding`: see VitHeadPadding (LLM heads and KV heads must always divide by tp).
  AnalyticCostModel(ModelPreset preset, DeviceSpec device, int tp = 1, bool freeze_vit = false,
                    AnalyticEfficiency efficiency = {},
                    VitHeadPadding padding = VitHeadPadding::kRefuse);
  UnitCostTable costs(const MicroBatchLoad& load) const override;

  /// Number of pipeline units: vit.depth + llm.depth + 4.
  int num_units() const;
  /// Forward FLOPs/bytes of unit `unit` for `load` on one TP rank (exposed for tests and
  /// documentation).
  UnitWork work(int unit, const MicroBatchLoad& load) const;
  const ModelPreset& preset() const { return preset_; }
  const DeviceSpec& device() const { return device_; }
  int tp() const { return tp_; }

 private:
  UnitCost unit_cost(int unit, const MicroBatchLoad& load) const;
  /// Name, kind and sizes (parameter, activation, output bytes) per TP rank, before freezing.
  UnitCost unit_shape(int unit, const MicroBatchLoad& load) const;
  /// ViT attention width: (padded) heads x head dim; the ViT width without dummy heads.
  double vit_attention_width() const;

  ModelPreset preset_;
  DeviceSpec device_;
  int tp_;
  bool freeze_vit_;
  AnalyticEfficiency eff_;
  VitHeadPadding padding_;
};

}  // namespace omnibal::partition
