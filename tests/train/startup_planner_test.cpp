// The trainer's fixed stage rules (memory/stage_rules.h through train::stage_plan_request): the
// split and the recompute flags from the config alone, on the tiny preset; and start-up
// planning's refusal of a context without the trainer's device.
#include <catch2/catch.hpp>

#include "core/error.h"
#include "models/vlm.h"
#include "train/startup_planner.h"

using namespace omnibal;

namespace {

Config config_with(int pp, const std::string& partition, const std::string& recompute) {
  return parse_config("parallel: {pp: " + std::to_string(pp) + ", partition: " + partition +
                          "}\nmemory: {recompute: " + recompute + "}\n",
                      "test");
}

/// The trainer's stage plan from the config's fixed rules (what plan_stages_at_startup decides
/// without a cost table).
memory::StagePlan fixed_plan(const ModelPreset& preset, const Config& c) {
  return memory::fixed_stage_plan(train::stage_plan_request(c, preset, nullptr, false));
}

}  // namespace

TEST_CASE("stage layout: uniform, parameters and manual partitions of the tiny preset",
          "[train][stage_plan]") {
  const ModelPreset preset = load_model_preset("tiny");
  // tiny: vit_embed, vit_block_0..1, projector, llm_embed, llm_block_0..3, llm_head = 10 units.
  const Config uni = config_with(2, "uniform", "none");
  const auto u = fixed_plan(preset, uni);
  REQUIRE(u.unit_names.size() == 10);
  CHECK(u.partition.sizes == std::vector<int>{5, 5});
  CHECK(u.unit_names[u.begin(1)] == "llm_block_0");

  const Config man = config_with(2, "{manual: [3, 7]}", "none");
  const auto m = fixed_plan(preset, man);
  CHECK(m.begin(1) == 3);
  CHECK(m.unit_names[m.begin(1)] == "projector");

  // parameters: the split minimising the heaviest stage's parameter count.
  const Config par = config_with(3, "parameters", "none");
  const auto p = fixed_plan(preset, par);
  const auto counts = models::unit_parameter_counts(preset);
  auto heaviest = [&](const memory::StagePlan& l) {
    int64_t worst = 0;
    for (int s = 0; s < l.stages(); ++s) {
      int64_t sum = 0;
      for (int k = l.begin(s); k < l.end(s); ++k) sum += counts[k];
      worst = std::max(worst, sum);
    }
    return worst;
  };
  const Config uni3 = config_with(3, "uniform", "none");
  CHECK(heaviest(p) <= heaviest(fixed_plan(preset, uni3)));
  CHECK(p.partition.units() == 10);
}

TEST_CASE("stage layout: recompute none, full and per-stage counts", "[train][stage_plan]") {
  const ModelPreset preset = load_model_preset("tiny");
  const Config full = config_with(2, "{manual: [3, 7]}", "full");
  const auto f = fixed_plan(preset, full);
  CHECK(f.recomputed_per_stage()[0] == 2);  // vit_block_0, vit_block_1
  CHECK(f.recomputed_per_stage()[1] == 4);  // llm_block_0..3
  CHECK_FALSE(f.recompute[0]);              // vit_embed is not a block

  const Config counts = config_with(2, "{manual: [3, 7]}", "[1, 3]");
  const auto c = fixed_plan(preset, counts);
  CHECK(c.recompute.per_unit ==
        std::vector<bool>{false, true, false, false, false, true, true, true, false, false});

  const Config none = config_with(2, "uniform", "none");
  CHECK(fixed_plan(preset, none).recomputed_per_stage()[0] == 0);
}

TEST_CASE("stage layout: errors name the key and what is wrong", "[train][stage_plan]") {
  const ModelPreset preset = load_model_preset("tiny");
  auto message = [&](const Config& c) {
    try {
      fixed_plan(preset, c);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(message(config_with(2, "{manual: [3, 3]}", "none")),
             Catch::Contains("sum to 6") && Catch::Contains("10 pipeline units"));
  CHECK_THAT(message(config_with(11, "uniform", "none")), Catch::Contains("parallel.pp: 11"));
  CHECK_THAT(message(config_with(2, "balanced", "none")), Catch::Contains("start-up planner"));
  CHECK_THAT(message(config_with(2, "uniform", "adaptive")), Catch::Contains("memory.recompute"));
  CHECK_THAT(message(config_with(2, "{manual: [3, 7]}", "[3, 0]")),
             Catch::Contains("stage 0 has 2 blocks"));
  CHECK_THAT(message(config_with(2, "uniform", "[1]")),
             Catch::Contains("one count per pipeline stage"));
}

TEST_CASE("start-up planning refuses a context without the trainer's device",
          "[train][stage_plan]") {
  // No device: a GPU run would profile on the CPU. The check comes before anything collective,
  // so it needs no communicator, data or config.
  const train::StartupPlanContext unset;
  CHECK_FALSE(unset.device.has_value());
  CHECK_THROWS_WITH(train::plan_stages_at_startup(unset),
                    Catch::Contains("StartupPlanContext::device is unset") &&
                        Catch::Contains("the device this rank's stage computes on"));
}
