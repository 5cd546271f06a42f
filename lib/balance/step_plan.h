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
//
// Placement by time (balance.place_by: time, a pack time model, pack_time_model.h) keeps the
// packs and changes which step, rank and micro-batch each one gets. Count Dist Ratios must not
// get worse, and on the shared files sorting by time alone does make them worse (it mixes token
// counts that the sort by tokens kept apart: LLM Dist 0.0045 instead of 0.00012 at DP 8), so it
// chooses among candidates, all with tiles as the first sort key (every step holds the same
// tile counts as by count):
//   0  placement by count itself;
//   A  steps cut in (tiles, tokens) order with ties broken by predicted time (the same count
//      Dist Ratios as 0);
//   B  m = 1: A with packs exchanged between neighbouring steps while that lowers the time Dist
//      of the two steps and the summed tile and token Dist Ratios stay at or below A's;
//      m > 1: A with each step's rows balanced: packs swapped between ranks within a row (the
//      dp packs that are micro-batch k of the ranks) while that lowers the spread of the rank
//      sums of tiles, tokens and predicted seconds;
//   C  steps cut in (tiles, predicted time) order, rows balanced as in B when m > 1.
// It keeps the candidate with the smallest larger Cost Dist Ratio (across ranks, across a rank's
// micro-batches; balance_metrics.h) among those whose ViT and LLM Dist Ratios are no worse than
// those of 0, so it is never worse than placement by count on the count Dist Ratios nor on the
// larger Cost Dist Ratio (the smaller one may rise). Every
// candidate deals a step's rows so that micro-batch k of every rank comes from the same row
// (DP ranks run matched sequences of micro-batches, not only equal sums), and the step order is
// shuffled as by count (no length curriculum).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "balance/pack_list.h"
#include "balance/pack_time_model.h"
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

/// Load-grouped placement: sorts packs by (tile cost, token cost), carries the lowest-load tail, cuts the rest into steps of
/// consecutive packs, deals each step's packs to ranks in snake order (so with m > 1 the
/// per-rank sums match), permutes the ranks of each step, and shuffles the step order.
/// Deterministic for `seed`. With `time`, placement by time (file comment); `note` (not null)
/// receives one line saying which candidate was kept and why the others were not. Throws
/// omnibal::Error unless dp, m >= 1, or when `time` is invalid (PackTimeModel::validate).
StepPlan place_load_grouped(const PackList& packs, int dp, int m, uint64_t seed,
                            const PackTimeModel* time = nullptr, std::string* note = nullptr);

/// Multi-source placement (the reference's GroupRandomBatchSampler idea): every step holds
/// packs of one source only (`pack_source[p]`), load-grouped within the source (by time when
/// `time` is given, `note` as above); each source's tail is carried; the steps of all sources
/// are shuffled together. Throws omnibal::Error when pack_source does not have one entry per
/// pack.
StepPlan place_by_source(const PackList& packs, const std::vector<uint32_t>& pack_source, int dp,
                         int m, uint64_t seed, const PackTimeModel* time = nullptr,
                         std::string* note = nullptr);

}  // namespace omnibal::balance
