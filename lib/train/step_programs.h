// StepPrograms: the instruction lists the trainer's pipeline runs at each step. Under
// parallel.schedule zb-v with a start-up cost table (StartupPlan::table: the split was searched
// or the recompute flags planned), each step's lists are built for that step's own costs, as the
// simulator builds them for a DP rank (partition::rank_step_schedules, issue 41): the DP rank's m
// packs of the step, their samples' tiles and tokens read from the data plan
// (TrainingData::pack; every rank plans the same epochs, so a middle stage that loads no pack
// knows them too), each costed by the table scaled to the pack (partition::ScaledTableCostModel,
// as the start-up search and `omnibal-plan simulate --cost-table-in`) under the plan's split and
// recompute flags; build_zb_v_schedule then places the W's in the bubbles of that timeline.
// Every rank of the pipeline computes the same lists from the same table text and plan, with no
// measured time, in the same floating point, so sends meet receives. The other schedules, and
// ZB-V without a table (a fixed split with config flags, a plan_from plan, a resume from a
// checkpoint that stored none; a resume otherwise has its checkpoint's table), run the
// equal-cost lists of schedule::build_schedule, built once. Rank 0 logs once which lists run.
// Left out of the per-step costs: the CPU host cost per micro-batch the start-up search adds
// (measured at start-up, not kept in the plan) and a measured TP link (the host link's 10 GB/s,
// the search's pipeline link, stands in): they shift every micro-batch alike, so the W placement
// follows the packs' differences, which the table covers.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/config.h"
#include "memory/stage_plan.h"
#include "partition/cost_model.h"
#include "partition/micro_batch_load.h"
#include "partition/training_simulator.h"
#include "partition/unit_cost_table.h"
#include "schedule/instruction.h"

namespace omnibal::train {

class TrainingData;

/// The instruction lists of each step (see the file comment). `plan` and `data` outlive it.
class StepPrograms {
 public:
  /// `table` (null: none) is the start-up planner's cost table; `dp_rank` this rank's DP index;
  /// `log`: rank 0 logs which lists run. Throws omnibal::Error when the plan's lists cannot be
  /// built (schedule::build_schedule).
  StepPrograms(const Config& config, const memory::StagePlan& plan,
               const partition::UnitCostTable* table, TrainingData& data, int dp_rank, bool log);

  /// Every stage's list at 0-based global step `step` (per-step lists are built on the first
  /// call for a step and kept until another step is asked for). Throws omnibal::Error when the
  /// step's packs cannot be costed (a table of other units than the plan's).
  const schedule::StageSchedules& at(int64_t step);
  /// Whether the lists follow each step's costs (ZB-V with a cost table).
  bool per_step() const { return model_ != nullptr; }

 private:
  TrainingData& data_;
  int dp_rank_ = 0, micro_batches_ = 1;
  schedule::StageSchedules fixed_;                          ///< the equal-cost lists
  std::unique_ptr<partition::ScaledTableCostModel> model_;  ///< null: fixed lists only
  partition::SimulatorSetup setup_;                         ///< per-step lists: the plan's
  schedule::StageSchedules current_;
  int64_t current_step_ = -1;
};

/// DP rank `dp_rank`'s m packs of global step `step` as loads (packed: one sequence per pack),
/// from the data plan: the samples' ViT tiles and LLM tokens (TrainingData::set().lengths).
std::vector<partition::MicroBatchLoad> planned_loads(TrainingData& data, int64_t step, int dp_rank,
                                                     int micro_batches);

}  // namespace omnibal::train
