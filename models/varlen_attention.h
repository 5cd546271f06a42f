// Attention over a packed sequence (varlen): causal within each sample, never across samples.
// Samples are the segments [cu_seqlens[i], cu_seqlens[i+1]) of the pack, as flash-attn's varlen
// kernels take them (docs/paper.md). The fast path computes each segment on its own
// (compat::causal_gqa_attention: SDPA with is_causal on LibTorch 2.x, matmul-softmax on 1.13), so
// no work is spent on cross-sample pairs. A dense block-diagonal causal mask over the whole pack
// is provided as the reference for tests only: it costs T^2 instead of sum(L_i^2).
#pragma once

#include <torch/torch.h>

namespace omnibal::models {

/// Packed causal grouped-query attention. q [T, Hq, d], k/v [T, Hkv, d] (Hq % Hkv == 0),
/// cu_seqlens [n + 1] int64 on the CPU with cu_seqlens[n] == T. Returns [T, Hq, d]: row t
/// attends to rows s of its own sample with s <= t.
torch::Tensor varlen_causal_attention(const torch::Tensor& q, const torch::Tensor& k,
                                      const torch::Tensor& v, const torch::Tensor& cu_seqlens);

/// Additive mask [T, T]: 0 where key s is in the same sample as query t and s <= t, -inf
/// elsewhere. dtype/device follow `like`. Test reference only.
torch::Tensor block_causal_mask(const torch::Tensor& cu_seqlens, const torch::Tensor& like);

/// Reference for varlen_causal_attention: one dense attention over the whole pack with
/// block_causal_mask. Same shapes and result; O(T^2) memory. Test reference only.
torch::Tensor dense_reference_attention(const torch::Tensor& q, const torch::Tensor& k,
                                        const torch::Tensor& v, const torch::Tensor& cu_seqlens);

}  // namespace omnibal::models
