// The tiny VLM on CUDA against the CPU in fp32 (both sides fp32, TF32 off): loss, token losses
// and every parameter gradient within 1e-3 relative, and the CUDA run against the Python golden
// values of tests/models/fixtures/tiny_golden.pt (the CPU test checks 1e-5 there).
#include <catch2/catch.hpp>

#include <fstream>
#include <iterator>

#include "core/paths.h"
#include "models/model_test_util.h"

using namespace omnibal::models;
using namespace omnibal::models::testing;

namespace {

c10::Dict<c10::IValue, c10::IValue> load_fixture() {
  const std::string path = omnibal::source_dir() + "/tests/models/fixtures/tiny_golden.pt";
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return torch::pickle_load(bytes).toGenericDict();
}

}  // namespace

TEST_CASE("tiny VLM: CUDA fp32 equals CPU fp32 and the golden values within 1e-3", "[gpu][golden]") {
  auto fx = load_fixture();
  auto get = [&](const std::string& key) { return fx.at(key).toTensor(); };
  const auto& preset = tiny_preset();
  const int64_t img_id = get("img_context_id").item<int64_t>();
  PackBatch pack;
  pack.input_ids = get("input_ids");
  pack.labels = get("labels");
  pack.position_ids = get("position_ids");
  pack.cu_seqlens = get("cu_seqlens");
  pack.image_flags = get("image_flags");
  const int64_t tiles = pack.image_flags.size(0), side = preset.vit.tile_size;
  pack.pixel_values = golden_values("pixel_values", {tiles, 3, side, side});

  Vlm cpu(preset, VlmOptions{}.with_img_context_id(img_id));
  Vlm cuda(preset, VlmOptions{}.with_img_context_id(img_id).with_device(torch::kCUDA)
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
