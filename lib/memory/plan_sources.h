// Where a run's stage plan comes from: the torch-free decision of the trainer's start-up planner
// (lib/train/startup_planner.h), as two questions with one answer each.
//   split      config (uniform | parameters | manual: stage_rules.h; wins over a stored plan)
//              | checkpoint (resume: the stored balanced split, when the stage count and units
//              still match) | single stage (balanced with parallel.pp 1) | search (balanced:
//              memory::plan_stages)
//   recompute  config (none | full | per-stage counts) | checkpoint (adaptive, resumed with the
//              stored split and the same m) | planner (adaptive: the knapsack, or the memory-aware
//              search together with the split)
// resolve_stage_plan() answers both, asks for a cost table only when the split is searched or
// the recompute flags are planned, and logs what it reuses or overrides. Not here: obtaining
// the table (profiling, broadcast), timed trials (the caller's judge), the cross-rank check.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/config.h"
#include "memory/stage_plan.h"

namespace omnibal::memory {

/// Where the split comes from (see the file comment).
enum class SplitSource { kConfig, kCheckpoint, kSingleStage, kSearch };
/// Where the recompute flags come from (see the file comment).
enum class RecomputeSource { kConfig, kCheckpoint, kPlanner };

/// What start-up planning decides from.
struct StagePlanRequest {
  std::string model;                      ///< preset name
  std::vector<std::string> unit_names;    ///< the model's units, chain order
  std::vector<double> parameter_weights;  ///< per unit, for `parameters` (e.g. parameter counts)
  int stages = 1;                         ///< parallel.pp
  int micro_batches = 1;                  ///< m
  PipelineSchedule schedule = PipelineSchedule::k1F1B;  ///< parallel.schedule (auto: planned)
  int virtual_stages = 1;                 ///< parallel.virtual_stages (interleaved)
  PartitionSpec partition;                ///< parallel.partition
  RecomputeSpec recompute;                ///< memory.recompute
  const StagePlan* stored = nullptr;      ///< the resumed checkpoint's plan, if any
  std::string stored_origin;              ///< e.g. "checkpoint runs/x/checkpoints/step_4"
  bool log = false;                       ///< write the log lines (rank 0)
};

/// The cost table, planner options and candidate judge of a run.
struct PlanningInputs {
  partition::UnitCostTable table;
  StagePlannerOptions options;
  CandidateJudge judge;  ///< empty: judge_by_pipeline_time
};

/// True when `stored` can serve this request: the same stage count, unit names, schedule and v
/// (a stored plan never holds `auto`: under auto only a search can pick again).
bool stored_plan_fits(const StagePlanRequest& request);

/// Where the split comes from: config unless balanced, then single stage for pp 1 (one chunk),
/// then the checkpoint when its plan fits, else the search. Under parallel.schedule auto every
/// split is planned (kSearch for balanced; the fixed rules inside memory::plan_stages).
SplitSource split_source(const StagePlanRequest& request);

/// Where the recompute flags come from, given the split's source and the split in use: config
/// unless adaptive, then the checkpoint when its plan fits, holds this split and was made for
/// the same m (and the split is not searched again), else the planner.
RecomputeSource recompute_source(const StagePlanRequest& request, SplitSource split,
                                 const partition::Partition& partition);

/// The plan of the config's fixed rules alone (stage_rules.h: fixed_split over the request's
/// parameter weights, fixed_recompute over its units' block mask), no table, nothing stored.
/// Throws omnibal::Error naming the key for balanced or adaptive (they need a cost table and
/// the start-up planner) and for a rule that does not fit the model.
StagePlan fixed_stage_plan(const StagePlanRequest& request);

/// The plan of `request`. Calls `inputs` at most once, only for SplitSource::kSearch or
/// RecomputeSource::kPlanner (it may be collective: every rank decides the same). Throws
/// omnibal::Error naming the key for a fixed rule that does not fit the model
/// (stage_rules.h), whatever `inputs` throws, and plan_stages' errors.
StagePlan resolve_stage_plan(const StagePlanRequest& request,
                             const std::function<PlanningInputs()>& inputs);

}  // namespace omnibal::memory
