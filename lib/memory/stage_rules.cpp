#include "memory/stage_rules.h"

#include "core/error.h"
#include "core/units.h"

namespace omnibal::memory {

int RecomputeFlags::count(int begin, int end) const {
  int n = 0;
  for (int u = begin; u < end; ++u) n += per_unit.at(u) ? 1 : 0;
  return n;
}

std::vector<bool> block_units(const std::vector<std::string>& unit_names) {
  std::vector<bool> out;
  for (const auto& n : unit_names) {
    const auto id = find_unit_id(n);
    out.push_back(id && is_recomputable(id->kind));
  }
  return out;
}

std::vector<bool> block_units(const partition::UnitCostTable& table) {
  std::vector<bool> out;
  for (const auto& u : table.units) out.push_back(u.recomputable());
  return out;
}

partition::Partition fixed_split(const PartitionSpec& spec,
                                 const std::vector<double>& parameter_weights, int stages) {
  const int units = static_cast<int>(parameter_weights.size());
  OMNIBAL_CHECK(stages >= 1 && stages <= units, "parallel.pp: ", stages,
                " pipeline stages but the model has ", units,
                " pipeline units; use parallel.pp <= ", units);
  switch (spec.method) {
    case PartitionMethod::kUniform: return partition::uniform_partition(units, stages);
    case PartitionMethod::kParameters:
      return partition::min_max_partition(parameter_weights, stages);
    case PartitionMethod::kManual: {
      partition::Partition part{spec.manual};
      OMNIBAL_CHECK(part.units() == units, "parallel.partition.manual: the unit counts ",
                    part.to_string(), " sum to ", part.units(), " but the model has ", units,
                    " pipeline units");
      OMNIBAL_CHECK(part.stages() == stages, "parallel.partition.manual: ", part.to_string(),
                    " has ", part.stages(), " stages but parallel.pp is ", stages);
      for (int s = 0; s < part.stages(); ++s)
        OMNIBAL_CHECK(part.sizes[s] >= 1, "parallel.partition.manual[", s, "]: a stage needs at ",
                      "least one unit, got ", part.sizes[s]);
      return part;
    }
    case PartitionMethod::kBalanced: break;
  }
  OMNIBAL_FAIL("parallel.partition: '", choice_name(spec.method), "' has no fixed rule: it needs ",
               "a per-unit cost table and the search (memory::plan_stages), which the trainer's ",
               "start-up planner (train/startup_planner.h) runs");
}

RecomputeFlags fixed_recompute(const RecomputeSpec& spec, const partition::Partition& split,
                               const std::vector<bool>& blocks) {
  const int units = static_cast<int>(blocks.size());
  OMNIBAL_CHECK(split.units() == units, "recompute rule: split ", split.to_string(), " covers ",
                split.units(), " units, the chain has ", units);
  switch (spec.mode) {
    case RecomputeMode::kNone: return RecomputeFlags::none(units);
    case RecomputeMode::kFull: return RecomputeFlags::full(blocks);
    case RecomputeMode::kPerStage: break;
    case RecomputeMode::kAdaptive:
      OMNIBAL_FAIL("memory.recompute: 'adaptive' has no fixed rule: it needs a per-unit cost ",
                   "table (memory::plan_stages), which the trainer's start-up planner ",
                   "(train/startup_planner.h) supplies");
  }
  OMNIBAL_CHECK(static_cast<int>(spec.per_stage.size()) == split.stages(),
                "memory.recompute: ", "expected one count per pipeline stage (", split.stages(),
                "), got ", spec.per_stage.size(), " per-stage counts");
  RecomputeFlags flags = RecomputeFlags::none(units);
  for (int s = 0; s < split.stages(); ++s) {
    const int want = spec.per_stage[s];
    OMNIBAL_CHECK(want >= 0, "memory.recompute[", s, "]: expected a count >= 0, got ", want);
    int left = want, have = 0;
    for (int u = split.begin(s); u < split.end(s); ++u) {
      if (!blocks[u]) continue;
      ++have;
      if (left > 0) flags.per_unit[u] = true, --left;
    }
    OMNIBAL_CHECK(left == 0, "memory.recompute[", s, "]: cannot recompute ", want, " units: stage ",
                  s, " has only ", have, " (stage ", s, " has ", have, " blocks among its ",
                  split.end(s) - split.begin(s), " units; counts apply to ViT/LLM blocks)");
  }
  return flags;
}

}  // namespace omnibal::memory
