// models/torch_compat.h on the CPU: the SDPA entry points (attention, causal_gqa_attention; the
// CPU training path of the ViT and of every packed LLM segment) against math_attention, its
// matmul-softmax reference, and against attention written out per head from the definition,
// forward and backward.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "model_test_util.h"
#include "models/torch_compat.h"

using namespace omnibal::models;
using omnibal::models::testing::rel_err;

namespace {

/// One causal attention head from the definition: q, k, v [L, d] -> [L, d].
torch::Tensor causal_head_by_definition(const torch::Tensor& q, const torch::Tensor& k,
                                        const torch::Tensor& v) {
  const int64_t len = q.size(0);
  torch::Tensor scores = q.matmul(k.t()) / std::sqrt(static_cast<double>(q.size(1)));
  const auto future = torch::ones({len, len}, torch::kBool).triu(1);
  scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
  return torch::softmax(scores, -1).matmul(v);
}

}  // namespace

TEST_CASE("causal_gqa_attention (SDPA) equals per-head causal attention and math_attention",
          "[models][compat]") {
  const int64_t kv_heads = GENERATE(1, 2, 4), heads = 4, len = 9, d = 8;
  INFO("LibTorch " << compat::torch_version() << ", kv heads " << kv_heads);
  torch::manual_seed(kv_heads);
  const auto q = torch::randn({heads, len, d}), k = torch::randn({kv_heads, len, d}),
             v = torch::randn({kv_heads, len, d});
  const torch::Tensor out = compat::causal_gqa_attention(q, k, v);
  REQUIRE(out.sizes() == q.sizes());
  for (int64_t h = 0; h < heads; ++h) {
    const int64_t g = h / (heads / kv_heads);  // LLaMA repeat_kv: query head h reads K/V head g
    INFO("query head " << h);
    CHECK(rel_err(out[h], causal_head_by_definition(q[h], k[g], v[g])) < 1e-6);
  }
  const auto ke = k.repeat_interleave(heads / kv_heads, 0),
             ve = v.repeat_interleave(heads / kv_heads, 0);
  const auto mask = compat::causal_additive_mask(len, len, q);
  CHECK(rel_err(out, compat::math_attention(q, ke, ve, mask)) < 1e-6);
  // Query 0 sees key 0 only: its output is v[0] of its K/V head.
  CHECK(rel_err(out.select(1, 0), ve.select(1, 0)) < 1e-6);
}

TEST_CASE("attention (SDPA) equals math_attention, bidirectional and causal, with gradients",
          "[models][compat]") {
  const bool causal = GENERATE(false, true);
  INFO("causal " << causal);
  const int64_t batch = 2, heads = 3, len = 17, d = 16;
  torch::manual_seed(7);
  const auto make = [&] { return torch::randn({batch, heads, len, d}).requires_grad_(true); };
  const torch::Tensor q = make(), k = make(), v = make();
  const torch::Tensor up = torch::randn({batch, heads, len, d});

  const torch::Tensor out = compat::attention(q, k, v, causal);
  const auto grads = torch::autograd::grad({out}, {q, k, v}, {up});
  const torch::Tensor mask = causal ? compat::causal_additive_mask(len, len, q) : torch::Tensor();
  const torch::Tensor ref = compat::math_attention(q, k, v, mask);
  const auto ref_grads = torch::autograd::grad({ref}, {q, k, v}, {up});

  REQUIRE(out.sizes() == q.sizes());
  CHECK(rel_err(out, ref) < 1e-6);
  for (int i = 0; i < 3; ++i) {
    INFO("gradient of "
         << "qkv"[i]);
    CHECK(rel_err(grads[i], ref_grads[i]) < 2e-6);
  }
  // Bidirectional attention differs from causal: the mask is really applied (or not).
  CHECK(rel_err(compat::attention(q, k, v, !causal), out) > 1e-2);
}

TEST_CASE("attention in bf16 on the CPU stays within bf16 rounding of fp32 math_attention",
          "[models][compat]") {
  const int64_t batch = 1, heads = 2, len = 33, d = 32;
  torch::manual_seed(11);
  const auto q = torch::randn({batch, heads, len, d}), k = torch::randn({batch, heads, len, d}),
             v = torch::randn({batch, heads, len, d});
  const auto mask = compat::causal_additive_mask(len, len, q);
  const torch::Tensor ref = compat::math_attention(q, k, v, mask);
  const auto bf = [](const torch::Tensor& t) { return t.to(torch::kBFloat16); };
  const torch::Tensor out = compat::attention(bf(q), bf(k), bf(v), /*causal=*/true);
  REQUIRE(out.scalar_type() == torch::kBFloat16);
  CHECK(rel_err(out.to(torch::kFloat32), ref) <
        2e-2);  // bf16 has 8 significant bits: inputs alone round ~4e-3
}
