// The ops whose bf16 CPU kernels lose precision (1.13; LayerNorm still on 2.11), computed so they
// keep what autocast and the CUDA kernels keep in fp32 (docs/results.md#bf16-at-the-demo-learning-rate):
//   - LayerNorm: the CPU kernel's backward sums the weight and bias gradients over all rows in
//     bf16 (relative error 3-11 % on the tiny ViT's norms, against ~1 % for a matmul's);
//     layer_norm_fp32() runs it in fp32 and casts back, as RMSNorm already does (rms_norm.h)
//     and as autocast's fp32 op list does for layer_norm.
//   - the embedding backward: embedding_dense_backward_cpu adds each occurrence of a token into
//     its row in the weight's dtype, so a token seen n times rounds n times (the CUDA kernel
//     accumulates in fp32); embedding_lookup() sums the occurrences in fp32 and rounds once.
// Both leave fp32 inputs on the stock kernels (bitwise unchanged).
#pragma once

#include <torch/torch.h>

namespace omnibal::models {

/// LayerNorm over the last dimension of x [..., d] with weight and bias [d] (bias may be
/// undefined), computed in fp32 when x is a reduced-precision tensor and returned in x's dtype;
/// the parameters' gradients come back in their own dtype.
torch::Tensor layer_norm_fp32(const torch::Tensor& x, const torch::Tensor& weight,
                              const torch::Tensor& bias, double eps);

/// Rows `ids` [...] (int64) of `weight` [V, d]: torch::embedding, except that for a
/// reduced-precision weight the backward sums each token's occurrences in fp32 (one rounding
/// per row). Returns [..., d] in weight's dtype.
torch::Tensor embedding_lookup(const torch::Tensor& weight, const torch::Tensor& ids);

}  // namespace omnibal::models
