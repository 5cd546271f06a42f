// Attention on CUDA: the LibTorch 2.x path of models/torch_compat.h (scaled_dot_product_attention,
// flash / memory-efficient kernels) against compat::math_attention, the 1.13 path, on the same
// device; and the packed (varlen) attention against its dense block-causal reference. On a
// LibTorch 1.13 build (the CPU dry run) both sides are the math path; the test still compiles.
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

}  // namespace

TEST_CASE("SDPA (2.x) equals math attention on CUDA, causal GQA and bidirectional", "[gpu][sdpa]") {
  INFO("LibTorch " << compat::torch_version() << ", SDPA " << compat::has_sdpa());
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
