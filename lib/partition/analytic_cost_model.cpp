#include "partition/analytic_cost_model.h"

#include "core/error.h"
#include "core/units.h"
#include "partition/tensor_parallel.h"

namespace omnibal::partition {
namespace {

constexpr double kBf16 = 2.0;   // bytes per weight / activation element
constexpr double kInt64 = 8.0;  // ids, labels, positions

}  // namespace

AnalyticCostModel::AnalyticCostModel(ModelPreset preset, DeviceSpec device, int tp, bool freeze_vit,
                                     AnalyticEfficiency efficiency, VitHeadPadding padding)
    : preset_(std::move(preset)),
      device_(std::move(device)),
      tp_(tp),
      freeze_vit_(freeze_vit),
      eff_(efficiency),
      padding_(padding) {
  OMNIBAL_CHECK(tp_ >= 1, "analytic cost model: tp must be >= 1, got ", tp_);
  if (padding_ == VitHeadPadding::kDummyHeads) {
    ModelPreset llm_only = preset_;
    llm_only.vit.heads = static_cast<int>(padded_heads(preset_.vit.heads, tp_));
    check_tensor_parallel(llm_only, tp_);
  } else {
    try {
      check_tensor_parallel(preset_, tp_);
    } catch (const Error& e) {  // the planner's way out, which the trainer does not have
      OMNIBAL_FAIL(e.what(),
                   "; to plan it anyway with zero dummy ViT heads padded to a multiple "
                   "of tp (Megatron-LM's NVLM), pass --tp-vit-dummy-heads");
    }
  }
  OMNIBAL_CHECK(device_.peak_flops > 0 && device_.hbm_bandwidth > 0,
                "analytic cost model: device '", device_.name, "' lacks peak figures");
}

int AnalyticCostModel::num_units() const { return unit_count(preset_); }

double AnalyticCostModel::vit_attention_width() const {
  const auto& v = preset_.vit;
  const int heads = padding_ == VitHeadPadding::kDummyHeads
                        ? static_cast<int>(padded_heads(v.heads, tp_))
                        : v.heads;
  return static_cast<double>(heads) * v.width / v.heads;
}

UnitWork AnalyticCostModel::work(int unit, const MicroBatchLoad& load) const {
  const auto& v = preset_.vit;
  const auto& l = preset_.llm;
  const double tp = tp_;
  const double T = static_cast<double>(load.tiles());
  const double nv = preset_.vit_tokens_per_tile();
  const double dv = v.width, fv = v.mlp_dim;
  const double dl = l.width, fl = l.mlp_dim;
  const double V = static_cast<double>(padded_vocab_size(l.vocab_size, tp_));
  const double dkv = dl * l.kv_heads / l.heads;
  const double N = static_cast<double>(load.computed_tokens());
  UnitWork w;
  switch (unit_at(preset_, unit).kind) {
    case UnitKind::kVitEmbed: {
      const double patches = nv - 1, pixels = 3.0 * v.tile_size * v.tile_size;
      w.gemm_flops = 2 * T * patches * (3.0 * v.patch_size * v.patch_size) * dv;
      w.memory_bytes = kBf16 * T * (pixels + 3 * nv * dv);  // read pixels, write + add positions
      break;
    }
    case UnitKind::kVitBlock: {
      const double da = vit_attention_width();  // heads x head dim (dv without dummy heads)
      w.gemm_flops = 2 * T * nv * (4 * dv * da + 2 * dv * fv) / tp;
      w.attention_flops = 4 * T * nv * nv * da / tp;  // QK^T and AV, full attention per tile
      w.memory_bytes = kBf16 * T * nv * (10 * dv + (8 * da + 2 * fv) / tp);
      break;
    }
    case UnitKind::kProjector: {
      const double n = T * preset_.tokens_per_tile();
      w.gemm_flops = 2 * n * (4 * dv * dl + dl * dl);
      w.memory_bytes = kBf16 * n * (16 * dv + 2 * dl);  // pixel shuffle copy, LN, GELU
      break;
    }
    case UnitKind::kLlmEmbed:
      w.memory_bytes = kBf16 * N * dl * 2;  // gather rows, merge vision features
      break;
    case UnitKind::kLlmBlock:
      w.gemm_flops = 2 * N * (2 * dl * dl + 2 * dl * dkv + 3 * dl * fl) / tp;
      w.attention_flops = 2 * load.attention_square_sum() * dl / tp;  // causal: half of 4 L^2 d
      w.memory_bytes = kBf16 * N * (10 * dl + (2 * dl + 2 * dkv + 3 * fl) / tp);
      break;
    case UnitKind::kLlmHead:
      w.gemm_flops = 2 * N * dl * V / tp;
      w.memory_bytes = kBf16 * N * dl * 2 + N * V / tp * (kBf16 + 2 * 4.0);  // fp32 softmax
      break;
  }
  return w;
}

UnitCost AnalyticCostModel::unit_cost(int unit, const MicroBatchLoad& load) const {
  UnitCost c = unit_shape(unit, load);
  const UnitWork w = work(unit, load);
  const double gemm_s = w.gemm_flops / (device_.peak_flops * eff_.gemm);
  const double mem_s = w.memory_bytes / (device_.hbm_bandwidth * eff_.memory);
  c.forward_s = gemm_s + mem_s + w.attention_flops / (device_.peak_flops * eff_.attention_forward);
  c.backward_s = 2 * gemm_s + 2 * mem_s +
                 2.5 * w.attention_flops / (device_.peak_flops * eff_.attention_backward);
  // ZB-H1's W: the weight-gradient GEMMs (one of the two backward GEMMs of every linear); the
  // input-gradient GEMMs, the attention backward and the element-wise backward are B's.
  c.backward_weight_s = gemm_s;
  if (freeze_vit_ && freeze_group(c.kind) == UnitGroup::kVit) {
    c.trainable = false;
    c.backward_s = 0;  // nothing upstream of a frozen ViT needs gradients
    c.backward_weight_s = 0.0;
    c.activation_bytes = 0;
    c.weight_grad_bytes = 0.0;
  }
  c.tp_all_reduce = unit_tp_all_reduces(preset_, c.kind, load.tiles(), load.computed_tokens(), tp_,
                                        kBf16, c.trainable);
  return c;
}

UnitCost AnalyticCostModel::unit_shape(int unit, const MicroBatchLoad& load) const {
  const auto& v = preset_.vit;
  const auto& l = preset_.llm;
  UnitCost c;
  const UnitId id = unit_at(preset_, unit);
  c.name = cost_table_name(id);
  c.kind = id.kind;
  const double tp = tp_;
  const double T = static_cast<double>(load.tiles());
  const double nv = preset_.vit_tokens_per_tile();
  const double dv = v.width, fv = v.mlp_dim, dl = l.width, fl = l.mlp_dim;
  const double V = static_cast<double>(padded_vocab_size(l.vocab_size, tp_));
  const double dkv = dl * l.kv_heads / l.heads;
  const double N = static_cast<double>(load.computed_tokens());
  const double side_before_llm = kInt64 * 3 * N;  // ids, labels, positions travel with the ViT
  const double side_llm = kInt64 * 2 * N;         // labels, positions
  double params = 0;
  switch (c.kind) {
    case UnitKind::kVitEmbed:
      params = 3.0 * v.patch_size * v.patch_size * dv + dv + nv * dv + dv;
      c.activation_bytes = kBf16 * T * 3.0 * v.tile_size * v.tile_size;
      // W of the patch embedding: its input patches and the gradient of its [T n, d] output.
      c.weight_grad_bytes = kBf16 * T * (3.0 * v.tile_size * v.tile_size + (nv - 1) * dv);
      c.output_bytes = kBf16 * T * nv * dv + side_before_llm;
      break;
    case UnitKind::kVitBlock: {
      // Sharded: qkv (+ bias), qk-norm weights, proj, fc1 (+ bias), fc2. Replicated: the two
      // norms (weight + bias for layernorm), the proj and fc2 biases, the layer scales.
      const double da = vit_attention_width();
      const double sharded =
          4 * dv * da + 2 * dv * fv + fv + (v.qkv_bias ? 3 * da : 0) + (v.qk_norm ? 2 * da : 0);
      const double norm = v.norm == VitNorm::kLayerNorm ? 2 * dv : dv;
      const double replicated = 2 * norm + 2 * dv + (v.layer_scale ? 2 * dv : 0);
      params = sharded / tp + replicated;
      c.activation_bytes = kBf16 * T * nv * (7 * dv + (4 * da + 2 * fv) / tp);
      // W's inputs: qkv (norm output d, grad 3 da / tp), proj (attention da / tp, grad d), fc1
      // (norm output d, grad f / tp), fc2 (hidden f / tp, grad d).
      c.weight_grad_bytes = kBf16 * T * nv * (4 * dv + (4 * da + 2 * fv) / tp);
      c.output_bytes = kBf16 * T * nv * dv + side_before_llm;
      break;
    }
    case UnitKind::kProjector: {
      const double n = T * preset_.tokens_per_tile();
      params = 8 * dv + 4 * dv * dl + dl + dl * dl + dl;
      c.activation_bytes = kBf16 * n * (8 * dv + 2 * dl);
      // fc1 (shuffled 4 d_vit in, d_llm grad), fc2 (d_llm in, d_llm grad).
      c.weight_grad_bytes = kBf16 * n * (4 * dv + 3 * dl);
      c.output_bytes = kBf16 * n * dl + side_before_llm;
      break;
    }
    case UnitKind::kLlmEmbed:
      params = V / tp * dl;
      c.activation_bytes = kInt64 * N;
      c.weight_grad_bytes = kInt64 * N + kBf16 * N * dl;  // ids and the output gradient
      c.output_bytes = kBf16 * N * dl + side_llm;
      break;
    case UnitKind::kLlmBlock:
      params = (2 * dl * dl + 2 * dl * dkv + 3 * dl * fl) / tp + 2 * dl;
      c.activation_bytes = kBf16 * N * (4 * dl + (2 * dl + 2 * dkv + 3 * fl) / tp);
      // wq/wk/wv (norm output d, grads (d + 2 d_kv) / tp), wo (attention d / tp, grad d), w1/w3
      // (norm output d, grads 2 f / tp), w2 (hidden f / tp, grad d): the activation formula.
      c.weight_grad_bytes = kBf16 * N * (4 * dl + (2 * dl + 2 * dkv + 3 * fl) / tp);
      c.output_bytes = kBf16 * N * dl + side_llm;
      break;
    case UnitKind::kLlmHead:
      params = dl + (l.tie_embeddings ? 0 : V / tp * dl);
      c.activation_bytes = kBf16 * N * 2 * dl + 4.0 * N * V / tp;
      c.weight_grad_bytes = kBf16 * N * (dl + V / tp);  // norm output, logits gradient
      c.output_bytes = 0;
      break;
  }
  c.parameter_bytes = kBf16 * params;
  return c;
}

UnitCostTable AnalyticCostModel::costs(const MicroBatchLoad& load) const {
  UnitCostTable t;
  t.model = preset_.name;
  t.source = "analytic:" + device_.name;
  t.tp = tp_;
  t.load = {load.tiles(), load.computed_tokens(), load.samples(), load.attention_square_sum()};
  t.units.reserve(num_units());
  for (int u = 0; u < num_units(); ++u) t.units.push_back(unit_cost(u, load));
  return t;
}

}  // namespace omnibal::partition
