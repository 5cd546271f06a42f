// The tiny VLM on CUDA against the CPU in fp32 (both sides fp32, TF32 off): loss, token losses
// and every parameter gradient within 1e-3 relative, and the CUDA run against the Python golden
// values of tests/models/fixtures/tiny_golden.pt (the CPU test checks 1e-5 there).
#include <catch2/catch.hpp>

#include "models/model_test_util.h"

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
