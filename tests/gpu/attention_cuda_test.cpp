// Attention on CUDA: the LibTorch 2.x path of models/torch_compat.h (scaled_dot_product_attention,
// flash / memory-efficient kernels) against compat::math_attention, the 1.13 path, on the same
// device; the packed (varlen) attention against its dense block-causal reference; and the single
// flash varlen call (flash_varlen_attention) against the per-sample path, forward and q/k/v
// gradients. On a LibTorch 1.13 build (the CPU dry run) both sides are the math path and the flash
// cases are skipped; the test still compiles.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <limits>

#include "models/torch_compat.h"
#include "models/varlen_attention.h"

using namespace omnibal::models;

namespace {

double rel(const torch::Tensor& a, const torch::Tensor& b) {
  const auto a32 = a.to(torch::kFloat32), b32 = b.to(torch::kFloat32);
  return (a32 - b32).abs().max().item<double>() / (b32.abs().max().item<double>() + 1e-12);
}

// Flash varlen vs per sample: max |error| over max |fp32 reference| of the output and of each of
// the q/k/v gradients. bf16 keeps 8 significant bits (2^-8 = 3.9e-3 per rounding), so the flash
// path must stay within kFlashFwdTol / kFlashGradTol of the fp32 reference computed from the same
// bf16 values, and within 2x (+ 1e-3) of the error of the per-sample path run in bf16.
constexpr double kFlashFwdTol = 1e-2, kFlashGradTol = 2e-2;

/// Output and q/k/v gradients of one attention run.
struct AttentionRun {
  std::vector<torch::Tensor> tensors;  // out, dq, dk, dv
};

/// Runs `attend` on leaf copies of q/k/v in `dtype`, back-propagating g; returns out and grads.
template <typename Attend>
AttentionRun run_attention(const Attend& attend, const torch::Tensor& q, const torch::Tensor& k,
                           const torch::Tensor& v, const torch::Tensor& g, torch::Dtype dtype) {
  const auto leaf = [&](const torch::Tensor& t) {  // a fresh copy, also when t is in dtype
    return t.detach().to(dtype, /*non_blocking=*/false, /*copy=*/true).requires_grad_();
  };
  const torch::Tensor ql = leaf(q), kl = leaf(k), vl = leaf(v);
  const torch::Tensor out = attend(ql, kl, vl);
  out.backward(g.to(dtype));
  return {{out.detach(), ql.grad(), kl.grad(), vl.grad()}};
}

/// Bidirectional attention per sample (the ViT case): math attention per segment, K/V heads
/// expanded. q [T, Hq, d], k/v [T, Hkv, d], cu int64 CPU.
torch::Tensor full_attention_per_sample(const torch::Tensor& q, const torch::Tensor& k,
                                        const torch::Tensor& v, const torch::Tensor& cu) {
  std::vector<torch::Tensor> outs;
  const int64_t group = q.size(1) / k.size(1);
  for (int64_t i = 0; i + 1 < cu.size(0); ++i) {
    const int64_t b = cu[i].item<int64_t>(), len = cu[i + 1].item<int64_t>() - b;
    auto seg = [&](const torch::Tensor& t, int64_t rep) {
      return t.narrow(0, b, len).repeat_interleave(rep, 1).transpose(0, 1);
    };
    outs.push_back(
        compat::math_attention(seg(q, 1), seg(k, group), seg(v, group), {}).transpose(0, 1));
  }
  return torch::cat(outs, 0);
}

/// Checks flash (bf16) against the per-sample path in bf16 and in fp32 on the same bf16 values.
void check_flash_against_reference(const AttentionRun& flash, const AttentionRun& ref_bf16,
                                   const AttentionRun& ref_fp32) {
  const char* names[] = {"out", "dq", "dk", "dv"};
  for (size_t i = 0; i < 4; ++i) {
    const double flash_err = rel(flash.tensors[i], ref_fp32.tensors[i]);
    const double bf16_err = rel(ref_bf16.tensors[i], ref_fp32.tensors[i]);
    INFO(names[i] << ": flash error " << flash_err << ", per-sample bf16 error " << bf16_err);
    CHECK(flash.tensors[i].sizes() == ref_fp32.tensors[i].sizes());
    CHECK(flash_err < (i == 0 ? kFlashFwdTol : kFlashGradTol));
    CHECK(flash_err <= 2 * bf16_err + 1e-3);
  }
}

/// cu_seqlens (int64) of samples with the given lengths.
torch::Tensor flash_test_cu(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> cu{0};
  for (auto l : lengths) cu.push_back(cu.back() + l);
  return torch::tensor(cu);
}

}  // namespace

TEST_CASE("SDPA (2.x) equals math attention on CUDA, causal GQA and bidirectional", "[gpu][sdpa]") {
  INFO("LibTorch " << compat::torch_version());
  const auto dtype = GENERATE(torch::kFloat32, torch::kBFloat16);
  const int64_t kv_heads = GENERATE(1, 2, 4), heads = 4, len = 77, d = 64;
  const double tol = dtype == torch::kFloat32 ? 1e-4 : 2e-2;
  INFO("dtype " << c10::toString(dtype) << ", kv heads " << kv_heads);
  torch::manual_seed(kv_heads);
  const auto opt = torch::TensorOptions().device(torch::kCUDA).dtype(dtype);
  const auto q = torch::randn({heads, len, d}, opt), k = torch::randn({kv_heads, len, d}, opt),
             v = torch::randn({kv_heads, len, d}, opt);
  const torch::Tensor out = compat::causal_gqa_attention(q, k, v);
  REQUIRE(out.device().is_cuda());
  const int64_t group = heads / kv_heads;
  const auto ke = k.repeat_interleave(group, 0), ve = v.repeat_interleave(group, 0);
  const auto mask = compat::causal_additive_mask(len, len, q);
  CHECK(rel(out, compat::math_attention(q, ke, ve, mask)) < tol);
  const torch::Tensor full =
      compat::attention(q.unsqueeze(0), ke.unsqueeze(0), ve.unsqueeze(0), false);
  CHECK(rel(full.squeeze(0), compat::math_attention(q, ke, ve, torch::Tensor())) < tol);
}

TEST_CASE("packed varlen attention on CUDA equals the dense block-causal reference",
          "[gpu][sdpa]") {
  torch::manual_seed(3);
  const auto opt = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat32);
  const auto cu = torch::tensor(std::vector<int64_t>{0, 5, 37, 38, 100});
  const int64_t t = 100, hq = 8, hkv = 2, d = 32;
  const auto q = torch::randn({t, hq, d}, opt), k = torch::randn({t, hkv, d}, opt),
             v = torch::randn({t, hkv, d}, opt);
  const auto fast = varlen_causal_attention(q, k, v, cu);
  const auto ref = dense_reference_attention(q, k, v, cu);
  CHECK(rel(fast, ref) < 1e-4);
}

TEST_CASE("flash varlen equals the per-sample path: causal GQA, forward and q/k/v gradients",
          "[gpu][flash]") {
  if (!flash_varlen_built()) {
    WARN("LibTorch " << compat::torch_version() << " has no flash varlen: case not run");
    return;
  }
  const int64_t hkv = GENERATE(1, 2, 8), d = GENERATE(64, 128), hq = 8;
  const auto lengths =
      GENERATE(std::vector<int64_t>{5, 32, 1, 62, 129, 300}, std::vector<int64_t>{77});
  INFO("kv heads " << hkv << ", head dim " << d << ", samples " << lengths.size());
  torch::manual_seed(hkv * 1000 + d);
  const torch::Tensor cu = flash_test_cu(lengths), cu32 = cu.to(torch::kInt32);
  const int64_t t = cu[-1].item<int64_t>();
  const auto opt = torch::TensorOptions().device(torch::kCUDA);
  // bf16 values; the fp32 reference starts from exactly these.
  auto bf16 = [&](std::vector<int64_t> shape) {
    return torch::randn(shape, opt).to(torch::kBFloat16).to(torch::kFloat32);
  };
  const torch::Tensor q = bf16({t, hq, d}), k = bf16({t, hkv, d}), v = bf16({t, hkv, d}),
                      g = bf16({t, hq, d});
  auto flash_fn = [&](auto& a, auto& b, auto& c) {
    return flash_varlen_attention(a, b, c, cu32, true);
  };
  auto per_sample = [&](auto& a, auto& b, auto& c) {
    return varlen_attention_per_sample(a, b, c, cu);
  };
  const AttentionRun flash = run_attention(flash_fn, q, k, v, g, torch::kBFloat16);
  check_flash_against_reference(flash, run_attention(per_sample, q, k, v, g, torch::kBFloat16),
                                run_attention(per_sample, q, k, v, g, torch::kFloat32));
  // The model's entry point takes this path in bf16 on CUDA (the kernel's forward is deterministic).
  CHECK(torch::equal(varlen_causal_attention(q.to(torch::kBFloat16), k.to(torch::kBFloat16),
                                             v.to(torch::kBFloat16), cu),
                     flash.tensors[0]));
}

TEST_CASE("flash varlen, bidirectional (ViT tiles): forward and q/k/v gradients", "[gpu][flash]") {
  if (!flash_varlen_built()) {
    WARN("LibTorch " << compat::torch_version() << " has no flash varlen: case not run");
    return;
  }
  const int64_t hkv = GENERATE(2, 16), hq = 16, d = 64;
  torch::manual_seed(7 + hkv);
  const torch::Tensor cu = flash_test_cu({257, 257, 1, 100}), cu32 = cu.to(torch::kInt32);
  const int64_t t = cu[-1].item<int64_t>();
  const auto opt = torch::TensorOptions().device(torch::kCUDA);
  auto bf16 = [&](std::vector<int64_t> shape) {
    return torch::randn(shape, opt).to(torch::kBFloat16).to(torch::kFloat32);
  };
  const torch::Tensor q = bf16({t, hq, d}), k = bf16({t, hkv, d}), v = bf16({t, hkv, d}),
                      g = bf16({t, hq, d});
  auto flash_fn = [&](auto& a, auto& b, auto& c) {
    return flash_varlen_attention(a, b, c, cu32, false);
  };
  auto per_sample = [&](auto& a, auto& b, auto& c) {
    return full_attention_per_sample(a, b, c, cu);
  };
  check_flash_against_reference(run_attention(flash_fn, q, k, v, g, torch::kBFloat16),
                                run_attention(per_sample, q, k, v, g, torch::kBFloat16),
                                run_attention(per_sample, q, k, v, g, torch::kFloat32));
}

TEST_CASE("flash varlen over one-token samples returns each token's value row", "[gpu][flash]") {
  if (!flash_varlen_built()) {
    WARN("LibTorch " << compat::torch_version() << " has no flash varlen: case not run");
    return;
  }
  // max_seqlen 1 with GQA takes the kernel's swapped-heads branch; attention is then the identity
  // on V: out = v per query head, dv = g summed over the group, dq = dk = 0.
  const int64_t n = 40, hq = 8, hkv = 2, d = 64;
  torch::manual_seed(11);
  const torch::Tensor cu32 = torch::arange(n + 1, torch::kInt32);
  const auto opt = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  const torch::Tensor q = torch::randn({n, hq, d}, opt), k = torch::randn({n, hkv, d}, opt),
                      v = torch::randn({n, hkv, d}, opt), g = torch::randn({n, hq, d}, opt);
  auto flash_fn = [&](auto& a, auto& b, auto& c) {
    return flash_varlen_attention(a, b, c, cu32, true);
  };
  const AttentionRun run = run_attention(flash_fn, q, k, v, g, torch::kBFloat16);
  CHECK(rel(run.tensors[0], v.repeat_interleave(hq / hkv, 1)) < 1e-6);
  CHECK(run.tensors[1].abs().max().item<double>() < 1e-3);
  CHECK(run.tensors[2].abs().max().item<double>() < 1e-3);
  const torch::Tensor dv = g.to(torch::kFloat32).reshape({n, hkv, hq / hkv, d}).sum(2);
  CHECK(rel(run.tensors[3], dv) < 1e-2);
}

TEST_CASE("packed attention in fp32 on CUDA stays the per-sample path", "[gpu][flash]") {
  torch::manual_seed(13);
  const torch::Tensor cu = flash_test_cu({3, 60, 1});
  const auto opt = torch::TensorOptions().device(torch::kCUDA);
  const torch::Tensor q = torch::randn({64, 4, 64}, opt), k = torch::randn({64, 2, 64}, opt),
                      v = torch::randn({64, 2, 64}, opt);
  CHECK(
      torch::equal(varlen_causal_attention(q, k, v, cu), varlen_attention_per_sample(q, k, v, cu)));
}
