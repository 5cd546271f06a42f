// The LibTorch 2.x branch of models/torch_compat.h (scaled_dot_product_attention with is_causal,
// GQA by expanding K/V) compiled and checked on LibTorch 1.13 against a stand-in SDPA with the
// 2.x signature. This executable must not link omnibal::models: its inline compat functions are
// the SDPA variants, the library's are the 1.13 ones.
#include <torch/version.h>

#if TORCH_VERSION_MAJOR < 2
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <limits>

namespace at {
/// Stand-in with the LibTorch 2.x signature; the semantics of PyTorch's documented reference.
inline Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                           const c10::optional<Tensor>& attn_mask = {},
                                           double dropout_p = 0.0, bool is_causal = false,
                                           c10::optional<double> scale = c10::nullopt) {
  TORCH_CHECK(dropout_p == 0.0 && !attn_mask.has_value(), "stand-in: mask/dropout unsupported");
  const double s = scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  Tensor scores = at::matmul(q, k.transpose(-2, -1)) * s;
  if (is_causal) {
    const auto lq = q.size(-2), lk = k.size(-2);
    scores = scores.masked_fill(at::ones({lq, lk}, at::kBool).triu(1),
                                -std::numeric_limits<float>::infinity());
  }
  return at::matmul(at::softmax(scores, -1), v);
}
}  // namespace at

#define OMNIBAL_TORCH_HAS_SDPA 1
#include "models/torch_compat.h"

using namespace omnibal::models;

TEST_CASE("the SDPA branch of torch_compat.h equals per-head causal attention",
          "[models][compat]") {
  static_assert(compat::has_sdpa(), "this test compiles the 2.x branch");
  const int64_t kv_heads = GENERATE(1, 2, 4), heads = 4, len = 9, d = 8;
  torch::manual_seed(kv_heads);
  const auto q = torch::randn({heads, len, d}), k = torch::randn({kv_heads, len, d}),
             v = torch::randn({kv_heads, len, d});
  const torch::Tensor out = compat::causal_gqa_attention(q, k, v);
  REQUIRE(out.sizes() == q.sizes());
  const auto mask = torch::full({len, len}, -std::numeric_limits<float>::infinity()).triu(1);
  for (int64_t h = 0; h < heads; ++h) {
    const int64_t g = h / (heads / kv_heads);  // LLaMA repeat_kv: query head h reads K/V head g
    const auto p = torch::softmax(q[h].matmul(k[g].t()) / std::sqrt(double(d)) + mask, -1);
    CHECK(torch::allclose(out[h], p.matmul(v[g]), 1e-5, 1e-6));
  }
  // Bidirectional (ViT) attention: every query sees every key.
  const auto ke = k.repeat_interleave(heads / kv_heads, 0),
             ve = v.repeat_interleave(heads / kv_heads, 0);
  const torch::Tensor full =
      compat::attention(q.unsqueeze(0), ke.unsqueeze(0), ve.unsqueeze(0), false);
  const auto p = torch::softmax(q.matmul(ke.transpose(1, 2)) / std::sqrt(double(d)), -1);
  CHECK(torch::allclose(full.squeeze(0), p.matmul(ve), 1e-5, 1e-6));
}
#endif
