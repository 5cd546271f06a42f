// The fixed stage rules: the split and the recompute flags a config names outright, without a
// cost-table search (model balance baselines, OmniBal §3.2, docs/paper.md; memory balance modes,
// §3.3). One copy for every user: the trainer's start-up planner, memory::plan_stages,
// `omnibal-plan simulate` and the partition ablation.
//   split      uniform (DeepSpeed `uniform`: equal unit counts) | parameters (DeepSpeed
//              `parameters`: min-max over per-unit parameter weights) | manual (the config's
//              unit counts)
//   recompute  none | full (every ViT and LLM block) | per-stage counts (the first k blocks of
//              stage s, EasyLLM's dynamic checkpoint with a count per stage)
// RecomputeFlags is the one type for per-unit recompute flags: always one flag per unit, so
// "no flags" cannot stand for "no recomputation" in one place and "full" in another.
// Not here: `balanced` and `adaptive`, which need a cost table (memory/stage_plan.h).
#pragma once

#include <string>
#include <vector>

#include "core/config.h"
#include "partition/stage_partition.h"
#include "partition/unit_cost_table.h"

namespace omnibal::memory {

/// Per-unit recompute flags of the pipeline-unit chain: per_unit[u] set = unit u reruns its
/// forward inside its backward instead of keeping its activations.
struct RecomputeFlags {
  std::vector<bool> per_unit;  ///< one flag per unit, chain order

  /// No unit recomputes.
  static RecomputeFlags none(int units) { return {std::vector<bool>(units, false)}; }
  /// Every unit of `blocks` (a per-unit mask, block_units()) recomputes.
  static RecomputeFlags full(const std::vector<bool>& blocks) { return {blocks}; }

  int units() const { return static_cast<int>(per_unit.size()); }
  bool operator[](int unit) const { return per_unit.at(unit); }
  /// Flags set in units [begin, end).
  int count(int begin, int end) const;
  bool operator==(const RecomputeFlags& o) const { return per_unit == o.per_unit; }
  bool operator!=(const RecomputeFlags& o) const { return !(*this == o); }
};

/// Per-unit block mask of a chain given by unit names in either spelling (core/units.h): set
/// for the units whose activations recomputation saves (is_recomputable: ViT and LLM blocks);
/// a name that is no unit's counts as no block.
std::vector<bool> block_units(const std::vector<std::string>& unit_names);

/// Per-unit block mask of a cost table (UnitCost::recomputable(), frozen blocks included, as
/// by names: the memory model and the simulator ignore the flag of a frozen block).
std::vector<bool> block_units(const partition::UnitCostTable& table);

/// The split of `spec` (uniform | parameters | manual) of the chain whose per-unit parameter
/// weights are `parameter_weights` (parameter counts or bytes of one dtype: min-max gives the
/// same split for both; the size is the number of units) into `stages` stages.
/// Throws omnibal::Error naming the key for stages < 1 or stages > units (parallel.pp), a
/// manual split that does not cover the units (parallel.partition.manual), or `balanced`,
/// which needs a cost table and the search (the trainer's start-up planner runs it).
partition::Partition fixed_split(const PartitionSpec& spec,
                                 const std::vector<double>& parameter_weights, int stages);

/// The recompute flags of `spec` (none | full | per-stage counts) for `split` of a chain with
/// block mask `blocks` (one entry per unit of split). Throws omnibal::Error naming
/// memory.recompute for a count list of the wrong length, a negative count or one above its
/// stage's blocks, or `adaptive`, which needs a cost table (memory::plan_stages).
RecomputeFlags fixed_recompute(const RecomputeSpec& spec, const partition::Partition& split,
                               const std::vector<bool>& blocks);

}  // namespace omnibal::memory
