#include "train/step_programs.h"

#include "core/choices.h"
#include "core/log.h"
#include "partition/device_spec.h"
#include "schedule/schedules.h"
#include "train/training_data.h"

namespace omnibal::train {

StepPrograms::StepPrograms(const Config& config, const memory::StagePlan& plan,
                           const partition::UnitCostTable* table, TrainingData& data, int dp_rank,
                           bool log)
    : data_(data),
      dp_rank_(dp_rank),
      micro_batches_(config.parallel.micro_batches),
      fixed_(schedule::build_schedule(plan.schedule, plan.stages(), micro_batches_,
                                      plan.virtual_stages)) {
  const bool zb_v = plan.schedule == PipelineSchedule::kZbV;
  if (zb_v && table) {
    model_ = std::make_unique<partition::ScaledTableCostModel>(*table);
    setup_.model = model_.get();
    setup_.partition = plan.partition;
    setup_.schedule = plan.schedule;
    setup_.virtual_stages = plan.virtual_stages;
    setup_.recompute = plan.recompute.per_unit;
    setup_.dp = config.parallel.dp;
    setup_.tp = config.parallel.tp;
    // The start-up search's pipeline link (StagePlannerOptions::link_bandwidth).
    setup_.device = partition::host_device(memory::StagePlannerOptions{}.link_bandwidth);
    setup_.shard = config.train.shard;
    setup_.static_bytes.assign(plan.stages(), 0.0);
  }
  if (!log || !zb_v) return;
  if (per_step())
    log_info(
        "schedule zb-v: lists built each step for its packs' costs (the start-up cost table "
        "scaled to each pack, W's placed on their simulated timeline, as omnibal-plan simulate)");
  else
    log_info(
        "schedule zb-v: equal-cost lists (no cost table at start-up: neither the split nor the "
        "recompute flags were planned in this launch; a balanced or adaptive plan has one)");
}

const schedule::StageSchedules& StepPrograms::at(int64_t step) {
  if (!per_step()) return fixed_;
  if (step != current_step_) {
    current_ = partition::rank_step_schedules(setup_,
                                              planned_loads(data_, step, dp_rank_, micro_batches_));
    current_step_ = step;
  }
  return current_;
}

std::vector<partition::MicroBatchLoad> planned_loads(TrainingData& data, int64_t step, int dp_rank,
                                                     int micro_batches) {
  std::vector<partition::MicroBatchLoad> out;
  const auto& lengths = data.set().lengths;
  for (int k = 0; k < micro_batches; ++k) {
    std::vector<int32_t> tiles, tokens;
    for (const int64_t id : data.pack(step, dp_rank, k)) {
      tiles.push_back(static_cast<int32_t>(lengths.at(static_cast<size_t>(id)).vit_num));
      tokens.push_back(static_cast<int32_t>(lengths.at(static_cast<size_t>(id)).token_num));
    }
    out.push_back(partition::MicroBatchLoad::packed(std::move(tiles), std::move(tokens)));
  }
  return out;
}

}  // namespace omnibal::train
