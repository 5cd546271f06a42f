// Fitting the per-pack time model of lib/balance (balance/pack_time_model.h) to per-unit cost
// tables: the seconds of one pack through the whole chain are the sum over units of forward_s +
// backward_s (a frozen unit's table has no backward when nothing before it trains, so it counts
// its forward only), and the model t = fixed + a_tiles * tiles + a_tokens * tokens + a_sq *
// sum L_i^2 is fitted to them by least squares over a set of loads. What the pack time leaves
// out on purpose: recomputation and the TP all-reduces (they depend on the split and the
// schedule, not on the pack) and pipeline bubbles (what placement by time reduces).
//
// Sources: a CostModel evaluated at loads spanning the data (the analytic model of a preset on
// a device, whose costs are exactly linear in these terms, so the fit is near-exact), or
// profiled tables measured at several loads (`omnibal-plan profile --q-vit --q-tok` repeated).
// A single table cannot identify more than one coefficient per unit group: scaled_pack_time
// gives the scaled model of ScaledTableCostModel (ViT units by tiles, the rest by tokens).
// A design whose loads do not identify a term (every load with the same tiles, tokens moving
// in proportion to tiles, ...) is refused with an error naming the term; the fit reports its
// relative residuals (max and RMS) so a poor fit is visible.
#pragma once

#include <string>
#include <vector>

#include "balance/pack_time_model.h"
#include "partition/cost_model.h"
#include "partition/micro_batch_load.h"
#include "partition/unit_cost_table.h"

namespace omnibal::partition {

/// The terms of the pack time model to fit; the others stay 0.
struct PackTimeTerms {
  bool fixed = true;     ///< seconds per pack
  bool tiles = true;     ///< seconds per tile
  bool tokens = true;    ///< seconds per computed token
  bool token_sq = true;  ///< seconds per squared sequence length (attention)
};

/// One observation of the fit: a load and its seconds.
struct PackTimeObservation {
  double tiles = 0;     ///< ViT tiles
  double tokens = 0;    ///< LLM tokens computed (padded positions included)
  double token_sq = 0;  ///< sum of squared sequence lengths (tokens^2)
  double seconds = 0;   ///< seconds of the pack through the chain (> 0)
};

/// A fitted model and how well it fits its own observations.
struct PackTimeFit {
  balance::PackTimeModel model;
  PackTimeTerms terms;          ///< the terms that were fitted
  size_t observations = 0;      ///< loads the fit used
  double max_rel_residual = 0;  ///< max over observations of |predicted - seconds| / seconds
  double rms_rel_residual = 0;  ///< root mean square of the same relative residuals
};

/// Seconds of one micro-batch through the chain of `table`: sum over units of forward_s +
/// backward_s (without recomputation or TP all-reduces).
double table_pack_seconds(const UnitCostTable& table);

/// Least-squares fit of the chosen terms to `observations`. `origin` names the data in errors
/// and becomes model.source. Throws omnibal::Error when no term is chosen, there are fewer
/// observations than terms, an observation has seconds <= 0, or the loads do not identify a
/// term (its column is, within rounding, a combination of the terms before it in the order
/// fixed, tiles, tokens, token_sq): "... the loads do not identify the per-tile term (every
/// load has 20 tiles) ...".
PackTimeFit fit_pack_time(const std::vector<PackTimeObservation>& observations,
                          const PackTimeTerms& terms, const std::string& origin);

/// Fits to `model` evaluated at each of `loads` (table_pack_seconds of model.costs(load)).
/// Errors as above.
PackTimeFit fit_pack_time(const CostModel& model, const std::vector<MicroBatchLoad>& loads,
                          const PackTimeTerms& terms, const std::string& origin);

/// Fits to profiled tables of one model measured at several loads; `origins[i]` names table i
/// (its file) in errors. The token_sq term needs every table's load.token_sq_sum (> 0): tables
/// without it are refused when terms.token_sq is set, naming the first such table. Throws
/// omnibal::Error when the tables differ in units or model, and as fit_pack_time above.
PackTimeFit fit_pack_time(const std::vector<UnitCostTable>& tables,
                          const std::vector<std::string>& origins, const PackTimeTerms& terms);

/// The scaled model of one table (ScaledTableCostModel's rule): a_tiles = seconds of the ViT
/// units (vit_embed, vit_block, projector) / load tiles, a_tokens = seconds of the other units /
/// load tokens, no fixed or attention term. Throws omnibal::Error naming `origin` when the
/// load has no tiles or no tokens.
balance::PackTimeModel scaled_pack_time(const UnitCostTable& table, const std::string& origin);

/// Loads that identify every term, spanning packs of up to `max_tiles` tiles and `max_tokens`
/// tokens: tiles at 1/4, 1/2, 3/4 and all of max_tiles, crossed with tokens at the same
/// fractions of max_tokens and with 1, 2, 4 and 8 samples (equal lengths, so the squared sum
/// varies apart from the token count), packed. Throws omnibal::Error unless max_tiles >= 4 and
/// max_tokens >= 32.
std::vector<MicroBatchLoad> pack_time_design(int64_t max_tiles, int64_t max_tokens);

}  // namespace omnibal::partition
