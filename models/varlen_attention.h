// Attention over a packed sequence (varlen): causal within each sample, never across samples.
// Samples are the segments [cu_seqlens[i], cu_seqlens[i+1]) of the pack, as flash-attn's varlen
// kernels take them (docs/paper.md). Two kernels compute it, chosen by choose_varlen_kernel():
// - flash varlen (CUDA, fp16/bf16): ONE call of LibTorch's flash-attention kernel
//   (at::_flash_attention_forward / _backward, FlashAttention-2's mha_varlen_fwd / _bwd) over the
//   whole pack per layer, grouped K/V heads read in place (no repeat);
// - per sample (CPU, fp32 on CUDA, unsupported head dims): each segment on its own
//   (compat::causal_gqa_attention: SDPA with is_causal).
//   It is the CPU path and the reference of the flash path.
// Neither spends work on cross-sample pairs. A dense block-diagonal causal mask over the whole pack
// is provided as the reference for tests only: it costs T^2 instead of sum(L_i^2).
#pragma once

#include <torch/torch.h>

namespace omnibal::models {

/// The kernel behind varlen_causal_attention.
enum class VarlenKernel {
  kPerSample,    ///< one attention per sample (CPU path, reference)
  kFlashVarlen,  ///< one flash-attention varlen call over the whole pack
};

/// The dispatch rule, a pure function of the inputs' device, dtype and head dim: kFlashVarlen
/// for CUDA with dtype fp16 or bf16 and 0 < head_dim <= 256, head_dim % 8 == 0 (what LibTorch's
/// flash kernel takes without padding; the hardware must be sm80 or newer, as omnibal's CUDA
/// architectures are), and only when flash_varlen_built(); kPerSample otherwise.
VarlenKernel choose_varlen_kernel(c10::DeviceType device, c10::ScalarType dtype, int64_t head_dim);

/// True when this build calls the flash varlen kernel (LibTorch >= 2.5); false on older LibTorch,
/// where choose_varlen_kernel always answers kPerSample.
bool flash_varlen_built();

/// Packed causal grouped-query attention. q [T, Hq, d], k/v [T, Hkv, d] (Hq % Hkv == 0),
/// cu_seqlens [n + 1] int64 on the CPU with cu_seqlens[n] == T. Returns [T, Hq, d]: row t
/// attends to rows s of its own sample with s <= t. Runs the kernel choose_varlen_kernel picks.
/// Throws omnibal::Error on bad shapes.
torch::Tensor varlen_causal_attention(const torch::Tensor& q, const torch::Tensor& k,
                                      const torch::Tensor& v, const torch::Tensor& cu_seqlens);

/// The per-sample path of varlen_causal_attention (same arguments and result), whatever the
/// device and dtype: the CPU path and the reference of the flash path.
torch::Tensor varlen_attention_per_sample(const torch::Tensor& q, const torch::Tensor& k,
                                          const torch::Tensor& v, const torch::Tensor& cu_seqlens);

/// One flash-attention varlen call over the pack, differentiable (a torch::autograd::Function
/// whose backward is at::_flash_attention_backward). q [T, Hq, d], k/v [T, Hkv, d] with
/// Hq % Hkv == 0 (K/V heads are not copied), CUDA fp16/bf16, d % 8 == 0, d <= 256; cu_seqlens
/// [n + 1] int32 on the CPU (max_seqlen is read from it without a device sync), starting at 0,
/// non-decreasing, ending at T. causal: key s is visible to query t of its sample only when
/// s <= t; otherwise the whole sample is (ViT tiles). Softmax scale 1/sqrt(d), no dropout.
/// Returns [T, Hq, d]. Throws std::invalid_argument naming the wrong argument before any kernel
/// runs (shapes first, then cu_seqlens, then device / dtype / head dim), and when
/// !flash_varlen_built().
torch::Tensor flash_varlen_attention(const torch::Tensor& q, const torch::Tensor& k,
                                     const torch::Tensor& v, const torch::Tensor& cu_seqlens,
                                     bool causal);

/// Additive mask [T, T]: 0 where key s is in the same sample as query t and s <= t, -inf
/// elsewhere. dtype/device follow `like`. Test reference only.
torch::Tensor block_causal_mask(const torch::Tensor& cu_seqlens, const torch::Tensor& like);

/// Reference for varlen_causal_attention: one dense attention over the whole pack with
/// block_causal_mask. Same shapes and result; O(T^2) memory. Test reference only.
torch::Tensor dense_reference_attention(const torch::Tensor& q, const torch::Tensor& k,
                                        const torch::Tensor& v, const torch::Tensor& cu_seqlens);

}  // namespace omnibal::models
