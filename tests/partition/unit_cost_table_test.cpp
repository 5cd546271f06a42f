#include "partition/unit_cost_table.h"

#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "core/error.h"
#include "partition/cost_model.h"

using namespace omnibal::partition;
using omnibal::UnitKind;

namespace {
UnitCostTable small_table() {
  UnitCostTable t;
  t.model = "tiny";
  t.source = "profiled:cpu";
  t.load = {4, 100, 2};
  t.units = {{"vit_embed", UnitKind::kVitEmbed, 0.1, 0.2, 1000, 50, false, 400},
             {"vit_block.0", UnitKind::kVitBlock, 0.5, 1.0, 3000, 80, false, 400},
             {"llm_block.0", UnitKind::kLlmBlock, 0.25, 0.5, 2000, 90, true, 300},
             {"head", UnitKind::kLlmHead, 0.05, 0.1, 500, 60, true, 0}};
  return t;
}
}  // namespace

TEST_CASE("unit cost tables round-trip through JSON", "[partition][cost_table]") {
  const auto t = small_table();
  const std::string path = "unit_cost_table_test.json";
  write_unit_cost_table(t, path);
  const auto back = read_unit_cost_table(path);
  std::remove(path.c_str());
  CHECK(back.model == "tiny");
  CHECK(back.load.tokens == 100);
  REQUIRE(back.units.size() == 4);
  CHECK(back.units[1].name == "vit_block.0");
  CHECK(back.units[1].kind == UnitKind::kVitBlock);
  CHECK(back.units[1].backward_s == 1.0);
  CHECK_FALSE(back.units[1].trainable);
  CHECK(back.units[2].activation_bytes == 2000);
  CHECK(back.checkpoint_bytes(2) == 400);
  CHECK(back.checkpoint_bytes(0) == 0);
  CHECK_FALSE(back.units[2].checkpointed_forward_s);
}

TEST_CASE("profiled checkpointed times: round trip, fallbacks, recompute cost, scaling",
          "[partition][cost_table]") {
  auto t = small_table();
  UnitCost& block = t.units[2];  // llm_block.0: forward 0.25, backward 0.5
  // Without profiled times a checkpointed block costs one more forward in the backward.
  CHECK(block.checkpointed_forward() == 0.25);
  CHECK(block.checkpointed_backward() == 0.75);
  CHECK(block.rerun_seconds() == 0.25);
  CHECK(block.recompute_cost() == 0.25);
  block.checkpointed_forward_s = 0.2;
  block.checkpointed_backward_s = 0.7;
  CHECK(block.rerun_seconds() == Approx(0.2));
  CHECK(block.recompute_cost() == Approx(0.15));  // 0.2 + 0.7 - 0.25 - 0.5
  const auto back = parse_unit_cost_table(unit_cost_table_json(t), "t.json");
  REQUIRE(back.units[2].checkpointed_forward_s);
  CHECK(*back.units[2].checkpointed_forward_s == 0.2);
  CHECK(*back.units[2].checkpointed_backward_s == 0.7);
  CHECK_FALSE(back.units[1].checkpointed_backward_s);
  // Timing noise never makes recomputation pay: the costs are floored at 0.
  block.checkpointed_forward_s = 0.1;
  block.checkpointed_backward_s = 0.45;
  CHECK(block.checkpointed_backward() == 0.5);  // at least the plain backward
  CHECK(block.rerun_seconds() == 0);
  CHECK(block.recompute_cost() == 0);
  // They scale with the load like forward_s.
  const auto twice = table_at_load(t, TableLoad{4, 200, 2});
  CHECK(*twice.units[2].checkpointed_forward_s == Approx(0.2));
  CHECK(*twice.units[2].checkpointed_backward_s == Approx(0.9));
  std::string bad = unit_cost_table_json(t);
  const std::string key = "\"checkpointed_forward_s\": 0.1";
  bad.replace(bad.find(key), key.size(), "\"checkpointed_forward_s\": -0.1");
  CHECK_THROWS_WITH(parse_unit_cost_table(bad, "t.json"),
                    Catch::Contains("units[2]") && Catch::Contains("checkpointed_forward_s"));
  // One checkpointed run gives both; a table with one of them is refused.
  t.units[2].checkpointed_backward_s.reset();
  CHECK_THROWS_WITH(parse_unit_cost_table(unit_cost_table_json(t), "t.json"),
                    Catch::Contains("units[2]") && Catch::Contains("come together"));
}

TEST_CASE("bad cost tables name the unit and key", "[partition][cost_table]") {
  std::string text = unit_cost_table_json(small_table());
  std::string bad = text;
  bad.replace(bad.find("\"vit_block\""), 11, "\"vit_blok\"");
  CHECK_THROWS_WITH(parse_unit_cost_table(bad, "t.json"),
                    Catch::Contains("t.json: units[1]") && Catch::Contains("vit_blok"));
  bad = text;
  bad.replace(bad.find("\"forward_s\": 0.25"), 17, "\"forward_s\": -1.0");
  CHECK_THROWS_WITH(parse_unit_cost_table(bad, "t.json"),
                    Catch::Contains("units[2]") && Catch::Contains("forward_s"));
  CHECK_THROWS_WITH(parse_unit_cost_table("{", "t.json"), Catch::Contains("not valid JSON"));
}

TEST_CASE("a profiled table scales with tiles and tokens", "[partition][cost_table]") {
  const ScaledTableCostModel model(small_table());
  const auto t = model.costs(MicroBatchLoad::packed({4, 4}, {100, 100}));  // 8 tiles, 200 tokens
  CHECK(t.units[1].forward_s == Approx(1.0));                              // ViT: x2 tiles
  CHECK(t.units[2].forward_s == Approx(0.5));                              // LLM: x2 tokens
  CHECK(t.units[2].activation_bytes == Approx(4000));
  const auto padded = model.costs(MicroBatchLoad::padded_to_longest({1, 1}, {50, 150}));
  CHECK(padded.units[2].forward_s == Approx(0.75));  // 2 x 150 computed tokens
  CHECK(padded.units[0].forward_s == Approx(0.05));  // 2 tiles
}

TEST_CASE("table_at_load rescales a table to another pack load, or keeps it",
          "[partition][cost_table]") {
  const auto t = small_table();  // 4 tiles, 100 tokens
  const auto mean = table_at_load(t, TableLoad{6, 50, 3});
  CHECK(mean.load.tiles == 6);
  CHECK(mean.load.tokens == 50);
  CHECK(mean.load.samples == 3);
  CHECK(mean.units[1].forward_s == Approx(0.75));   // ViT: x1.5 tiles
  CHECK(mean.units[2].forward_s == Approx(0.125));  // LLM: x0.5 tokens
  CHECK(mean.units[2].backward_s == Approx(0.25));
  CHECK(mean.units[2].parameter_bytes == 90);  // parameters do not scale
  // The same tiles and tokens: the table itself (its samples kept).
  const auto same = table_at_load(t, TableLoad{4, 100, 7});
  CHECK(same.load.samples == 2);
  CHECK(same.units[1].forward_s == 0.5);
}
