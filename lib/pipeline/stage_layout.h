// StageLayout: which pipeline units each stage holds and which units recompute their
// activations, resolved from `parallel.partition` and `memory.recompute` for a model preset.
// Partitions come from lib/partition (uniform_partition; min_max_partition over parameter
// counts, which is DeepSpeed's `parameters` method); `balanced` needs a per-unit cost table and
// `adaptive` recomputation the memory planner with it: the trainer's start-up planner
// (lib/train/startup_planner.h) resolves those and uses the functions here for the others.
// Recompute counts apply to the first blocks (ViT / LLM blocks) of each stage, as lib/memory's
// plan_recompute_counts does.
#pragma once

#include <string>
#include <vector>

#include "core/config.h"
#include "core/model_preset.h"
#include "partition/stage_partition.h"

namespace omnibal::pipeline {

/// The resolved layout of the model over the pipeline stages.
struct StageLayout {
  std::vector<std::string> unit_names;  ///< all units in model order
  partition::Partition partition;       ///< units per stage
  std::vector<bool> recompute;          ///< per unit: rerun its forward inside the backward

  int stages() const { return partition.stages(); }
  int begin(int stage) const { return partition.begin(stage); }
  int end(int stage) const { return partition.end(stage); }
  /// Units of `stage` that recompute.
  int recomputed_units(int stage) const;
  /// "stage 0: vit_embed..projector (7 units, 2 recomputed), stage 1: ...".
  std::string describe() const;
};

/// Resolves the layout for `stages` pipeline stages. Throws omnibal::Error naming the key when
/// the partition does not cover the units, a stage would be empty (pp > units), a per-stage
/// recompute list has the wrong length or a count exceeds the stage's blocks, or a method is
/// not available here (balanced, adaptive).
StageLayout resolve_stage_layout(const ModelPreset& preset, const ParallelConfig& parallel,
                                 const MemoryConfig& memory);

/// The split of `parallel.partition` when it is uniform, parameters or manual. Throws
/// omnibal::Error naming the key for pp > units, a manual split that does not cover the units,
/// or balanced (which needs a cost table).
partition::Partition resolve_fixed_partition(const ModelPreset& preset, const ParallelConfig& parallel);

/// Per-unit recompute flags of `spec` (none, full, per-stage counts) for layout's units and
/// split. Throws omnibal::Error naming memory.recompute for a wrong count list or adaptive.
std::vector<bool> resolve_fixed_recompute(const StageLayout& layout, const RecomputeSpec& spec);

/// True for units whose activations recomputation saves (ViT and LLM blocks).
bool is_block_unit(const std::string& unit_name);

}  // namespace omnibal::pipeline
