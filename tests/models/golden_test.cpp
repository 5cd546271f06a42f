// The tiny preset against golden values computed by scripts/golden/make_tiny_golden.py with
// PyTorch (torch 2.11 of the pinned environment) from the architecture description (not from
// this C++).
#include <catch2/catch.hpp>

#include "model_test_util.h"

using namespace omnibal::models;
using namespace omnibal::models::testing;

TEST_CASE("tiny VLM matches the Python golden logits, loss and gradients", "[models][golden]") {
  const GoldenFixture fx;
  const auto get = [&](const std::string& key) { return fx.get(key); };
  const auto& preset = tiny_preset();
  const int64_t img_id = fx.img_context_id();
  Vlm model(preset, VlmOptions{}.with_img_context_id(img_id));
  fill_golden(model);

  const PackBatch pack = fx.pack(preset);

  UnitState out = model->forward(pack);
  REQUIRE(out.label_count == get("label_count").item<int64_t>());
  CHECK(torch::equal(out.label_positions, get("label_positions")));
  CHECK(rel_err(out.logits, get("logits")) < 1e-5);
  CHECK(rel_err(out.token_loss, get("token_loss")) < 1e-5);
  CHECK(out.loss_sum.item<double>() == Approx(get("loss_sum").item<double>()).epsilon(1e-6));

  out.loss_sum.backward();
  int64_t checked = 0;
  for (const auto& item : model->named_parameters()) {
    INFO("parameter " << item.key());
    REQUIRE(fx.contains("grad_idx/" + item.key()));
    const torch::Tensor g = item.value().grad().flatten();
    const torch::Tensor idx = get("grad_idx/" + item.key()).to(torch::kInt64);
    const torch::Tensor expected = get("grad_val/" + item.key());
    const double scale = expected.abs().max().item<double>() + 1e-8;
    CHECK((g.index_select(0, idx) - expected).abs().max().item<double>() / scale < 1e-5);
    CHECK(g.norm().item<double>() ==
          Approx(get("grad_norm/" + item.key()).item<double>()).epsilon(1e-5).margin(1e-9));
    ++checked;
  }
  CHECK(checked == static_cast<int64_t>(model->named_parameters().size()));
  CHECK(checked == 77);  // every parameter of the tiny preset has a golden gradient
}
