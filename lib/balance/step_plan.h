// StepPlan: which pack each DP rank runs as each micro-batch of each step, and the placements
// that build one.
//
// A step is dp * m packs (docs/conventions.md): rank r runs m packs (micro-batches) in it. The plan
// is fixed independently of how it is executed. Packs that do not fill a last step are the
// epoch tail: they are listed in `carried` (the trainer runs them at the start of the next
// epoch) and reported, never dropped and never left to one rank.
//
// place_load_grouped is omnibal's placement (docs/paper.md, Placement): packs are sorted by device
// cost (tiles, then tokens) so each step holds packs of nearly the same load, which removes most
// of the Dist Ratio the reference's random placement leaves (LLM 0.076 on the shared files);
// the order of steps is then shuffled with omnibal::Rng so training sees no length curriculum.
// place_in_order keeps the packer's order (baselines that are already random or grouped).
#pragma once

#include <cstdint>
#include <vector>

#include "balance/pack_list.h"
#include "balance/sample_table.h"

namespace omnibal::balance {

/// Pack ids per (step, DP rank, micro-batch), plus the carried epoch tail.
struct StepPlan {
  int dp = 1;                     ///< data-parallel ranks
  int micro_batches = 1;          ///< m: packs per rank per step
  std::vector<uint32_t> slots;    ///< [steps][dp][m] pack ids, row-major
  std::vector<uint32_t> carried;  ///< packs of the epoch tail, carried into the next epoch

  size_t packs_per_step() const { return static_cast<size_t>(dp) * micro_batches; }
  size_t steps() const { return slots.size() / packs_per_step(); }
  /// Pack run by `rank` as micro-batch `micro` of `step`.
  uint32_t pack(size_t step, int rank, int micro) const {
    return slots[(step * dp + static_cast<size_t>(rank)) * micro_batches + micro];
  }
};

/// Packs 0..packs-1 in the given order, dp * m per step, rank-major within a step; the tail
/// (packs % (dp * m)) is carried. Throws omnibal::Error unless dp, m >= 1.
StepPlan place_in_order(size_t packs, int dp, int m);

/// Load-grouped placement: sorts packs by (tile cost, token cost), carries the lowest-load tail,
/// cuts the rest into steps of consecutive packs, deals each step's packs to ranks in snake
/// order (so with m > 1 the per-rank sums match), permutes the ranks of each step, and shuffles
/// the step order. Deterministic for `seed`.
StepPlan place_load_grouped(const PackList& packs, int dp, int m, uint64_t seed);

/// Multi-source placement (the reference's GroupRandomBatchSampler idea): every step holds
/// packs of one source only (`pack_source[p]`), load-grouped within the source; each source's
/// tail is carried; the steps of all sources are shuffled together.
StepPlan place_by_source(const PackList& packs, const std::vector<uint32_t>& pack_source, int dp,
                         int m, uint64_t seed);

}  // namespace omnibal::balance
