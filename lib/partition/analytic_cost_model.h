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
// Efficiencies (AnalyticEfficiency) are documented assumptions, not fitted to any target.
#pragma once

#include "core/model_preset.h"
#include "partition/cost_model.h"
#include "partition/device_spec.h"

namespace omnibal::partition {

/// Fractions of the device peaks that kernels reach. Defaults: large bf16 GEMMs reach ~70% of
/// the A100/H100 tensor-core peak (cuBLAS on shapes of this size); FlashAttention-2 reports
/// 50-73% of peak forward and lower backward on A100; element-wise kernels stream at ~80% of
/// HBM bandwidth. TP > 1 divides compute by tp at tp_efficiency (its all-reduces on NVLink).
struct AnalyticEfficiency {
  double gemm = 0.70;
  double attention_forward = 0.60;
  double attention_backward = 0.45;
  double memory = 0.80;
  double tp_efficiency = 0.90;
};

/// Per-unit FLOPs and bytes for one micro-batch (before conversion to seconds).
struct UnitWork {
  double gemm_flops = 0;       ///< forward matmul FLOPs
  double attention_flops = 0;  ///< forward attention FLOPs
  double memory_bytes = 0;     ///< forward element-wise HBM traffic
};

/// The analytic cost model of one preset on one device.
class AnalyticCostModel : public CostModel {
 public:
  /// `freeze_vit`: the ViT (embedding + blocks) is frozen, so it has no backward, no kept
  /// activations, no gradients and no optimizer state (train.freeze: [vit]). `tp` >= 1.
  AnalyticCostModel(ModelPreset preset, DeviceSpec device, int tp = 1, bool freeze_vit = false,
                    AnalyticEfficiency efficiency = {});
  UnitCostTable costs(const MicroBatchLoad& load) const override;

  /// Number of pipeline units: vit.depth + llm.depth + 4.
  int num_units() const;
  /// Forward FLOPs/bytes of unit `unit` for `load` (exposed for tests and documentation).
  UnitWork work(int unit, const MicroBatchLoad& load) const;
  const ModelPreset& preset() const { return preset_; }
  const DeviceSpec& device() const { return device_; }

 private:
  UnitCost unit_cost(int unit, const MicroBatchLoad& load) const;
  /// Name, kind and sizes (parameter, activation, output bytes) before TP and freezing.
  UnitCost unit_shape(int unit, const MicroBatchLoad& load) const;
  UnitKind kind_of(int unit) const;

  ModelPreset preset_;
  DeviceSpec device_;
  int tp_;
  bool freeze_vit_;
  AnalyticEfficiency eff_;
};

}  // namespace omnibal::partition
