// The few calls whose form or choice depends on the device or the LibTorch build, in one place.
// omnibal builds against LibTorch 2.x only (the pinned torch 2.11.0 wheel, a CUDA 13.0 build,
// serves the CPU tests and the GPU builds alike; LibTorch 1.x is refused below). It holds:
// - attention() / causal_gqa_attention(): scaled_dot_product_attention (flash / memory-efficient
//   kernels on CUDA, the fused CPU kernel otherwise), the entry points of vit.cpp and of
//   varlen_attention.cpp's per-sample path;
// - math_attention() / causal_additive_mask(): the same attention written as matmul -> softmax
//   -> matmul, the reference of the SDPA calls and of the flash varlen kernel (tests, dense
//   reference of varlen_attention.h);
// - default_dtype(): bf16 on CUDA, fp32 elsewhere;
// - cpu_generator(): a seeded CPU generator (counter-based dropout, parameter init);
// - torch_version() for logs and run manifests.
// Elsewhere: post-accumulate-grad hooks (accumulate_grad_hook.h), the flash varlen kernel
// (varlen_attention.cpp), NCCL (lib/comm chooses its backend at build time); no torch.compile.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>
#include <limits>

// LibTorch 1.x (Debian's libtorch-dev 1.13) is no longer supported: build against the pinned
// torch 2.11.0 environment that scripts/setup.sh installs.
#if TORCH_VERSION_MAJOR < 2
#error "omnibal needs LibTorch >= 2.0 (scaled_dot_product_attention); LibTorch 1.x is unsupported"
#endif

namespace omnibal::models::compat {

/// LibTorch version as "major.minor.patch", for logs and run manifests.
inline const char* torch_version() { return TORCH_VERSION; }

/// The compute dtype for parameters and activations on `device`: bf16 on CUDA, fp32 elsewhere.
inline torch::Dtype default_dtype(const torch::Device& device) {
  return device.is_cuda() ? torch::kBFloat16 : torch::kFloat32;
}

/// A CPU generator (mt19937) seeded with `seed`: the same seed gives the same stream for every
/// thread count (the CPU uniform_ / normal_ kernels draw serially).
inline at::Generator cpu_generator(uint64_t seed) { return at::detail::createCPUGenerator(seed); }

/// Additive causal mask [q_len, k_len]: 0 where key j <= query i (aligned at the top left),
/// -inf above the diagonal. dtype/device follow `like`.
inline torch::Tensor causal_additive_mask(int64_t q_len, int64_t k_len, const torch::Tensor& like) {
  return torch::full({q_len, k_len}, -std::numeric_limits<float>::infinity(), like.options())
      .triu(1);
}

/// Softmax attention softmax(q k^T / sqrt(d) + mask) v without any fused kernel: the reference
/// of attention() and causal_gqa_attention(). q [..., Lq, d], k/v [..., Lk, d]; mask
/// broadcastable to [..., Lq, Lk] or undefined. Softmax runs in fp32 when the inputs are reduced
/// precision.
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

/// scaled_dot_product_attention over q/k/v [B, H, L, d], except that reduced-precision inputs on
/// the CPU are computed in fp32 and the result cast back: LibTorch 2.11's CPU flash-attention backward is 4-10x slower in bf16 than in fp32 (tiny:
/// 22.9 vs 2.2 ms per step, base-100m: 161 vs 39 ms; docs/results.md#libtorch-211-on-this-cpu),
/// which alone made tiny's bf16 step slower than fp32's. Costs the fp32 copies of q, k, v for
/// the backward; more precise, as autocast's fp32 softmax.
inline torch::Tensor sdpa(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                          bool causal) {
  if (q.device().is_cpu() &&
      (q.scalar_type() == torch::kBFloat16 || q.scalar_type() == torch::kHalf)) {
    return at::scaled_dot_product_attention(q.to(torch::kFloat32), k.to(torch::kFloat32),
                                            v.to(torch::kFloat32), {}, 0.0, causal)
        .to(q.scalar_type());
  }
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                          /*is_causal=*/causal);
}

/// Multi-head attention over one sequence per batch element. q/k/v [B, H, L, d] (same H: expand
/// grouped K/V heads before calling). causal: key j is visible to query i only when j <= i.
/// Returns [B, H, L, d]: sdpa() (flash / memory-efficient kernels on CUDA).
inline torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, bool causal) {
  return sdpa(q, k, v, causal);
}

/// Causal grouped-query attention for one sample: q [Hq, L, d], k/v [Hkv, L, d] with
/// Hq % Hkv == 0 (query head h reads K/V head h / (Hq / Hkv), as in LLaMA's repeat_kv).
/// Returns [Hq, L, d]: K/V expanded to Hq heads (a view when Hkv == Hq), then
/// scaled_dot_product_attention with is_causal.
inline torch::Tensor causal_gqa_attention(const torch::Tensor& q, const torch::Tensor& k,
                                          const torch::Tensor& v) {
  const int64_t hq = q.size(0), hkv = k.size(0), len = q.size(1), d = q.size(2);
  const int64_t group = hq / hkv;
  auto expand = [&](const torch::Tensor& t) {
    return group == 1 ? t : t.unsqueeze(1).expand({hkv, group, len, d}).reshape({hq, len, d});
  };
  return sdpa(q.unsqueeze(0), expand(k).unsqueeze(0), expand(v).unsqueeze(0), /*causal=*/true)
      .squeeze(0);
}

}  // namespace omnibal::models::compat
