// Bad input is a clear omnibal::Error naming what was expected and what was seen.
#include <catch2/catch.hpp>

#include "core/error.h"
#include "model_test_util.h"

using namespace omnibal::models;
using namespace omnibal::models::testing;

TEST_CASE("a wrong <IMG_CONTEXT> count names both counts", "[models][errors]") {
  Vlm model(tiny_preset(), VlmOptions{}.with_img_context_id(kImgContextId));
  PackBatch pack = make_pack(tiny_preset(), {{2, 10, 3}, {1, 8, 2}}, 5);  // 3 tiles -> 12 tokens
  pack.input_ids = pack.input_ids.clone();
  pack.input_ids[3] = 7;  // one <IMG_CONTEXT> fewer
  REQUIRE(pack.input_ids.eq(kImgContextId).sum().item<int64_t>() == 11);
  CHECK_THROWS_WITH(model->forward(pack), Catch::Contains("11 <IMG_CONTEXT> tokens") &&
                                              Catch::Contains("produced 12 image-feature tokens"));
  pack.image_flags = torch::tensor(std::vector<int64_t>{1, 0, 1});  // a dropped tile: 8 features
  CHECK_THROWS_WITH(model->forward(pack), Catch::Contains("produced 8 image-feature tokens"));
}

TEST_CASE("a wrong tile size is rejected", "[models][errors]") {
  Vlm model(tiny_preset(), VlmOptions{}.with_img_context_id(kImgContextId));
  PackBatch pack = make_pack(tiny_preset(), {{1, 10, 3}}, 5);
  const int64_t side = GENERATE(42, 50);  // not a multiple of 2 * 14
  pack.pixel_values = torch::zeros({1, 3, side, side});
  CHECK_THROWS_WITH(model->forward(pack),
                    Catch::Contains("wrong tile size") && Catch::Contains("28"));
  pack.pixel_values = torch::zeros({1, 3, 56, 84});
  CHECK_THROWS_WITH(model->forward(pack), Catch::Contains("wrong tile size"));
  pack.pixel_values = torch::zeros({1, 1, 56, 56});
  CHECK_THROWS_WITH(model->forward(pack), Catch::Contains("wrong tile size"));
}

TEST_CASE("another valid tile size interpolates the position embedding", "[models][errors]") {
  Vlm model(tiny_preset(), VlmOptions{}.with_img_context_id(kImgContextId));
  // 84 px tiles: 6x6 patches -> 9 LLM tokens per tile instead of 4.
  PackBatch pack = make_pack(tiny_preset(), {{0, 10, 3}}, 5);
  pack.pixel_values = torch::zeros({1, 3, 84, 84});
  pack.image_flags = torch::tensor(std::vector<int64_t>{1});
  pack.input_ids = torch::cat({pack.input_ids, torch::full({9}, kImgContextId)});
  pack.labels = torch::cat({pack.labels, torch::full({9}, -100)});
  pack.position_ids = torch::arange(pack.input_ids.size(0));
  pack.cu_seqlens = torch::tensor(std::vector<int64_t>{0, pack.input_ids.size(0)});
  const UnitState out = model->forward(pack);
  CHECK(out.label_count == 3);
  CHECK(std::isfinite(out.loss_sum.item<double>()));
}

TEST_CASE("a pack over llm.max_seq_len is rejected", "[models][errors]") {
  Vlm model(tiny_preset(), VlmOptions{}.with_img_context_id(kImgContextId));
  const int max_len = tiny_preset().llm.max_seq_len;
  PackBatch pack = make_pack(tiny_preset(), {{1, 600, 3}, {0, max_len - 600, 3}}, 5);
  CHECK_THROWS_WITH(model->forward(pack),
                    Catch::Contains(std::to_string(max_len + 4) + " tokens") &&
                        Catch::Contains("max_seq_len = " + std::to_string(max_len)));
}

TEST_CASE("malformed packs and out-of-order units are rejected", "[models][errors]") {
  Vlm model(tiny_preset(), VlmOptions{}.with_img_context_id(kImgContextId));
  PackBatch pack = make_pack(tiny_preset(), {{1, 10, 3}}, 5);
  PackBatch bad = pack;
  bad.cu_seqlens = torch::tensor(std::vector<int64_t>{0, 5});
  CHECK_THROWS_WITH(model->forward(bad), Catch::Contains("cu_seqlens") && Catch::Contains("14"));
  bad = pack;
  bad.input_ids = pack.input_ids.clone();
  bad.input_ids[0] = 5000;
  CHECK_THROWS_WITH(model->forward(bad), Catch::Contains("max 5000"));
  // Running llm_embed on the pixel state skips the ViT: a phase error naming the unit.
  const int64_t embed = tiny_preset().vit.depth + 2;
  CHECK_THROWS_WITH(model->forward(UnitState::from_pack(pack), embed, embed + 1),
                    Catch::Contains("llm_embed") && Catch::Contains("'projected'"));
  CHECK_THROWS_WITH(Vlm(tiny_preset(), VlmOptions{}), Catch::Contains("img_context_id"));
}
