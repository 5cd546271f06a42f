// The trainer's pack time model (train/pack_time_source.h): the start-up planner's one table
// gives the scaled model by hand-computed numbers; without a table, the preset's analytic model
// (a reference device's seconds, freeze honoured), with the log's words saying which.
#include <catch2/catch.hpp>

#include "core/config.h"
#include "core/model_preset.h"
#include "partition/unit_cost_table.h"
#include "train/pack_time_source.h"

using omnibal::Config;
using omnibal::load_model_preset;
using omnibal::UnitGroup;
using omnibal::UnitKind;
using omnibal::partition::UnitCostTable;
using omnibal::train::trainer_time_model;

TEST_CASE("trainer time model: the start-up table's scaled model, by hand", "[train]") {
  UnitCostTable table;
  table.model = "tiny";
  table.load = {8, 400, 4, 0};  // 8 tiles, 400 tokens
  // ViT units (embed, block, projector) 0.4 s in all; the rest 1.0 s.
  table.units = {{"vit_embed", UnitKind::kVitEmbed, 0.05, 0.05},
                 {"vit_block.0", UnitKind::kVitBlock, 0.1, 0.1},
                 {"projector", UnitKind::kProjector, 0.05, 0.05},
                 {"llm_embed", UnitKind::kLlmEmbed, 0.1, 0.1},
                 {"llm_block.0", UnitKind::kLlmBlock, 0.2, 0.4},
                 {"head", UnitKind::kLlmHead, 0.1, 0.1}};
  const auto t =
      trainer_time_model(Config{}, load_model_preset("tiny"), &table, "start-up profile", 10, 500);
  CHECK(t.model.per_tile_s == Approx(0.4 / 8));
  CHECK(t.model.per_token_s == Approx(1.0 / 400));
  CHECK(t.model.fixed_s == 0.0);
  CHECK(t.model.per_token_sq_s == 0.0);
  CHECK(t.model.source == "scaled:start-up profile");
  CHECK(t.description == "start-up profile, scaled: ViT by tiles, the rest by tokens");
  // A pack of 3 tiles and 120 tokens: 3 * 0.05 + 120 * 0.0025 = 0.45 s.
  CHECK(t.model.seconds(3, 120, 0) == Approx(0.45));
  table.load.tiles = 0;
  CHECK_THROWS_WITH(trainer_time_model(Config{}, load_model_preset("tiny"), &table,
                                       "start-up profile", 10, 500),
                    Catch::Contains("start-up profile: the table's load needs tiles > 0"));
}

TEST_CASE("trainer time model: the preset's analytic model without a table", "[train]") {
  Config cfg;
  const auto preset = load_model_preset("tiny");
  const auto t = trainer_time_model(cfg, preset, nullptr, "", 12, 900);
  CHECK(t.model.source == "analytic:tiny:a100-80g");
  CHECK(t.description ==
        "analytic tiny on a100-80g, relative costs only: no cost table at start-up");
  CHECK(t.model.per_tile_s > 0);
  CHECK(t.model.per_token_s > 0);
  CHECK(t.model.seconds(4, 300, 300.0 * 300) > t.model.seconds(4, 300, 150.0 * 150 * 2));
  // A frozen ViT costs its forward only: a tile is cheaper, a token costs the same.
  cfg.train.freeze = {UnitGroup::kVit};
  const auto frozen = trainer_time_model(cfg, preset, nullptr, "", 12, 900);
  CHECK(frozen.model.per_tile_s < t.model.per_tile_s);
  CHECK(frozen.model.per_token_s == Approx(t.model.per_token_s).epsilon(1e-6));
}
