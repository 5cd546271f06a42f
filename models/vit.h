// The vision encoder as pipeline units, InternViT style (InternVL-Chat-1.5): a patch-embedding
// unit (conv patchify, class token, learned position embedding, bicubically interpolated when
// the tile side differs from the preset's) and pre-norm transformer blocks (multi-head
// self-attention with optional q/k RMS normalisation, GELU MLP, optional layer scale).
// Each tile is its own sequence, so no packing mask is needed in the ViT (docs/paper.md).
// Residual dropout (models/dropout.h) on the attention and MLP branches when set_dropout(p > 0).
// Not here: drop-path (stochastic depth), the flash-attention kernel choice (compat).
#pragma once

#include <torch/torch.h>

#include "core/model_preset.h"
#include "models/pipeline_unit.h"
#include "models/rms_norm.h"

namespace omnibal::models {

/// Unit "vit_embed": kPixels [tiles, 3, S, S] -> kVit [tiles, 1 + (S/p)^2, d_vit].
/// Parameters: patch_embedding.{weight [d, 3, p, p], bias [d]}, class_embedding [1, 1, d],
/// position_embedding [1, 1 + (tile_size/p)^2, d].
/// Throws omnibal::Error on a wrong tile size: channels != 3, a non-square tile, or a side that
/// is not a multiple of 2 * patch_size (pixel shuffle halves the patch grid).
class VitEmbedUnit : public PipelineUnit {
 public:
  explicit VitEmbedUnit(const VitPreset& preset);
  UnitState forward(const UnitState& state) override;

  torch::nn::Conv2d patch_embedding{nullptr};
  torch::Tensor class_embedding, position_embedding;

 private:
  /// Position embedding for a grid of side x side patches (interpolated if needed).
  torch::Tensor position_embedding_for(int64_t side) const;
  VitPreset preset_;
};

/// Multi-head self-attention of one ViT block over [tiles, N, d] (no mask).
/// Parameters: qkv.{weight [3d, d], bias [3d] if qkv_bias}, q_norm/k_norm.weight [d] if qk_norm,
/// proj.{weight [d, d], bias [d]}.
class VitAttentionImpl : public torch::nn::Module {
 public:
  explicit VitAttentionImpl(const VitPreset& preset);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::Linear qkv{nullptr}, proj{nullptr};
  RmsNorm q_norm{nullptr}, k_norm{nullptr};

 private:
  int64_t heads_;
};
TORCH_MODULE(VitAttention);

/// Unit "vit_block_<i>": kVit -> kVit, x += ls1 * drop(attn(norm1(x))); x += ls2 * drop(mlp(norm2(x)))
/// (drop: residual dropout, identity at p = 0).
/// Parameters: norm1, attn.*, ls1 [d] (if layer_scale), norm2, mlp.fc1 [mlp, d], mlp.fc2 [d, mlp],
/// ls2 [d].
class VitBlockUnit : public PipelineUnit {
 public:
  VitBlockUnit(const VitPreset& preset, int index);
  UnitState forward(const UnitState& state) override;

  VitNorm norm1{nullptr}, norm2{nullptr};
  VitAttention attn{nullptr};
  torch::nn::Sequential mlp{nullptr};
  torch::Tensor ls1, ls2;  ///< undefined without layer scale
};

}  // namespace omnibal::models
