// RMSNorm (Zhang & Sennrich 2019) as used by LLaMA / InternLM2 and InternViT-6B:
// y = w * x / sqrt(mean(x^2) + eps), computed in fp32 and cast back to the input dtype.
// VitNormLayer: the ViT blocks' norm, LayerNorm or RMSNorm as the preset says.
// Not here: the projector's LayerNorm (torch::nn::LayerNorm, used directly).
#pragma once

#include <torch/torch.h>

#include <string>

#include "core/choices.h"
#include "models/mixed_precision.h"

namespace omnibal::models {

/// weight * xf / sqrt(mean_sq + eps) with the normalisation in fp32, cast to `dtype` (the
/// input's) before the scale. xf: the input in fp32; mean_sq [..., 1] fp32: the mean of x^2
/// over the normalised channels (under TP from every rank's channels, models/vit.h).
inline torch::Tensor rms_scale(const torch::Tensor& xf, torch::ScalarType dtype,
                               const torch::Tensor& weight, const torch::Tensor& mean_sq,
                               double eps) {
  return weight * (xf * torch::rsqrt(mean_sq + eps)).to(dtype);
}

/// RMS normalisation over the last dimension with a learned per-channel scale `weight` [dim].
class RmsNormImpl : public torch::nn::Module {
 public:
  /// dim: size of the normalised last dimension; eps: added to the mean square.
  RmsNormImpl(int64_t dim, double eps) : eps_(eps) {
    weight = register_parameter("weight", torch::ones({dim}));
  }
  /// x [..., dim] -> [..., dim], same dtype as x.
  torch::Tensor forward(const torch::Tensor& x) {
    const torch::Tensor xf = x.to(torch::kFloat32);
    return rms_scale(xf, x.scalar_type(), weight, xf.pow(2).mean(-1, true), eps_);
  }
  double eps() const { return eps_; }
  torch::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(RmsNorm);

/// LayerNorm or RMSNorm as the preset's vit.norm chooses (InternViT's norm_type), both computed
/// in fp32 for bf16 inputs (layer_norm_fp32, mixed_precision.h).
/// Parameters: weight [dim], and bias [dim] for layernorm only.
class VitNormLayerImpl : public torch::nn::Module {
 public:
  VitNormLayerImpl(VitNorm kind, int64_t dim, double eps)
      : rms_(kind == VitNorm::kRmsNorm), eps_(eps) {
    weight = register_parameter("weight", torch::ones({dim}));
    if (!rms_) bias = register_parameter("bias", torch::zeros({dim}));
  }
  /// x [..., dim] -> [..., dim].
  torch::Tensor forward(const torch::Tensor& x) {
    if (!rms_) return layer_norm_fp32(x, weight, bias, eps_);
    const torch::Tensor xf = x.to(torch::kFloat32);
    return rms_scale(xf, x.scalar_type(), weight, xf.pow(2).mean(-1, true), eps_);
  }
  torch::Tensor weight, bias;

 private:
  bool rms_;
  double eps_;
};
TORCH_MODULE(VitNormLayer);

}  // namespace omnibal::models
