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
/// Tensor parallel (tp.size = t): qkv is column-parallel per head (each of q, k, v keeps heads
/// [r H/t, (r+1) H/t), so qkv.weight is [3d/t, d]), proj is row-parallel ([d, d/t], its bias
/// replicated and added once after the all-reduce). qk-norm normalises over all d channels of
/// every head (InternViT-6B), which a rank does not hold: each rank sums the squares of its
/// d/t channels, one all-reduce (sum_over_tp) gives the full sum, and the rank scales its own
/// channels with its slice of q_norm.weight. That is the same function as without TP (the
/// only difference is the order of the sum of squares), at one [tiles, N] fp32 all-reduce for
/// q and one for k.
class VitAttentionImpl : public torch::nn::Module {
 public:
  /// x is expected already passed through copy_to_tp (the block does it).
  explicit VitAttentionImpl(const VitPreset& preset, const TensorParallel& tp = {});
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::Linear qkv{nullptr}, proj{nullptr};
  RmsNorm q_norm{nullptr}, k_norm{nullptr};

 private:
  /// RMS norm of the local channels [B, N, d/t] over all d channels of the TP group.
  torch::Tensor qk_norm(const torch::Tensor& x, RmsNorm& norm);
  int64_t heads_, width_;
  TensorParallel tp_;
};
TORCH_MODULE(VitAttention);

/// Unit "vit_block_<i>": kVit -> kVit, x += ls1 * drop(attn(norm1(x))); x += ls2 * drop(mlp(norm2(x)))
/// (drop: residual dropout, identity at p = 0).
/// Parameters: norm1, attn.*, ls1 [d] (if layer_scale), norm2, mlp.fc1 [mlp, d], mlp.fc2 [d, mlp],
/// ls2 [d]. Tensor parallel: attn as VitAttentionImpl, mlp.fc1 column-parallel ([mlp/t, d] and
/// its bias), mlp.fc2 row-parallel ([d, mlp/t], bias replicated); norms and layer scales
/// replicated (they act on the replicated residual stream). Residual dropout acts on replicated
/// activations; its counter-based masks do not depend on the TP rank, so they agree.
class VitBlockUnit : public PipelineUnit {
 public:
  VitBlockUnit(const VitPreset& preset, int index, const TensorParallel& tp = {});
  UnitState forward(const UnitState& state) override;

  VitNormLayer norm1{nullptr}, norm2{nullptr};
  VitAttention attn{nullptr};
  torch::nn::Sequential mlp{nullptr};
  torch::Tensor ls1, ls2;  ///< undefined without layer scale

 private:
  /// fc2(gelu(fc1 x)); under TP fc1 column-, fc2 row-parallel (x passed through copy_to_tp).
  torch::Tensor mlp_forward(const torch::Tensor& x);
};

}  // namespace omnibal::models
