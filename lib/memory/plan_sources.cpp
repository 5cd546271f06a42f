#include "memory/plan_sources.h"

#include <fmt/format.h>

#include <algorithm>
#include <tuple>

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
  OMNIBAL_CHECK(v == 1 || r.stages * v <= units, "parallel.virtual_stages: ", r.stages,
                " stages x ", v, " chunks = ", r.stages * v, " model chunks but the model has ",
                units, " pipeline units; use parallel.virtual_stages <= ", units / r.stages);
  return v;
}

/// "12 units vs the model's 10", or the first unit whose name differs.
std::string units_difference(const std::vector<std::string>& plan,
                             const std::vector<std::string>& model) {
  if (plan.size() != model.size())
    return fmt::format("{} units vs the model's {}", plan.size(), model.size());
  const auto at = std::mismatch(plan.begin(), plan.end(), model.begin()).first - plan.begin();
  return fmt::format("unit {} '{}' vs the model's '{}'", at, plan[at], model[at]);
}

/// The mismatch of a plan's schedule and v with parallel.schedule auto ("" when auto plans it).
std::string auto_misfit(const StagePlan& plan, const StagePlanRequest& r) {
  const auto choices = auto_schedule_choices(r.stages, r.micro_batches, r.virtual_stages,
                                             static_cast<int>(r.unit_names.size()), r.auto_zb_v);
  const std::pair<PipelineSchedule, int> mine{plan.schedule, plan.virtual_stages};
  if (std::find(choices.begin(), choices.end(), mine) != choices.end()) return "";
  if (plan.schedule == PipelineSchedule::kZbV)
    return "schedule zb-v vs parallel.schedule auto, which does not compare zb-v here";
  if (plan.schedule != PipelineSchedule::kInterleaved)  // 1F1B / ZB-H1 with v != 1
    return fmt::format("schedule {} v {} vs parallel.schedule auto, which plans it at v 1",
                       choice_name(plan.schedule), plan.virtual_stages);
  if (choices.back().first == PipelineSchedule::kInterleaved)
    return fmt::format(
        "schedule interleaved v {} vs parallel.schedule auto, which plans interleaved at v {} "
        "here (parallel.virtual_stages {})",
        plan.virtual_stages, choices.back().second, r.virtual_stages);
  return fmt::format(
      "schedule interleaved vs parallel.schedule auto, which plans interleaved only where "
      "parallel.pp > 1, parallel.micro_batches ({}) is a multiple of parallel.pp ({}) and pp x v "
      "<= the model's {} units",
      r.micro_batches, r.stages, r.unit_names.size());
}

/// The stored plan `r` reuses and where it came from (file comment): the checkpoint's when it
/// fits, else plan_from's (throws naming each mismatch when it does not fit), else none.
std::pair<const StagePlan*, std::string> reused_plan(const StagePlanRequest& r) {
  if (stored_plan_fits(r)) return {r.stored, r.stored_origin};
  if (!r.plan_from) return {nullptr, ""};
  const auto why = plan_misfits(*r.plan_from, r);
  std::string list;
  for (const auto& w : why) list += (list.empty() ? "" : "; ") + w;
  OMNIBAL_CHECK(why.empty(), r.plan_from_origin, ": that plan does not fit this run: ", list,
                "; give a plan of this model, stage count and schedule, or leave "
                "parallel.plan_from empty to plan at start-up");
  return {r.plan_from, r.plan_from_origin};
}

/// `r` with the plan it reuses as `stored` and, under auto, that plan's schedule and v (auto
/// chose it once; a reused plan is not compared again).
StagePlanRequest settled(const StagePlanRequest& r) {
  StagePlanRequest s = r;
  std::tie(s.stored, s.stored_origin) = reused_plan(r);
  s.plan_from = nullptr;
  if (s.stored && r.schedule == PipelineSchedule::kAuto) {
    s.schedule = s.stored->schedule;
    s.virtual_stages = s.stored->virtual_stages;
  }
  return s;
}

SplitSource settled_split_source(const StagePlanRequest& r) {
  if (r.schedule == PipelineSchedule::kAuto)  // nothing stored: auto plans every layout
    return r.partition.method == PartitionMethod::kBalanced && r.stages > 1 ? SplitSource::kSearch
                                                                            : SplitSource::kConfig;
  if (r.partition.method != PartitionMethod::kBalanced) return SplitSource::kConfig;
  if (r.stages == 1 && request_chunks_per_rank(r) == 1) return SplitSource::kSingleStage;
  return r.stored ? SplitSource::kStored : SplitSource::kSearch;
}

RecomputeSource settled_recompute_source(const StagePlanRequest& r, SplitSource split,
                                         const partition::Partition& partition) {
  if (r.recompute.mode != RecomputeMode::kAdaptive) return RecomputeSource::kConfig;
  const bool reuse = split != SplitSource::kSearch && r.stored &&
                     r.stored->partition == partition && r.stored->micro_batches == r.micro_batches;
  return reuse ? RecomputeSource::kStored : RecomputeSource::kPlanner;
}

}  // namespace

std::vector<std::string> plan_misfits(const StagePlan& plan, const StagePlanRequest& r) {
  std::vector<std::string> out;
  if (plan.model != r.model)
    out.push_back(fmt::format("model '{}' vs model.preset '{}'", plan.model, r.model));
  if (plan.unit_names != r.unit_names)
    out.push_back(units_difference(plan.unit_names, r.unit_names));
  if (plan.stages() != r.stages)
    out.push_back(fmt::format("{} pipeline stages vs parallel.pp {}", plan.stages(), r.stages));
  if (r.schedule == PipelineSchedule::kAuto) {
    const std::string why = auto_misfit(plan, r);
    if (!why.empty()) out.push_back(why);
  } else if (plan.schedule != r.schedule) {
    out.push_back(fmt::format("schedule {} vs parallel.schedule {}", choice_name(plan.schedule),
                              choice_name(r.schedule)));
  } else if (plan.virtual_stages != schedule::chunks_per_rank(r.schedule, r.virtual_stages)) {
    out.push_back(
        fmt::format("v {} vs parallel.virtual_stages {}", plan.virtual_stages, r.virtual_stages));
  }
  return out;
}

bool stored_plan_fits(const StagePlanRequest& r) {
  return r.stored && plan_misfits(*r.stored, r).empty();
}

SplitSource split_source(const StagePlanRequest& r) { return settled_split_source(settled(r)); }

RecomputeSource recompute_source(const StagePlanRequest& r, SplitSource split,
                                 const partition::Partition& partition) {
  return settled_recompute_source(settled(r), split, partition);
}

namespace {

/// The split of a source that needs no table (kSearch: left to plan_stages).
void take_split(const StagePlanRequest& r, SplitSource source, StagePlan& plan) {
  switch (source) {
    case SplitSource::kConfig:
      plan.partition =
          fixed_split(r.partition, r.parameter_weights, r.stages * request_chunks_per_rank(r));
      plan.partition_source = "config: " + choice_name(r.partition.method);
      if (r.log && r.stored && !(r.stored->partition == plan.partition))
        log_info(
            "stage plan: parallel.partition: {} {} from the config wins over the split {} of {}",
            choice_name(r.partition.method), plan.partition.to_string(),
            r.stored->partition.to_string(), r.stored_origin);
      return;
    case SplitSource::kSingleStage:
      plan.partition = partition::Partition{{static_cast<int>(r.unit_names.size())}};
      plan.partition_source = "balanced: one pipeline stage holds every unit";
      return;
    case SplitSource::kStored:
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
    case RecomputeSource::kStored:
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

namespace {

/// The log lines of which stored plan is reused (rank 0): the checkpoint's that does not fit
/// (and why), the one reused, and plan_from left unread on a resume.
void log_reuse(const StagePlanRequest& request, const StagePlanRequest& settled) {
  if (!request.log) return;
  if (request.stored && !stored_plan_fits(request)) {
    std::string list;
    for (const auto& w : plan_misfits(*request.stored, request))
      list += (list.empty() ? "" : "; ") + w;
    log_info("stage plan: the plan of {} does not fit this run ({}); not reused",
             request.stored_origin, list);
  }
  const bool reuses = request.partition.method == PartitionMethod::kBalanced ||
                      request.recompute.mode == RecomputeMode::kAdaptive ||
                      request.schedule == PipelineSchedule::kAuto;
  if (!settled.stored || !reuses) return;  // fixed rules only: nothing to reuse
  log_info("stage plan: reusing the plan of {}: split {}{}", settled.stored_origin,
           settled.stored->partition.to_string(),
           request.schedule == PipelineSchedule::kAuto
               ? fmt::format(", schedule {} (the stored plan's; parallel.schedule auto does not "
                             "compare the schedules again)",
                             choice_name(settled.schedule))
               : std::string());
  if (settled.stored == request.stored && !request.plan_from_origin.empty())
    log_info("stage plan: {} not used: a resumed run keeps its checkpoint's plan",
             request.plan_from_origin);
}

}  // namespace

StagePlan resolve_stage_plan(const StagePlanRequest& request,
                             const std::function<PlanningInputs()>& inputs) {
  OMNIBAL_CHECK(request.parameter_weights.size() == request.unit_names.size(),
                "stage plan: ", request.parameter_weights.size(), " parameter weights for ",
                request.unit_names.size(), " units");
  const StagePlanRequest r = settled(request);
  log_reuse(request, r);
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
  const SplitSource split = settled_split_source(r);
  take_split(r, split, plan);
  const RecomputeSource recompute = settled_recompute_source(r, split, plan.partition);
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
