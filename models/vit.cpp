#include "models/vit.h"

#include <cmath>

#include "core/error.h"
#include "models/torch_compat.h"
#include "models/weight_grad_store.h"

namespace omnibal::models {

namespace {
constexpr double kVitNormEps = 1e-6;  // InternViT layer_norm_eps
namespace F = torch::nn::functional;
}  // namespace

VitEmbedUnit::VitEmbedUnit(const VitPreset& preset)
    : PipelineUnit({UnitKind::kVitEmbed, 0}), preset_(preset) {
  const int64_t d = preset.width, p = preset.patch_size;
  const int64_t side = preset.tile_size / preset.patch_size;
  patch_embedding = register_module("patch_embedding",
                                    torch::nn::Conv2d(torch::nn::Conv2dOptions(3, d, p).stride(p)));
  class_embedding = register_parameter("class_embedding", torch::zeros({1, 1, d}));
  position_embedding =
      register_parameter("position_embedding", torch::zeros({1, 1 + side * side, d}));
}

torch::Tensor VitEmbedUnit::position_embedding_for(int64_t side) const {
  const int64_t base = preset_.tile_size / preset_.patch_size;
  if (side == base) return position_embedding;
  // InternViT: interpolate the patch part of the table bicubically over the patch grid.
  const int64_t d = position_embedding.size(2);
  const torch::Tensor grid = position_embedding.narrow(1, 1, base * base)
                                 .reshape({1, base, base, d})
                                 .permute({0, 3, 1, 2});
  const torch::Tensor resized =
      F::interpolate(grid.to(torch::kFloat32), F::InterpolateFuncOptions()
                                                   .size(std::vector<int64_t>{side, side})
                                                   .mode(torch::kBicubic)
                                                   .align_corners(false))
          .to(position_embedding.scalar_type());
  return torch::cat({position_embedding.narrow(1, 0, 1),
                     resized.permute({0, 2, 3, 1}).reshape({1, side * side, d})},
                    1);
}

UnitState VitEmbedUnit::forward(const UnitState& state) {
  expect_phase(state, Phase::kPixels);
  if (!state.hidden.defined()) return state.with_hidden({}, Phase::kVit);  // pack without images
  const torch::Tensor& px = state.hidden;
  const int64_t p = preset_.patch_size;
  OMNIBAL_CHECK(px.dim() == 4 && px.size(1) == 3 && px.size(2) == px.size(3) &&
                    px.size(2) % (2 * p) == 0,
                "vit_embed: wrong tile size: pixel_values are ", px.sizes(),
                "; expected [tiles, 3, S, S] with S a multiple of 2 * patch_size = ", 2 * p,
                " (the preset's tile is ", preset_.tile_size, ")");
  const torch::Tensor x = px.to(class_embedding.scalar_type());
  const int64_t tiles = x.size(0), side = x.size(2) / p;
  const torch::Tensor patches = patch_embedding->forward(x).flatten(2).transpose(1, 2);
  const torch::Tensor tokens =
      torch::cat({class_embedding.expand({tiles, 1, class_embedding.size(2)}), patches}, 1);
  return state.with_hidden(tokens + position_embedding_for(side), Phase::kVit);
}

VitAttentionImpl::VitAttentionImpl(const VitPreset& preset, const TensorParallel& tp)
    : heads_(preset.heads / tp.size), width_(preset.width), tp_(tp) {
  const int64_t d = preset.width;
  qkv =
      register_module("qkv",
                      torch::nn::Linear(torch::nn::LinearOptions(d, 3 * d).bias(preset.qkv_bias)));
  if (preset.qk_norm) {
    q_norm = register_module("q_norm", RmsNorm(d, kVitNormEps));
    k_norm = register_module("k_norm", RmsNorm(d, kVitNormEps));
  }
  proj = register_module("proj", torch::nn::Linear(d, d));
}

torch::Tensor VitAttentionImpl::qk_norm(const torch::Tensor& x, RmsNorm& norm) {
  if (!tp_.active()) return norm->forward(x);
  const torch::Tensor xf = x.to(torch::kFloat32);
  const torch::Tensor mean_sq = sum_over_tp(xf.pow(2).sum(-1, true), tp_) / width_;
  return rms_scale(xf, x.scalar_type(), norm->weight, mean_sq, norm->eps());
}

torch::Tensor VitAttentionImpl::forward(const torch::Tensor& x) {
  const int64_t b = x.size(0), n = x.size(1), d = width_ / tp_.size, hd = d / heads_;
  const auto parts = linear_layer(x, qkv->weight, qkv->bias).chunk(3, -1);  // each [B, N, d / tp]
  torch::Tensor q = parts[0], k = parts[1];
  if (q_norm) {  // InternViT-6B normalises q and k over all heads together
    q = qk_norm(q, q_norm);
    k = qk_norm(k, k_norm);
  }
  auto heads = [&](const torch::Tensor& t) {
    return t.reshape({b, n, heads_, hd}).transpose(1, 2);
  };
  const torch::Tensor out =
      compat::attention(heads(q), heads(k), heads(parts[2]), /*causal=*/false);
  return row_parallel_linear(out.transpose(1, 2).reshape({b, n, d}), proj->weight, proj->bias, tp_);
}

VitBlockUnit::VitBlockUnit(const VitPreset& preset, int index, const TensorParallel& tp)
    : PipelineUnit({UnitKind::kVitBlock, index}) {
  const int64_t d = preset.width;
  set_tensor_parallel(tp);
  norm1 = register_module("norm1", VitNormLayer(preset.norm, d, kVitNormEps));
  attn = register_module("attn", VitAttention(preset, tp));
  norm2 = register_module("norm2", VitNormLayer(preset.norm, d, kVitNormEps));
  mlp = register_module("mlp", torch::nn::Sequential());
  mlp->push_back("fc1", torch::nn::Linear(d, preset.mlp_dim));
  mlp->push_back("act", torch::nn::GELU());
  mlp->push_back("fc2", torch::nn::Linear(preset.mlp_dim, d));
  if (preset.layer_scale) {
    ls1 = register_parameter("ls1", torch::ones({d}));
    ls2 = register_parameter("ls2", torch::ones({d}));
  }
  mark_sharded("attn.qkv.weight", {0, 3});
  if (preset.qkv_bias) mark_sharded("attn.qkv.bias", {0, 3});
  if (preset.qk_norm) {
    mark_sharded("attn.q_norm.weight", {0, 1});
    mark_sharded("attn.k_norm.weight", {0, 1});
  }
  mark_sharded("attn.proj.weight", {1, 1});
  mark_sharded("mlp.fc1.weight", {0, 1});
  mark_sharded("mlp.fc1.bias", {0, 1});
  mark_sharded("mlp.fc2.weight", {1, 1});
}

torch::Tensor VitBlockUnit::mlp_forward(const torch::Tensor& x) {
  const auto& fc1 = mlp->named_children()[0].value()->as<torch::nn::Linear>();
  const auto& fc2 = mlp->named_children()[2].value()->as<torch::nn::Linear>();
  return row_parallel_linear(torch::gelu(linear_layer(x, fc1->weight, fc1->bias)), fc2->weight,
                             fc2->bias, tensor_parallel());
}

UnitState VitBlockUnit::forward(const UnitState& state) {
  expect_phase(state, Phase::kVit);
  if (!state.hidden.defined()) return state;
  torch::Tensor x = state.hidden;
  const TensorParallel& tp = tensor_parallel();
  torch::Tensor a = apply_dropout(attn->forward(copy_to_tp(norm1->forward(x), tp)), state,
                                  DropoutSite::kAttentionOutput);
  x = x + (ls1.defined() ? a * ls1 : a);
  torch::Tensor m =
      apply_dropout(mlp_forward(copy_to_tp(norm2->forward(x), tp)), state, DropoutSite::kMlpOutput);
  x = x + (ls2.defined() ? m * ls2 : m);
  return state.with_hidden(x, Phase::kVit);
}

}  // namespace omnibal::models
