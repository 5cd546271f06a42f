// Where a run's stage plan comes from: the torch-free decision of the trainer's start-up planner
// (lib/train/startup_planner.h), as two questions with one answer each.
//   split      config (uniform | parameters | manual: stage_rules.h; wins over a stored plan)
//              | stored (a plan that fits this run: the resumed checkpoint's, else
//              parallel.plan_from's) | single stage (balanced with parallel.pp 1) | search
//              (balanced: memory::plan_stages)
//   recompute  config (none | full | per-stage counts) | stored (adaptive, with the stored
//              split and the same m) | planner (adaptive: the knapsack, or the memory-aware
//              search together with the split)
// Which stored plan: the resumed checkpoint's first, when it fits; then parallel.plan_from's,
// which must fit (a refusal naming both otherwise); else none and the run plans. A plan fits when
// its model, units and stage count are this run's and its schedule and v are parallel.schedule's
// (under `auto`: a (schedule, v) that auto plans for this run, memory::auto_schedule_choices; the
// stored plan's schedule is then kept, not compared again). plan_misfits() names each mismatch.
// resolve_stage_plan() answers both, asks for a cost table only when the split is searched or
// the recompute flags are planned, and logs what it reuses or overrides. Not here: reading
// plan_from (memory/plan_file.h), obtaining the table (profiling, broadcast), timed trials (the
// caller's judge), the cross-rank check.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/config.h"
#include "memory/stage_plan.h"

namespace omnibal::memory {

/// Where the split comes from (see the file comment).
enum class SplitSource { kConfig, kStored, kSingleStage, kSearch };
/// Where the recompute flags come from (see the file comment).
enum class RecomputeSource { kConfig, kStored, kPlanner };

/// What start-up planning decides from.
struct StagePlanRequest {
  std::string model;                      ///< preset name
  std::vector<std::string> unit_names;    ///< the model's units, chain order
  std::vector<double> parameter_weights;  ///< per unit, for `parameters` (e.g. parameter counts)
  int stages = 1;                         ///< parallel.pp
  int micro_batches = 1;                  ///< m
  PipelineSchedule schedule = PipelineSchedule::k1F1B;  ///< parallel.schedule (auto: planned)
  int virtual_stages = 1;                               ///< parallel.virtual_stages (interleaved)
  /// Whether auto compares ZB-V too (StagePlannerOptions::auto_zb_v of the planner the plan came
  /// from): a stored ZB-V plan is then one auto would pick.
  bool auto_zb_v = false;
  PartitionSpec partition;            ///< parallel.partition
  RecomputeSpec recompute;            ///< memory.recompute
  const StagePlan* stored = nullptr;  ///< the resumed checkpoint's plan, if any
  std::string stored_origin;          ///< e.g. "checkpoint runs/x/checkpoints/step_4"
  /// parallel.plan_from's plan (null: the key is empty, or the plan was not read because the
  /// checkpoint's plan fits).
  const StagePlan* plan_from = nullptr;
  /// e.g. "parallel.plan_from runs/a/stage_plan.json"; set whenever the key is (for the log).
  std::string plan_from_origin;
  bool log = false;  ///< write the log lines (rank 0)
};

/// The cost table, planner options and candidate judge of a run.
struct PlanningInputs {
  partition::UnitCostTable table;
  StagePlannerOptions options;
  CandidateJudge judge;  ///< empty: judge_by_pipeline_time
};

/// Why `plan` cannot serve `request`, one entry per mismatch naming the plan's value and this
/// run's key: "model 'small' vs model.preset 'tiny'", "12 units vs the model's 10", "unit 3
/// 'vit_block_2' vs the model's 'projector'", "2 pipeline stages vs parallel.pp 4", "schedule
/// zb-h1 vs parallel.schedule 1f1b", "v 2 vs parallel.virtual_stages 3", and under auto
/// "schedule interleaved v 3 vs parallel.schedule auto, which plans interleaved at v 2 here".
/// Empty: it fits.
std::vector<std::string> plan_misfits(const StagePlan& plan, const StagePlanRequest& request);

/// True when request.stored (the checkpoint's plan) fits: plan_misfits is empty.
bool stored_plan_fits(const StagePlanRequest& request);

/// Where the split comes from: config unless balanced, then single stage for pp 1 (one chunk),
/// then the stored plan (file comment) when there is one, else the search. Under
/// parallel.schedule auto without a stored plan every split is planned (kSearch for balanced;
/// the fixed rules inside memory::plan_stages). Throws omnibal::Error when
/// request.plan_from does not fit (naming each mismatch) and the checkpoint's plan does not
/// serve instead.
SplitSource split_source(const StagePlanRequest& request);

/// Where the recompute flags come from, given the split's source and the split in use: config
/// unless adaptive, then the stored plan when it holds this split and was made for the same m
/// (and the split is not searched again), else the planner. Throws as split_source.
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
/// (stage_rules.h), for a parallel.plan_from plan that does not fit (naming the file and each
/// mismatch), whatever `inputs` throws, and plan_stages' errors.
StagePlan resolve_stage_plan(const StagePlanRequest& request,
                             const std::function<PlanningInputs()>& inputs);

}  // namespace omnibal::memory
