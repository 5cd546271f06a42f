#include "memory/plan_sources.h"

#include "core/error.h"
#include "core/log.h"
#include "schedule/schedules.h"

namespace omnibal::memory {

namespace {

/// Chunks per rank the request runs (auto: unknown until planned). Throws omnibal::Error naming
/// parallel.virtual_stages when the model has fewer units than pp x v chunks.
int request_chunks_per_rank(const StagePlanRequest& r) {
  const int v = schedule::chunks_per_rank(r.schedule, r.virtual_stages);
  const int units = static_cast<int>(r.unit_names.size());
  OMNIBAL_CHECK(v == 1 || r.stages * v <= units, "parallel.virtual_stages: ", r.stages, " stages x ",
                v, " chunks = ", r.stages * v, " model chunks but the model has ", units,
                " pipeline units; use parallel.virtual_stages <= ", units / r.stages);
  return v;
}

}  // namespace

bool stored_plan_fits(const StagePlanRequest& r) {
  return r.stored && r.schedule != PipelineSchedule::kAuto && r.stored->stages() == r.stages &&
         r.stored->schedule == r.schedule &&
         r.stored->virtual_stages == request_chunks_per_rank(r) &&
         r.stored->unit_names == r.unit_names;
}

SplitSource split_source(const StagePlanRequest& r) {
  if (r.schedule == PipelineSchedule::kAuto)
    return r.partition.method == PartitionMethod::kBalanced && r.stages > 1 ? SplitSource::kSearch
                                                                            : SplitSource::kConfig;
  if (r.partition.method != PartitionMethod::kBalanced) return SplitSource::kConfig;
  if (r.stages == 1 && request_chunks_per_rank(r) == 1) return SplitSource::kSingleStage;
  return stored_plan_fits(r) ? SplitSource::kCheckpoint : SplitSource::kSearch;
}

RecomputeSource recompute_source(const StagePlanRequest& r, SplitSource split,
                                 const partition::Partition& partition) {
  if (r.recompute.mode != RecomputeMode::kAdaptive) return RecomputeSource::kConfig;
  const bool reuse = split != SplitSource::kSearch && stored_plan_fits(r) &&
                     r.stored->partition == partition && r.stored->micro_batches == r.micro_batches;
  return reuse ? RecomputeSource::kCheckpoint : RecomputeSource::kPlanner;
}

namespace {

/// The split of a source that needs no table (kSearch: left to plan_stages).
void take_split(const StagePlanRequest& r, SplitSource source, StagePlan& plan) {
  switch (source) {
    case SplitSource::kConfig:
      plan.partition =
          fixed_split(r.partition, r.parameter_weights, r.stages * request_chunks_per_rank(r));
      plan.partition_source = "config: " + choice_name(r.partition.method);
      if (r.log && stored_plan_fits(r) && !(r.stored->partition == plan.partition))
        log_info(
            "stage plan: parallel.partition: {} {} from the config wins over the checkpoint's "
            "split {}",
            choice_name(r.partition.method), plan.partition.to_string(),
            r.stored->partition.to_string());
      return;
    case SplitSource::kSingleStage:
      plan.partition = partition::Partition{{static_cast<int>(r.unit_names.size())}};
      plan.partition_source = "balanced: one pipeline stage holds every unit";
      return;
    case SplitSource::kCheckpoint:
      plan.partition = r.stored->partition;
      plan.candidates = r.stored->candidates;
      plan.chosen = r.stored->chosen;
      plan.partition_source = r.stored_origin + " (" + r.stored->partition_source + ")";
      return;
    case SplitSource::kSearch: return;
  }
}

/// Recompute flags of a source that needs no table.
void take_recompute(const StagePlanRequest& r, RecomputeSource source, StagePlan& plan) {
  switch (source) {
    case RecomputeSource::kCheckpoint:
      plan.recompute = r.stored->recompute;
      plan.budget_bytes = r.stored->budget_bytes;
      plan.predicted_bytes = r.stored->predicted_bytes;
      plan.none_bytes = r.stored->none_bytes;
      plan.full_bytes = r.stored->full_bytes;
      plan.recompute_source = r.stored_origin + " (" + r.stored->recompute_source + ")";
      return;
    case RecomputeSource::kConfig:
      plan.recompute = fixed_recompute(r.recompute, plan.partition, block_units(r.unit_names));
      plan.recompute_source = "config: " + choice_name(r.recompute.mode);
      return;
    case RecomputeSource::kPlanner:
      OMNIBAL_FAIL("stage plan: the recompute planner needs a cost table");
  }
}

}  // namespace

StagePlan fixed_stage_plan(const StagePlanRequest& r) {
  OMNIBAL_CHECK(r.parameter_weights.size() == r.unit_names.size(),
                "stage plan: ", r.parameter_weights.size(), " parameter weights for ",
                r.unit_names.size(), " units");
  StagePlan plan;
  plan.model = r.model;
  plan.micro_batches = r.micro_batches;
  plan.unit_names = r.unit_names;
  OMNIBAL_CHECK(r.schedule != PipelineSchedule::kAuto, "parallel.schedule: 'auto' needs a cost ",
                "table (memory::plan_stages), which the trainer's start-up planner supplies");
  plan.schedule = r.schedule;
  plan.virtual_stages = request_chunks_per_rank(r);
  plan.partition =
      fixed_split(r.partition, r.parameter_weights, r.stages * request_chunks_per_rank(r));
  plan.partition_source = "config: " + choice_name(r.partition.method);
  take_recompute(r, RecomputeSource::kConfig, plan);
  return plan;
}

StagePlan resolve_stage_plan(const StagePlanRequest& r,
                             const std::function<PlanningInputs()>& inputs) {
  OMNIBAL_CHECK(r.parameter_weights.size() == r.unit_names.size(),
                "stage plan: ", r.parameter_weights.size(), " parameter weights for ",
                r.unit_names.size(), " units");
  if (r.stored && !stored_plan_fits(r) && r.log)
    log_info(
        "stage plan: the checkpoint's plan ({} stages) does not fit parallel.pp {}; planning "
        "again",
        r.stored->stages(), r.stages);
  StagePlan plan;
  plan.model = r.model;
  plan.micro_batches = r.micro_batches;
  plan.unit_names = r.unit_names;
  if (r.schedule == PipelineSchedule::kAuto) {  // every layout is planned: compare schedules
    const PlanningInputs in = inputs();
    return plan_stages(in.table, r.partition, r.recompute, in.options, in.judge);
  }
  plan.schedule = r.schedule;
  plan.virtual_stages = request_chunks_per_rank(r);
  const SplitSource split = split_source(r);
  take_split(r, split, plan);
  const RecomputeSource recompute = recompute_source(r, split, plan.partition);
  if (split != SplitSource::kSearch && recompute != RecomputeSource::kPlanner) {
    take_recompute(r, recompute, plan);
    return plan;
  }
  const PlanningInputs in = inputs();
  if (split == SplitSource::kSearch)
    return plan_stages(in.table, r.partition, r.recompute, in.options, in.judge);
  plan_recompute_for(in.table, r.recompute, in.options, plan);
  return plan;
}

}  // namespace omnibal::memory
