// Packed (varlen) execution equals per-sample execution; the segment loop equals the dense
// block-diagonal reference; attention is isolated between samples and causal within them.
#include <catch2/catch.hpp>

#include "models/torch_compat.h"
#include "models/varlen_attention.h"
#include "model_test_util.h"

using namespace omnibal::models;
using namespace omnibal::models::testing;

namespace {

torch::Tensor random_tensor(omnibal::Rng& rng, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<float>(2.0 * rng.uniform() - 1.0);
  return torch::tensor(v).reshape(shape);
}

}  // namespace

TEST_CASE("a pack of 3 unequal samples gives the per-sample losses and gradients",
          "[models][packing]") {
  const std::vector<SampleSpec> specs{{2, 23, 7}, {0, 17, 5}, {1, 30, 11}};
  const uint64_t seed = GENERATE(1, 2);
  const PackBatch pack = make_pack(tiny_preset(), specs, seed);
  Vlm packed(tiny_preset(), VlmOptions{}.with_img_context_id(kImgContextId).with_seed(seed));
  fill_golden(packed);
  UnitState out = packed->forward(pack);
  out.loss_sum.backward();
  const auto pack_losses = sample_losses(out);
  const auto pack_grads = grads_of(*packed);

  Vlm single(tiny_preset(), VlmOptions{}.with_img_context_id(kImgContextId).with_seed(seed));
  fill_golden(single);
  int64_t labels = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    UnitState one = single->forward(sample_of(pack, specs, i));
    CHECK(one.label_count == specs[i].labelled);
    CHECK(one.loss_sum.item<double>() == Approx(pack_losses[i]).epsilon(1e-5));
    labels += one.label_count;
    one.loss_sum.backward();  // gradients accumulate over the three samples
  }
  CHECK(out.label_count == labels);
  for (const auto& [name, g_single] : grads_of(*single)) {
    INFO(name);
    CHECK(rel_err(pack_grads.at(name), g_single) < 2e-5);
  }
}

TEST_CASE("the per-segment attention loop equals the dense block-diagonal reference",
          "[models][packing]") {
  const auto lengths = GENERATE(std::vector<int64_t>{7}, std::vector<int64_t>{1, 5, 3},
                                std::vector<int64_t>{12, 1, 9, 4}, std::vector<int64_t>{33, 2});
  const int64_t kv_heads = GENERATE(1, 2, 4);
  omnibal::Rng rng(static_cast<uint64_t>(lengths.size() * 10 + kv_heads));
  std::vector<int64_t> cu{0};
  for (auto l : lengths) cu.push_back(cu.back() + l);
  const int64_t tokens = cu.back(), heads = 4, hd = 8;
  const torch::Tensor cu_t = torch::tensor(cu);
  torch::Tensor q = random_tensor(rng, {tokens, heads, hd}).requires_grad_();
  torch::Tensor k = random_tensor(rng, {tokens, kv_heads, hd}).requires_grad_();
  torch::Tensor v = random_tensor(rng, {tokens, kv_heads, hd}).requires_grad_();
  const torch::Tensor w = random_tensor(rng, {tokens, heads, hd});

  const torch::Tensor fast = varlen_causal_attention(q, k, v, cu_t);
  const auto g_fast = torch::autograd::grad({(fast * w).sum()}, {q, k, v});
  const torch::Tensor ref = dense_reference_attention(q, k, v, cu_t);
  const auto g_ref = torch::autograd::grad({(ref * w).sum()}, {q, k, v});
  CHECK(rel_err(fast, ref) < 1e-5);
  for (size_t i = 0; i < 3; ++i) CHECK(rel_err(g_fast[i], g_ref[i]) < 1e-5);
  // The first token of every sample attends only to itself: its output is its own value row.
  for (size_t s = 0; s < lengths.size(); ++s) {
    const torch::Tensor v0 = v[cu[s]].repeat_interleave(heads / kv_heads, 0);
    CHECK(rel_err(fast[cu[s]], v0) < 1e-6);
  }
}

TEST_CASE(
    "isolation and causality: sample 2 never changes sample 1, later tokens never change "
    "earlier ones",
    "[models][packing]") {
  const std::vector<SampleSpec> specs{{1, 14, 17}, {1, 12, 15}};
  PackBatch pack = make_pack(tiny_preset(), specs, 7);
  Vlm model(tiny_preset(), VlmOptions{}.with_img_context_id(kImgContextId));
  fill_golden(model);
  torch::NoGradGuard no_grad;
  const int64_t last_block = model->num_units() - 1;  // hidden states before the head
  auto hidden = [&](const PackBatch& p) {
    return model->forward(UnitState::from_pack(p), 0, last_block).hidden;
  };
  const torch::Tensor base = hidden(pack);
  const int64_t split = pack.cu_seqlens[1].item<int64_t>(), tokens = pack.input_ids.size(0);

  SECTION("isolation: a text token and the image of sample 2") {
    PackBatch changed = pack;
    changed.input_ids = pack.input_ids.clone();
    changed.input_ids[split + 1] =
        (changed.input_ids[split + 1].item<int64_t>() + 1) % kImgContextId;
    changed.pixel_values = pack.pixel_values.clone();
    changed.pixel_values[1] += 0.5;  // sample 2's tile
    const torch::Tensor after = hidden(changed);
    CHECK(torch::equal(after.slice(0, 0, split), base.slice(0, 0, split)));
    CHECK((after.slice(0, split + 1) - base.slice(0, split + 1)).abs().max().item<double>() > 1e-3);
  }
  SECTION("causality: the last text token of sample 1") {
    const int64_t t = split - 1;
    PackBatch changed = pack;
    changed.input_ids = pack.input_ids.clone();
    changed.input_ids[t] = (changed.input_ids[t].item<int64_t>() + 1) % kImgContextId;
    const torch::Tensor after = hidden(changed);
    CHECK(torch::equal(after.slice(0, 0, t), base.slice(0, 0, t)));
    CHECK((after[t] - base[t]).abs().max().item<double>() > 1e-3);
    CHECK(torch::equal(after.slice(0, split, tokens), base.slice(0, split, tokens)));
  }
}

TEST_CASE("a text-only pack without pixel values runs the LLM alone", "[models][packing]") {
  PackBatch pack = make_pack(tiny_preset(), {{0, 12, 4}, {0, 9, 3}}, 11);
  Vlm model(tiny_preset(), VlmOptions{}.with_img_context_id(kImgContextId));
  const UnitState with_dummy = model->forward(pack);  // two dummy tiles, features dropped
  pack.pixel_values = torch::Tensor();
  pack.image_flags = torch::Tensor();
  const UnitState without = model->forward(pack);
  CHECK(without.label_count == 7);
  CHECK(without.loss_sum.item<double>() ==
        Approx(with_dummy.loss_sum.item<double>()).epsilon(1e-6));
  pack.input_ids = pack.input_ids.clone();
  pack.input_ids[2] = kImgContextId;
  CHECK_THROWS_WITH(model->forward(pack), Catch::Contains("1 <IMG_CONTEXT> tokens") &&
                                              Catch::Contains("produced 0 image-feature tokens"));
}
