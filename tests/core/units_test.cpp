// The unit vocabulary (core/units.h): one kind, two spellings of a name that round-trip, and
// the chain of a preset with its groups, blocks and recomputable units.
#include "core/units.h"

#include <catch2/catch.hpp>

#include "core/error.h"
#include "core/model_preset.h"

using namespace omnibal;

TEST_CASE("units: both spellings name the same unit and round-trip", "[core][units]") {
  CHECK(unit_name({UnitKind::kVitBlock, 3}) == "vit_block_3");
  CHECK(cost_table_name({UnitKind::kVitBlock, 3}) == "vit_block.3");
  CHECK(unit_name({UnitKind::kLlmHead, 0}) == "llm_head");
  CHECK(cost_table_name({UnitKind::kLlmHead, 0}) == "head");
  CHECK(unit_kind_name(UnitKind::kLlmHead) == std::string("llm_head"));
  CHECK(cost_table_kind_name(UnitKind::kLlmHead) == std::string("head"));
  const auto preset = load_model_preset("tiny");
  for (const UnitId& id : unit_chain(preset)) {
    CHECK(find_unit_id(unit_name(id)) == id);
    CHECK(find_unit_id(cost_table_name(id)) == id);
    CHECK(parse_cost_table_kind(cost_table_kind_name(id.kind), "t") == id.kind);
  }
  for (const char* bad : {"vit_block", "vit_block_", "vit_block_x", "llm_block-1", "head_0", ""})
    CHECK_FALSE(find_unit_id(bad).has_value());
  CHECK_THROWS_WITH(parse_unit_id("llm_blok_1", "--recompute-units"),
                    Catch::Contains("--recompute-units: unknown unit 'llm_blok_1'"));
  CHECK_THROWS_WITH(parse_cost_table_kind("llm_head", "t.json: units[9]"),
                    Catch::Contains("t.json: units[9]: unknown unit kind 'llm_head'"));
}

TEST_CASE("units: a preset's chain, freeze groups, blocks and recomputable kinds",
          "[core][units]") {
  const auto preset = load_model_preset("tiny");
  const int lv = preset.vit.depth, ll = preset.llm.depth;
  const auto chain = unit_chain(preset);
  REQUIRE(static_cast<int>(chain.size()) == unit_count(preset));
  REQUIRE(unit_count(preset) == lv + ll + 4);
  CHECK(chain.front() == UnitId{UnitKind::kVitEmbed, 0});
  CHECK(chain[1] == UnitId{UnitKind::kVitBlock, 0});
  CHECK(chain[lv] == UnitId{UnitKind::kVitBlock, lv - 1});
  CHECK(chain[lv + 1] == UnitId{UnitKind::kProjector, 0});
  CHECK(chain[lv + 2] == UnitId{UnitKind::kLlmEmbed, 0});
  CHECK(chain[lv + 3 + ll - 1] == UnitId{UnitKind::kLlmBlock, ll - 1});
  CHECK(chain.back() == UnitId{UnitKind::kLlmHead, 0});
  CHECK(unit_names(preset)[lv + 3] == "llm_block_0");
  CHECK_THROWS_WITH(unit_at(preset, unit_count(preset)), Catch::Contains("out of range"));
  int blocks = 0, vision = 0;
  for (const UnitId& id : chain) {
    blocks += is_block(id.kind);
    vision += is_vision(id.kind);
    CHECK(is_recomputable(id.kind) == is_block(id.kind));
  }
  CHECK(blocks == lv + ll);
  CHECK(vision == lv + 2);
  CHECK(freeze_group(UnitKind::kVitEmbed) == UnitGroup::kVit);
  CHECK(freeze_group(UnitKind::kVitBlock) == UnitGroup::kVit);
  CHECK(freeze_group(UnitKind::kProjector) == UnitGroup::kProjector);
  CHECK(freeze_group(UnitKind::kLlmEmbed) == UnitGroup::kLlm);
  CHECK(freeze_group(UnitKind::kLlmBlock) == UnitGroup::kLlm);
  CHECK(freeze_group(UnitKind::kLlmHead) == UnitGroup::kLlm);
}
