// The tiny VLM on CUDA against the CPU in fp32 (both sides fp32, TF32 off): loss, token losses
// and every parameter gradient within 1e-3 relative, and the CUDA run against the Python golden
// values of tests/models/fixtures/tiny_golden.pt (the CPU test checks 1e-5 there).
#include <catch2/catch.hpp>

#include "models/model_test_util.h"
#include "models/weight_grad_store.h"

using namespace omnibal::models;
using namespace omnibal::models::testing;

TEST_CASE("tiny VLM: CUDA fp32 equals CPU fp32 and the golden values within 1e-3",
          "[gpu][golden]") {
  const GoldenFixture fx;
  const auto get = [&](const std::string& key) { return fx.get(key); };
  const auto& preset = tiny_preset();
  const int64_t img_id = fx.img_context_id();
  const PackBatch pack = fx.pack(preset);

  Vlm cpu(preset, VlmOptions{}.with_img_context_id(img_id));
  Vlm cuda(preset, VlmOptions{}
                       .with_img_context_id(img_id)
                       .with_device(torch::kCUDA)
                       .with_dtype(torch::kFloat32));
  fill_golden(cpu);
  fill_golden(cuda);
  UnitState ref = cpu->forward(pack);
  UnitState out = cuda->forward(pack);  // the pack is moved to the device inside
  REQUIRE(out.label_count == ref.label_count);
  CHECK(torch::equal(out.label_positions.cpu(), ref.label_positions));
  CHECK(rel_err(out.logits.cpu(), ref.logits) < 1e-3);
  CHECK(rel_err(out.token_loss.cpu(), ref.token_loss) < 1e-3);
  CHECK(rel_err(out.token_loss.cpu(), get("token_loss")) < 1e-3);
  CHECK(out.loss_sum.item<double>() == Approx(ref.loss_sum.item<double>()).epsilon(1e-3));
  CHECK(out.loss_sum.item<double>() == Approx(get("loss_sum").item<double>()).epsilon(1e-3));

  ref.loss_sum.backward();
  out.loss_sum.backward();
  const auto want = grads_of(*cpu), got = grads_of(*cuda);
  REQUIRE(want.size() == got.size());
  for (const auto& [name, g] : want) {
    INFO("parameter " << name);
    CHECK(rel_err(got.at(name).cpu(), g) < 1e-3);
  }
  CHECK(want.size() == 77);
}

TEST_CASE("tiny VLM on CUDA: ZB-H1's split backward (B, then W) equals the plain backward",
          "[gpu][zb]") {
  // On CUDA autograd runs the backward on its device thread: the deferred linears file their
  // (x, dy, W) from there (models/weight_grad_store.h).
  const GoldenFixture fx;
  const auto& preset = tiny_preset();
  const PackBatch pack = fx.pack(preset);
  auto make = [&] {
    Vlm v(preset, VlmOptions{}
                      .with_img_context_id(fx.img_context_id())
                      .with_device(torch::kCUDA)
                      .with_dtype(torch::kFloat32));
    fill_golden(v);
    return v;
  };
  Vlm plain = make(), split = make();
  plain->forward(pack).loss_sum.backward();
  auto store = c10::make_intrusive<WeightGradStore>();
  {
    WeightGradStore::Recording recording(store, 0);
    split->forward(pack).loss_sum.backward();  // B
  }
  CHECK(store->pending(0) > 0);
  // Before W the deferred weights have no gradient; the norms and biases have theirs from B.
  const auto deferred = grads_of(*split);
  CHECK(deferred.at("llm_block_0.attention.wq.weight").abs().sum().item<double>() == 0);
  CHECK(deferred.at("llm_block_0.attention_norm.weight").abs().sum().item<double>() > 0);
  CHECK(store->run(0) == 4 * 7 + 2 * 4 + 2 + 1);  // LLM blocks, ViT blocks, projector, head
  const auto want = grads_of(*plain), got = grads_of(*split);
  REQUIRE(want.size() == got.size());
  for (const auto& [name, g] : want) {
    INFO("parameter " << name);
    CHECK(rel_err(got.at(name).cpu(), g.cpu()) < 1e-5);
  }
}
