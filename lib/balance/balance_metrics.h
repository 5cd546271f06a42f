// BalanceMetrics: how well a plan balances data (docs/paper.md#pad-ratio-and-dist-ratio).
//  - Pad Ratio (intra-device): padded tokens over padded capacity, summed over all packs (a
//    global ratio, like the reference code): sum_p (max_p * n_p - tokens_p) / sum_p max_p * n_p.
//    It is 0 for concatenated packs.
//  - Dist Ratio (inter-device), per load dimension: at each step, rank j's load T_j is the sum
//    of its m packs' device cost (tiles; tokens, padded for padded packs) and
//    Dist = sum_j (T_max - T_j) / (T_max * dp), T_max floored at 1; averaged over full steps.
//    With m = 1 this is exactly the reference's per-step, per-device definition.
//  - tile fill / token fill: mean pack load (real tiles, real tokens) over the pack budget; a
//    method without a budget in a dimension uses its largest pack cost as the budget (what a
//    device must be provisioned for).
//  - Cost Dist Ratio (only with a pack time model, pack_time_model.h): the Dist Ratio of
//    predicted seconds instead of counts, at two levels. Across DP ranks: at each full step,
//    rank j's time is the sum of its m packs' predicted seconds, Dist over the dp ranks,
//    averaged over steps (what DP ranks wait for at the gradient reduction). Across
//    micro-batches: Dist over the m pack times of one rank, averaged over ranks and steps (what
//    makes pipeline stages wait for each other inside a step); 0 when m = 1.
// Carried packs count in packs, samples and Pad Ratio but not in Dist Ratio (they fill no step).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "balance/pack_list.h"
#include "balance/pack_time_model.h"
#include "balance/step_plan.h"

namespace omnibal::balance {

/// Metrics of one plan (Pad and Dist Ratios plus fill, counts and extremes).
struct BalanceMetrics {
  double pad_ratio = 0;
  double dist_ratio_vit = 0;
  double dist_ratio_llm = 0;
  double tile_fill = 0;         ///< mean pack tiles / tile budget
  double token_fill = 0;        ///< mean pack tokens / token budget
  int64_t packs = 0;            ///< all packs, carried ones included
  int64_t samples = 0;          ///< samples in packs
  double samples_per_pack = 0;  ///< samples / packs
  int64_t max_tiles = 0;        ///< largest pack tile cost
  int64_t max_tokens = 0;       ///< largest pack token cost (padded for padded packs)
  int64_t skipped = 0;          ///< samples not packed (over budget, failed statistics)
  int64_t steps = 0;            ///< full steps of dp * m packs
  int64_t carried_packs = 0;    ///< epoch tail carried into the next epoch
  int64_t carried_samples = 0;
  bool has_time = false;          ///< true when computed with a pack time model (below are set)
  double cost_dist_ratio_dp = 0;  ///< Dist Ratio of predicted rank seconds per step, over ranks
  double cost_dist_ratio_mb = 0;  ///< Dist Ratio of predicted pack seconds over a rank's m packs
  double step_seconds = 0;        ///< predicted seconds of a step's slowest rank (sum of its m
                                  ///< packs, no pipeline), mean over full steps
};

/// Computes the metrics of `plan` over `packs`. `budget` holds the per-dimension pack budget
/// (0 = none: use the largest pack cost); `skipped` is added to the skip count as is. With
/// `time` (not null) the Cost Dist Ratios and step_seconds are computed too (has_time = true).
/// Throws omnibal::Error when the plan does not place exactly the packs of the list.
BalanceMetrics compute_metrics(const PackList& packs, const StepPlan& plan,
                               const std::array<int64_t, kLoadDims>& budget, int64_t skipped,
                               const PackTimeModel* time = nullptr);

/// Dist Ratio of one set of per-rank loads: sum_j (max - T_j) / (max(max, 1) * n); 0 if empty.
double dist_ratio(const int64_t* loads, size_t n);
/// Dist Ratio of predicted seconds: sum_j (max - t_j) / (max * n); 0 if empty or when the
/// largest time is not positive.
double time_dist_ratio(const double* seconds, size_t n);

/// Predicted seconds of one step and its two Cost Dist Ratios (the per-step terms that
/// compute_metrics averages over steps).
struct StepTime {
  std::vector<double> rank_s;  ///< by DP rank: the sum of its m packs' predicted seconds
  double dist_dp = 0;          ///< time_dist_ratio over rank_s
  double dist_mb = 0;          ///< mean over ranks of time_dist_ratio over its m pack seconds
};

/// The StepTime of one step from its packs' predicted seconds, `pack_s[r * m + k]` = rank r's
/// micro-batch k (dp * m values). Throws omnibal::Error unless dp, m >= 1.
StepTime step_time(const double* pack_s, int dp, int m);

}  // namespace omnibal::balance
