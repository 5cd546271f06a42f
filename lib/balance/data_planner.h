// DataPlanner: one entry point that turns a SampleTable into a placed plan with metrics, for
// every data-balance method (ISF and the baselines), from plain values. omnibal-plan data and
// the trainer call this; neither CLI nor YAML types reach it.
//
// Methods and their placements:
//   isf                   ISF packs (isf_packer.h), load-grouped steps (step_plan.h)
//   isf-random-placement  the same packs placed in random order, as the reference sampler does
//   multi-source          ISF per dataset with its own budgets (reference multi_group), every
//                         step from one dataset, steps shuffled together
//   random                random padded micro-batches of samples_per_pack
//   length-group          LLaVA length-grouped padded micro-batches
//   best-fit              best-fit decreasing on tokens (budget Q_t), random order
// Budgets left at 0 are searched (budget_search.h) for the ISF methods; best-fit then uses
// best_fit_budget() so that it, too, lands near the samples-per-pack target.
// Token cap (PlannerOptions::max_seq_len, the model's llm.max_seq_len; 0 = none): the trainer
// runs every pack as one sequence, so no method may build a pack over it. The search clamps
// Q_t to it, an explicit Q_t over it is refused, best-fit's budget is clamped to it and the
// random / length-grouped packers close a pack before it would exceed it.
// Placement by time (PlannerOptions::place_by = kTime, balance.place_by: time): isf and
// multi-source sort packs by the predicted seconds of PlannerOptions::time_model instead of by
// tokens (step_plan.h); the other methods keep their own order. Whenever a time model is given,
// the metrics carry the Cost Dist Ratios (balance_metrics.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "balance/balance_metrics.h"
#include "balance/budget_search.h"
#include "balance/isf_packer.h"
#include "balance/pack_list.h"
#include "balance/pack_time_model.h"
#include "balance/step_plan.h"
#include "core/config.h"

namespace omnibal::balance {

/// The data-balance methods (`balance.method`; core/choices.h names them).
using Method = BalanceMethod;

/// "isf" | "isf-random-placement" | "multi-source" | "random" | "length-group" | "best-fit".
inline std::string method_name(Method method) { return choice_name(method); }
/// Inverse of method_name, every method including the isf-random-placement ablation (which the
/// training config refuses); throws omnibal::Error naming `key` and the choices otherwise.
Method parse_method(const std::string& name, const std::string& key);
/// Every method, in the order `omnibal-plan data --method all` reports them.
std::vector<Method> all_methods();

/// Everything a method needs (config keys: parallel.dp, parallel.micro_batches, balance.*,
/// data.on_bad_sample).
struct PlannerOptions {
  int dp = 1;
  int micro_batches = 1;
  int samples_per_pack = 4;
  IsfBudgets budgets;  ///< all zero: searched where needed
  int iterations = 50;
  uint64_t seed = 1024;
  OnBadSample on_bad_sample = OnBadSample::kError;
  int64_t max_seq_len = 0;         ///< tokens: cap of every pack (llm.max_seq_len); 0 = no cap
  std::string max_seq_len_origin;  ///< where the cap came from, for messages ("preset tiny")
  /// balance.place_by: what isf and multi-source placement balance; kTime needs time_model.
  PlaceBy place_by = PlaceBy::kCount;
  /// Predicted seconds per pack (pack_time_model.h): the key of placement by time, and the
  /// Cost Dist Ratios of the metrics. Not in the config: callers that have a cost model set it.
  std::optional<PackTimeModel> time_model;
};

/// Throws omnibal::Error when explicit budgets exceed the token cap:
/// "balance.q_tok 2048 is over the model's llm.max_seq_len 1024 (preset tiny)".
void check_token_cap(const PlannerOptions& options);

/// One method's packs, placement and metrics.
struct MethodResult {
  Method method = Method::kIsf;
  PackResult packing;
  StepPlan plan;
  BalanceMetrics metrics;
  IsfBudgets budgets;                      ///< budgets used (zero where the method has none)
  std::vector<IsfBudgets> source_budgets;  ///< multi-source: one per dataset
  double seconds = 0;         ///< packing + placement + metrics, wall clock (search excluded)
  double pack_seconds = 0;    ///< packing alone
  double place_seconds = 0;   ///< placement + metrics
  double search_seconds = 0;  ///< budget search run inside plan_method, if any
  std::string placement;      ///< isf / multi-source: what placement kept (step_plan.h's note)
  std::optional<SearchResult> search;
};

/// Planner options from the run configuration (parallel.dp, parallel.micro_batches,
/// balance.* including place_by, data.on_bad_sample); Q'_t defaults to Q_t - 128 when only Q_t is set. The token
/// cap is not in the config: callers that know the model set max_seq_len.
PlannerOptions planner_options(const ParallelConfig& parallel, const BalanceConfig& balance,
                               const DataConfig& data);

/// Token budget of best-fit packing when none is given: round_up_256((s + 0.5) * mean tokens),
/// at least the longest sample, so best-fit packs hold about s + 0.5 samples like ISF's range.
int64_t best_fit_budget(const SampleTable& table, int samples_per_pack);

/// True when every ISF budget is zero (they must then be searched).
bool budgets_unset(const IsfBudgets& b);

/// Runs one method on `table`. Skipped counts include the table's failed-statistics records.
/// `carry_in` (optional) holds the previous epoch's tail (carried_packs of its result, same
/// table and method): those packs are placed with this epoch's packs (first, for the
/// in-order baselines), so over epochs nothing is dropped. Use seed + epoch per epoch.
/// Throws omnibal::Error on invalid options, budgets over the token cap (check_token_cap),
/// place_by = kTime without a time model, or (on_bad_sample = error) a sample over a budget or
/// the cap.
MethodResult plan_method(const SampleTable& table, Method method, const PlannerOptions& options,
                         const PackList* carry_in = nullptr);

/// The epoch tail of `result` (its carried packs) as a pack list, for the next epoch's
/// plan_method(..., carry_in).
PackList carried_packs(const MethodResult& result);

}  // namespace omnibal::balance
