// The one place that knows which LibTorch omnibal is compiled against. Debian 12 ships LibTorch
// 1.13 (CPU only); GPU machines use LibTorch 2.x with CUDA. Everything version-specific goes
// through the functions here, so the rest of the code base compiles unchanged against both.
//
// What differs today:
// - scaled_dot_product_attention (fused, flash / memory-efficient kernels) exists from 2.0 on.
//   On 1.13 attention is computed as matmul -> softmax -> matmul with an additive mask.
// - The default compute dtype: bf16 on CUDA (2.x), fp32 on CPU.
// - Making a seeded CPU generator (counter-based dropout, parameter init): 2.x has
//   at::detail::createCPUGenerator; 1.13 is written with the older make_generator form.
// Not handled here: NCCL (lib/comm chooses its backend at build time) and torch.compile (none).
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>
#include <limits>

/// 1 when at::scaled_dot_product_attention is available (LibTorch >= 2.0). Predefined only by
/// tests/models/compat_sdpa_test.cpp, which checks the 2.x branch on 1.13 against a stand-in.
#ifndef OMNIBAL_TORCH_HAS_SDPA
#if TORCH_VERSION_MAJOR >= 2
#define OMNIBAL_TORCH_HAS_SDPA 1
#else
#define OMNIBAL_TORCH_HAS_SDPA 0
#endif
#endif

namespace omnibal::models::compat {

/// LibTorch version as "major.minor.patch", for logs and run manifests.
inline const char* torch_version() { return TORCH_VERSION; }

/// True when fused scaled-dot-product attention is used (LibTorch >= 2.0).
constexpr bool has_sdpa() { return OMNIBAL_TORCH_HAS_SDPA != 0; }

/// The compute dtype for parameters and activations on `device`: bf16 on CUDA, fp32 elsewhere.
inline torch::Dtype default_dtype(const torch::Device& device) {
  return device.is_cuda() ? torch::kBFloat16 : torch::kFloat32;
}

/// A CPU generator (mt19937) seeded with `seed`: the same seed gives the same stream on every
/// LibTorch version and thread count (the CPU uniform_ / normal_ kernels draw serially).
inline at::Generator cpu_generator(uint64_t seed) {
#if TORCH_VERSION_MAJOR >= 2
  return at::detail::createCPUGenerator(seed);
#else
  return at::make_generator<at::CPUGeneratorImpl>(seed);
#endif
}

/// Additive causal mask [q_len, k_len]: 0 where key j <= query i (aligned at the top left),
/// -inf above the diagonal. dtype/device follow `like`.
inline torch::Tensor causal_additive_mask(int64_t q_len, int64_t k_len, const torch::Tensor& like) {
  return torch::full({q_len, k_len}, -std::numeric_limits<float>::infinity(), like.options())
      .triu(1);
}

/// Softmax attention softmax(q k^T / sqrt(d) + mask) v without any fused kernel; used on 1.13 and
/// as the reference. q [..., Lq, d], k/v [..., Lk, d]; mask broadcastable to [..., Lq, Lk] or
/// undefined. Softmax runs in fp32 when the inputs are reduced precision.
inline torch::Tensor math_attention(const torch::Tensor& q, const torch::Tensor& k,
                                    const torch::Tensor& v, const torch::Tensor& mask) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  torch::Tensor scores;
  if (mask.defined() && q.dim() == 3) {  // one fused op: mask + scale * q k^T
    scores = torch::baddbmm(mask.expand({q.size(0), q.size(1), k.size(1)}), q, k.transpose(1, 2),
                            /*beta=*/1.0, /*alpha=*/scale);
  } else {
    scores = torch::matmul(q, k.transpose(-2, -1)).mul_(scale);
    if (mask.defined()) scores = scores + mask;
  }
  torch::Tensor probs = scores.dtype() == torch::kFloat32
                            ? torch::softmax(scores, -1)
                            : torch::softmax(scores, -1, torch::kFloat32).to(q.scalar_type());
  return torch::matmul(probs, v);
}

/// Multi-head attention over one sequence per batch element. q/k/v [B, H, L, d] (same H: expand
/// grouped K/V heads before calling). causal: key j is visible to query i only when j <= i.
/// Returns [B, H, L, d]. On 2.x this is scaled_dot_product_attention (flash / memory-efficient
/// kernels on CUDA); on 1.13 matmul-softmax.
inline torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, bool causal) {
#if OMNIBAL_TORCH_HAS_SDPA
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                          /*is_causal=*/causal);
#else
  const torch::Tensor mask =
      causal ? causal_additive_mask(q.size(-2), k.size(-2), q) : torch::Tensor();
  return math_attention(q, k, v, mask);
#endif
}

/// Causal grouped-query attention for one sample: q [Hq, L, d], k/v [Hkv, L, d] with
/// Hq % Hkv == 0 (query head h reads K/V head h / (Hq / Hkv), as in LLaMA's repeat_kv).
/// Returns [Hq, L, d]. On 1.13 the query heads of one group are stacked along the sequence so
/// K/V are never copied; on 2.x K/V are expanded and SDPA runs with is_causal.
inline torch::Tensor causal_gqa_attention(const torch::Tensor& q, const torch::Tensor& k,
                                          const torch::Tensor& v) {
  const int64_t hq = q.size(0), hkv = k.size(0), len = q.size(1), d = q.size(2);
  const int64_t group = hq / hkv;
#if OMNIBAL_TORCH_HAS_SDPA
  auto expand = [&](const torch::Tensor& t) {
    return group == 1 ? t : t.unsqueeze(1).expand({hkv, group, len, d}).reshape({hq, len, d});
  };
  return at::scaled_dot_product_attention(q.unsqueeze(0), expand(k).unsqueeze(0),
                                          expand(v).unsqueeze(0), {}, 0.0, true)
      .squeeze(0);
#else
  // [Hq, L, d] -> [Hkv, group * L, d]: row r of a group is query position r % L.
  const torch::Tensor qg = q.reshape({hkv, group * len, d});
  torch::Tensor mask = causal_additive_mask(len, len, q);
  if (group > 1) mask = mask.repeat({group, 1});
  return math_attention(qg, k, v, mask).reshape({hq, len, d});
#endif
}

}  // namespace omnibal::models::compat
