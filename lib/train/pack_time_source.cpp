#include "train/pack_time_source.h"

#include <algorithm>

#include <fmt/format.h>

#include "partition/analytic_cost_model.h"
#include "partition/device_spec.h"
#include "partition/pack_time_fit.h"

namespace omnibal::train {

TrainerTimeModel trainer_time_model(const Config& config, const ModelPreset& preset,
                                    const partition::UnitCostTable* table,
                                    const std::string& table_origin, int64_t max_tiles,
                                    int64_t max_tokens) {
  TrainerTimeModel out;
  if (table) {
    out.model = partition::scaled_pack_time(*table, table_origin);
    out.description = table_origin + ", scaled: ViT by tiles, the rest by tokens";
  } else {
    const auto& freeze = config.train.freeze;
    const bool freeze_vit =
        std::find(freeze.begin(), freeze.end(), UnitGroup::kVit) != freeze.end();
    const partition::AnalyticCostModel analytic(preset, partition::device_spec(kAnalyticTimeDevice),
                                                config.parallel.tp, freeze_vit);
    const std::string origin = "analytic:" + preset.name + ":" + kAnalyticTimeDevice;
    out.model =
        partition::fit_pack_time(analytic,
                                 partition::pack_time_design(std::max<int64_t>(4, 2 * max_tiles),
                                                             std::max<int64_t>(32, 2 * max_tokens)),
                                 {}, origin)
            .model;
    out.description =
        fmt::format("analytic {} on {}, relative costs only: no cost table at start-up",
                    preset.name, kAnalyticTimeDevice);
  }
  out.model.validate("the trainer's pack time model (" + out.description + ")");
  return out;
}

}  // namespace omnibal::train
