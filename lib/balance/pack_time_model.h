// PackTimeModel: the predicted seconds of one pack (one micro-batch) through the whole model,
// forward and backward, as a linear function of the pack's load:
//
//   t = fixed_s + per_tile_s * tiles + per_token_s * tokens + per_token_sq_s * sum_i L_i^2
//
// ViT blocks cost in proportion to tiles (every tile is its own fixed-length attention
// sequence), LLM GEMMs and element-wise work in proportion to the tokens computed, and causal
// attention with the square of each sequence length L_i (each member's own length in a
// concatenated pack, variable-length attention; the padded length for every member of a padded
// one). Frozen units count their forward only (their cost tables carry no backward). The fixed
// term holds per-pack costs that do not scale (kernel launches, host work). A label-token term
// (the loss over labelled tokens) is left out: length files carry no label counts, so it could
// be neither fitted nor evaluated.
//
// This file only evaluates the coefficients; they are fitted from per-unit cost tables in
// partition/pack_time_fit.h, so lib/balance does not depend on lib/partition. Placement by
// time (step_plan.h) and the Cost Dist Ratios (balance_metrics.h) read it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "balance/pack_list.h"

namespace omnibal::balance {

/// Coefficients of the per-pack time model (see the file comment). All in seconds.
struct PackTimeModel {
  double fixed_s = 0;         ///< seconds per pack, whatever its load
  double per_tile_s = 0;      ///< seconds per ViT tile
  double per_token_s = 0;     ///< seconds per LLM token computed (padded tokens included)
  double per_token_sq_s = 0;  ///< seconds per squared sequence length (tokens^2)
  std::string source;  ///< where the coefficients come from, e.g. "analytic:<preset>:<device>"

  /// Predicted seconds of a load of `tiles` tiles, `tokens` computed tokens and `token_sq` =
  /// sum of squared sequence lengths (tokens^2).
  double seconds(int64_t tiles, int64_t tokens, double token_sq) const {
    return fixed_s + per_tile_s * static_cast<double>(tiles) +
           per_token_s * static_cast<double>(tokens) + per_token_sq_s * token_sq;
  }
  /// Predicted seconds of pack p of `packs`: its device costs (PackList::cost, padded tokens for
  /// padded packs) and PackList::token_sq_cost.
  double pack_seconds(const PackList& packs, size_t p) const {
    return seconds(packs.cost(p, kTiles), packs.cost(p, kTokens),
                   static_cast<double>(packs.token_sq_cost(p)));
  }
  /// Throws omnibal::Error naming `where` unless every coefficient is finite and at least one
  /// load coefficient (tile, token, squared token) is positive. A least-squares fit may leave a
  /// coefficient a rounding error below 0 (the analytic model has no fixed term), so signs are
  /// not checked one by one.
  void validate(const std::string& where) const;
};

/// Predicted seconds of every pack of `packs`, indexed by pack id.
std::vector<double> pack_seconds(const PackTimeModel& model, const PackList& packs);

}  // namespace omnibal::balance
