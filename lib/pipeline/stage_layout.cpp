#include "pipeline/stage_layout.h"

#include <fmt/format.h>

#include "core/error.h"
#include "models/vlm.h"

namespace omnibal::pipeline {

bool is_block_unit(const std::string& name) {
  return name.rfind("vit_block_", 0) == 0 || name.rfind("llm_block_", 0) == 0;
}

int StageLayout::recomputed_units(int stage) const {
  int n = 0;
  for (int u = begin(stage); u < end(stage); ++u) n += recompute[u] ? 1 : 0;
  return n;
}

std::string StageLayout::describe() const {
  std::string out;
  for (int s = 0; s < stages(); ++s) {
    out += fmt::format("{}stage {}: {}..{} ({} units, {} recomputed)", s ? ", " : "", s,
                       unit_names[begin(s)], unit_names[end(s) - 1], end(s) - begin(s),
                       recomputed_units(s));
  }
  return out;
}

partition::Partition resolve_fixed_partition(const ModelPreset& preset, const ParallelConfig& p) {
  const int units = static_cast<int>(models::unit_names(preset).size());
  OMNIBAL_CHECK(p.pp <= units, "parallel.pp: ", p.pp, " pipeline stages but the '", preset.name,
                "' preset has only ", units, " pipeline units; use parallel.pp <= ", units);
  const PartitionMethod method = p.partition.method;
  if (method == PartitionMethod::kUniform) return partition::uniform_partition(units, p.pp);
  if (method == PartitionMethod::kParameters) {
    std::vector<double> weights;
    for (int64_t n : models::unit_parameter_counts(preset)) weights.push_back(static_cast<double>(n));
    return partition::min_max_partition(weights, p.pp);
  }
  if (method == PartitionMethod::kManual) {
    partition::Partition part{p.partition.manual};
    OMNIBAL_CHECK(part.units() == units, "parallel.partition.manual: the unit counts ",
                  part.to_string(), " sum to ", part.units(), " but the '", preset.name,
                  "' preset has ", units, " pipeline units");
    return part;
  }
  OMNIBAL_FAIL("parallel.partition: '", choice_name(method), "' needs a per-unit cost table; the trainer's ",
               "start-up planner (train/startup_planner.h) resolves it, not resolve_stage_layout");
}

std::vector<bool> resolve_fixed_recompute(const StageLayout& layout, const RecomputeSpec& spec) {
  const int units = static_cast<int>(layout.unit_names.size());
  std::vector<bool> flags(units, false);
  if (spec.mode == RecomputeMode::kNone) return flags;
  if (spec.mode == RecomputeMode::kFull) {
    for (int u = 0; u < units; ++u) flags[u] = is_block_unit(layout.unit_names[u]);
    return flags;
  }
  OMNIBAL_CHECK(spec.mode == RecomputeMode::kPerStage, "memory.recompute: '", choice_name(spec.mode), "' needs a per-unit ",
                "cost table; the trainer's start-up planner (train/startup_planner.h) resolves it, ",
                "not resolve_stage_layout");
  OMNIBAL_CHECK(static_cast<int>(spec.per_stage.size()) == layout.stages(), "memory.recompute: ",
                "expected one count per pipeline stage (", layout.stages(), "), got ",
                spec.per_stage.size());
  for (int s = 0; s < layout.stages(); ++s) {
    int left = spec.per_stage[s], blocks = 0;
    for (int u = layout.begin(s); u < layout.end(s); ++u) {
      if (!is_block_unit(layout.unit_names[u])) continue;
      ++blocks;
      if (left > 0) flags[u] = true, --left;
    }
    OMNIBAL_CHECK(left == 0, "memory.recompute[", s, "]: stage ", s, " has ", blocks,
                  " blocks, cannot recompute ", spec.per_stage[s]);
  }
  return flags;
}

StageLayout resolve_stage_layout(const ModelPreset& preset, const ParallelConfig& parallel,
                                 const MemoryConfig& memory) {
  StageLayout layout;
  layout.unit_names = models::unit_names(preset);
  layout.partition = resolve_fixed_partition(preset, parallel);
  layout.recompute = resolve_fixed_recompute(layout, memory.recompute);
  return layout;
}

}  // namespace omnibal::pipeline
