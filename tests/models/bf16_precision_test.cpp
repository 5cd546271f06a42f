// bf16 against fp32 (docs/results.md#bf16-at-the-demo-learning-rate): the ops of
// models/mixed_precision.h, and the whole tiny VLM's gradients. Before layer_norm_fp32, the
// CPU LayerNorm kernel summed its weight and bias gradients in bf16 (3-13 % off on the tiny
// ViT's norms on demo packs, measured by scripts/bench/precision_diag.cpp; up to 20 % on the
// pack below); every other gradient is within ~1.5 % of fp32's, the rounding of bf16
// activations. Each check fails with the stock kernels.
#include <catch2/catch.hpp>

#include "model_test_util.h"
#include "models/mixed_precision.h"

using namespace omnibal::models;
using namespace omnibal::models::testing;

namespace {

/// ||a - ref|| / ||ref|| in fp64.
double rel_l2(const torch::Tensor& a, const torch::Tensor& ref) {
  const torch::Tensor r = ref.to(torch::kFloat64);
  return (a.to(torch::kFloat64) - r).norm().item<double>() / (r.norm().item<double>() + 1e-30);
}

torch::Tensor bf16_values(std::vector<int64_t> shape, double scale, double shift, uint64_t seed) {
  torch::manual_seed(seed);
  return (torch::randn(shape) * scale + shift).to(torch::kBFloat16);
}

}  // namespace

TEST_CASE("layer_norm_fp32: fp32 is the stock kernel, bf16 sums its parameter gradients in fp32",
          "[models][bf16]") {
  const torch::Tensor x = bf16_values({4000, 64}, 3.0, 1.0, 1);
  const torch::Tensor w = bf16_values({64}, 0.2, 1.0, 2), b = bf16_values({64}, 0.1, 0.0, 3);
  const torch::Tensor dy = bf16_values({4000, 64}, 1.0, 0.0, 4);
  SECTION("fp32: bitwise torch::layer_norm") {
    const torch::Tensor xf = x.to(torch::kFloat32), wf = w.to(torch::kFloat32);
    CHECK(torch::equal(layer_norm_fp32(xf, wf, b.to(torch::kFloat32), 1e-6),
                       torch::layer_norm(xf, {64}, wf, b.to(torch::kFloat32), 1e-6)));
  }
  SECTION("bf16: output and every gradient within bf16 rounding of fp64's") {
    auto run = [&](torch::Dtype dtype) {
      torch::Tensor xi = x.to(dtype).requires_grad_(), wi = w.to(dtype).requires_grad_(),
                    bi = b.to(dtype).requires_grad_();
      const torch::Tensor y = dtype == torch::kFloat64 ? torch::layer_norm(xi, {64}, wi, bi, 1e-6)
                                                       : layer_norm_fp32(xi, wi, bi, 1e-6);
      y.backward(dy.to(dtype));
      return std::vector<torch::Tensor>{y.detach(), xi.grad(), wi.grad(), bi.grad()};
    };
    const auto ref = run(torch::kFloat64), low = run(torch::kBFloat16);
    for (size_t i = 0; i < ref.size(); ++i) {
      INFO("tensor " << i
                     << " (y, dx, dweight, dbias); the stock kernel's dweight / dbias: 7 / 9 %");
      CHECK(low[i].scalar_type() == torch::kBFloat16);
      CHECK(rel_l2(low[i], ref[i]) < 5e-3);  // measured 1.6e-3 to 1.7e-3
    }
  }
}

TEST_CASE("embedding_lookup: fp32 is torch::embedding, bf16 sums a token's occurrences in fp32",
          "[models][bf16]") {
  torch::manual_seed(5);
  const torch::Tensor ids = torch::randint(0, 8, {4000}, torch::kInt64);  // ~500 per token
  const torch::Tensor w = bf16_values({64, 32}, 1.0, 0.0, 6);
  const torch::Tensor dy = bf16_values({4000, 32}, 1.0, 0.0, 7);
  auto grad_of = [&](const torch::Tensor& weight, bool stock) {
    torch::Tensor wi = weight.clone().requires_grad_();
    const torch::Tensor y = stock ? torch::embedding(wi, ids) : embedding_lookup(wi, ids);
    if (!stock) CHECK(torch::equal(y.detach(), torch::embedding(weight, ids)));
    y.backward(dy.to(weight.scalar_type()));
    return wi.grad();
  };
  const torch::Tensor wf = w.to(torch::kFloat32);
  CHECK(torch::equal(grad_of(wf, false), grad_of(wf, true)));
  const torch::Tensor ref = grad_of(w.to(torch::kFloat64), true);
  const torch::Tensor low = grad_of(w, false);
  CHECK(low.scalar_type() == torch::kBFloat16);
  CHECK(low.slice(0, 8).abs().max().item<float>() == 0);         // rows of unseen tokens stay zero
  INFO("stock bf16 kernel: " << rel_l2(grad_of(w, true), ref));  // measured 2.6e-2
  CHECK(rel_l2(low, ref) < 3e-3);  // one rounding per row: measured 1.7e-3
}

TEST_CASE("tiny VLM in bf16: every parameter's gradient within 3 % of fp32's on the same weights",
          "[models][bf16]") {
  const auto& preset = tiny_preset();
  const VlmOptions opt = VlmOptions{}.with_img_context_id(kImgContextId).with_seed(7);
  Vlm f32(preset, opt), b16(preset, VlmOptions(opt).with_dtype(torch::kBFloat16));
  {  // the fp32 model takes the bf16 model's (rounded) weights: compute rounding alone
    torch::NoGradGuard no_grad;
    auto low = b16->named_parameters();
    for (auto& p : f32->named_parameters()) p.value().copy_(low[p.key()]);
  }
  // 48 tiles (816 ViT rows, where a bf16 LayerNorm's parameter gradients drift most).
  std::vector<SampleSpec> specs(6, SampleSpec{8, 40, 12});
  const PackBatch pack = make_pack(preset, specs, 11);
  f32->forward(pack).loss_sum.backward();
  const UnitState out = b16->forward(pack);
  out.loss_sum.backward();
  const auto g32 = grads_of(*f32), g16 = grads_of(*b16);
  double worst = 0;
  std::string worst_name;
  for (const auto& [name, g] : g32) {
    INFO("parameter " << name);
    REQUIRE(g16.at(name).scalar_type() == torch::kBFloat16);
    const double e = rel_l2(g16.at(name), g);
    CHECK(e < 3e-2);  // measured: worst 1.3 % (vit_block_0.attn.qkv.bias); 20 % before the fix
    if (e > worst) worst = e, worst_name = name;
  }
  INFO("worst: " << worst_name << " " << worst);
  CHECK(worst > 0);  // bf16 is really in use
}
