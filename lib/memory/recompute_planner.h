// Activation recomputation plans per pipeline stage (memory balance, OmniBal §3.3, docs/paper.md):
// which units re-run their forward during backward instead of keeping their activations.
// Modes: none, full (every ViT and LLM block), per-stage counts (the first k blocks of stage s,
// as EasyLLM's dynamic checkpoint but with a count per stage), and adaptive: for each stage,
// the set of blocks to recompute with the least recompute time such that the stage fits the
// budget under memory_model.h. Adaptive is a 0/1 knapsack (keep a block = spend its
// in-flight activation bytes to save its recompute cost, UnitCost::recompute_cost(): the profiled
// checkpointed forward + backward minus the plain ones, or one forward), solved exactly by dynamic programming
// over memory in `granularity_bytes` steps (item sizes rounded up, capacity down, so the plan
// always fits), once per possible largest recomputed block (that block's activations are
// re-materialised during its backward: the transient term). Only ViT and LLM blocks are
// candidates; embeddings, projector and head always keep their activations.
// Schedules (memory_model.h): the split has P x v chunks and each knapsack is one pipeline rank,
// its chunks together against one budget, with the schedule's in-flight counts: exact for one
// chunk per rank (1F1B, ZB-H1: every candidate peak moment of in_flight_states bounds the kept
// bytes, the deferred W bytes are fixed); exact for ZB-V's two chunks (multi_state_knapsack.h:
// every moment of in_flight_states bounds the sum of what is alive then, a kept block's
// activations per graph and its deferred W bytes per pending W, a recomputed block's W in B);
// each chunk's own peak for interleaved (an upper bound, so the plan still fits). memory, fits
// are per rank; recomputed_units per chunk.
#pragma once

#include <vector>

#include "memory/memory_model.h"

namespace omnibal::memory {

/// A recompute plan and what it costs.
struct RecomputePlan {
  std::vector<bool> recompute;        ///< per unit of the chain
  std::vector<int> recomputed_units;  ///< per chunk (virtual stage): how many units recompute
  std::vector<StageMemory> memory;    ///< per pipeline rank, predicted at the table's load
  std::vector<bool> fits;             ///< per pipeline rank: memory.total() <= budget
  double recompute_s =
      0;  ///< seconds recomputation adds per micro-batch (all stages; recompute_cost)
  bool all_fit() const;
};

/// Options of the planner.
struct RecomputeOptions {
  MemoryOptions memory;
  int micro_batches = 1;                                ///< m
  PipelineSchedule schedule = PipelineSchedule::k1F1B;  ///< not kAuto
  int virtual_stages = 1;              ///< v under kInterleaved (the split then has P x v chunks)
  double budget_bytes = 0;             ///< per device; must be > 0
  double granularity_bytes = 1 << 20;  ///< knapsack resolution (1 MiB)
};

/// No recomputation.
RecomputePlan plan_no_recompute(const partition::UnitCostTable& table,
                                const partition::Partition& partition, const RecomputeOptions& o);
/// The plan of given per-unit `flags` (memory, fits, counts, time). Throws omnibal::Error when
/// the flags do not cover the table's units.
RecomputePlan plan_with_flags(const partition::UnitCostTable& table,
                              const partition::Partition& partition, std::vector<bool> flags,
                              const RecomputeOptions& o);
/// Every ViT and LLM block recomputed (the `full` rule of stage_rules.h; the flag of a frozen
/// block is set but changes nothing here).
RecomputePlan plan_full_recompute(const partition::UnitCostTable& table,
                                  const partition::Partition& partition, const RecomputeOptions& o);
/// The first counts[s] blocks of stage s recomputed (memory.recompute: [per-stage counts], the
/// rule of stage_rules.h, frozen blocks counted). Throws omnibal::Error when counts has the
/// wrong length or a count exceeds the stage's blocks.
RecomputePlan plan_recompute_counts(const partition::UnitCostTable& table,
                                    const partition::Partition& partition,
                                    const std::vector<int>& counts, const RecomputeOptions& o);
/// Least recompute time per stage within the budget; a stage that does not fit even with full
/// recomputation gets full recomputation and fits[s] == false.
RecomputePlan plan_adaptive_recompute(const partition::UnitCostTable& table,
                                      const partition::Partition& partition,
                                      const RecomputeOptions& o);

}  // namespace omnibal::memory
