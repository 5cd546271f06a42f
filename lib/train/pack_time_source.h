// The pack time model the trainer predicts step times with (balance/pack_time_model.h), built
// once at start-up after the stage plan. Torch-free.
//   - With the start-up planner's cost table (it has one when the split is searched or the
//     recompute flags planned: profiled on world rank 0, or parallel.cost_table scaled to the
//     run's pack load): the scaled model of that one table (partition/pack_time_fit.h's
//     scaled_pack_time: ViT units by tiles, the rest by tokens; one load identifies no fixed or
//     attention term).
//   - Otherwise the analytic cost model of the run's preset (train.freeze: [vit] and
//     parallel.tp as the run has them) on a reference device, fitted over loads up to twice the
//     largest epoch-0 pack (exact: the analytic costs are linear in tiles, tokens and squared
//     lengths). Its seconds are a GPU's, not this machine's; the Cost Dist Ratios are ratios of
//     times, so only the relative costs of tiles, tokens and squared lengths matter.
// The trainer logs the epoch plan's Cost Dist Ratios under it at start-up and each step's
// predicted per-rank seconds in metrics.jsonl (balance::EpochPlanner::predicted_step).
#pragma once

#include <cstdint>
#include <string>

#include "balance/pack_time_model.h"
#include "core/config.h"
#include "core/model_preset.h"
#include "partition/unit_cost_table.h"

namespace omnibal::train {

/// Device of the analytic fallback (partition/device_spec.h).
inline constexpr const char* kAnalyticTimeDevice = "a100-80g";

/// A pack time model and where it came from, in words for the log.
struct TrainerTimeModel {
  balance::PackTimeModel model;
  std::string description;  ///< e.g. "start-up profile, scaled: ViT by tiles, the rest by tokens"
};

/// The trainer's pack time model (file comment). `table` (null: none) is the start-up planner's
/// cost table and `table_origin` its name ("start-up profile" or the parallel.cost_table path);
/// `max_tiles` / `max_tokens` are the largest epoch-0 pack's (the analytic fit spans twice them,
/// at least 4 tiles and 32 tokens). Throws omnibal::Error when the table's load has no tiles or
/// no tokens, or the model is not valid (PackTimeModel::validate).
TrainerTimeModel trainer_time_model(const Config& config, const ModelPreset& preset,
                                    const partition::UnitCostTable* table,
                                    const std::string& table_origin, int64_t max_tiles,
                                    int64_t max_tokens);

}  // namespace omnibal::train
