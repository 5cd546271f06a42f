// StagePlan: the pipeline layout a training run uses, as one torch-free value — which units
// each stage holds (model balance, OmniBal §3.2 / spec §2) and which blocks recompute their
// activations (memory balance, §3.3 / spec §3) — plus where each half came from, the search's
// candidates and the predicted memory per stage. The trainer builds it at start-up, logs it,
// writes it to the run directory and stores it in every checkpoint (metadata: parameters are
// saved per unit, so any plan can load any checkpoint), and reuses it on resume.
//
// plan_stages() is the planning itself, deterministic for a given cost table and options, so
// every rank computes the same plan:
//   partition  uniform | parameters (min-max over parameter bytes) | manual | balanced (BMP:
//              partition_search.h around the exact, greedy and refined anchors, candidates
//              within radius r that fit the budget, ranked by the simulated 1F1B step time
//              pipeline_s; the best one is the pick)
//   recompute  none | full | per-stage counts (first k blocks) | adaptive (the knapsack of
//              recompute_planner.h per stage, min(m, P - s) micro-batches in flight)
// Balanced + adaptive depend on each other (recomputed blocks cost a second forward, and the
// recompute plan depends on the split), so the search is repeated with the previous pick's
// recompute flags, at most 3 rounds, stopping when the pick repeats (as omnibal-plan
// partition's "+ adaptive recompute" row).
// Not here: obtaining the cost table (profiling, lib/profile), timed trials of the candidates
// (the trainer: lib/train/partition_trials.h), LibTorch, MPI.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/config.h"
#include "memory/recompute_planner.h"
#include "partition/partition_search.h"
#include "partition/unit_cost_table.h"

namespace omnibal::memory {

/// One candidate split of a balanced search.
struct PlanCandidate {
  partition::Partition partition;
  double pipeline_s = 0;       ///< simulated 1F1B step time at the table's load, seconds
  std::vector<double> trial_s; ///< measured step times of the timed trials (empty: not timed)
};

/// The layout a run trains with (see the file comment).
struct StagePlan {
  std::string model;                    ///< preset name
  int micro_batches = 1;                ///< m the recompute plan was made for
  partition::Partition partition;       ///< units per stage
  std::vector<std::string> unit_names;  ///< every unit, chain order
  std::vector<bool> recompute;          ///< per unit: rerun its forward inside the backward
  std::string partition_source;         ///< e.g. "balanced: search on profiled:cpu, top 3"
  std::string recompute_source;         ///< e.g. "adaptive: budget 0.50 GiB"
  double budget_bytes = 0;              ///< memory budget per device (0 = none)
  std::vector<double> predicted_bytes;  ///< per stage, under `recompute` (empty: no table)
  std::vector<double> none_bytes;       ///< per stage without recomputation
  std::vector<double> full_bytes;       ///< per stage with every block recomputed
  std::vector<PlanCandidate> candidates;  ///< balanced: the top K, simulator's pick first
  int chosen = -1;                      ///< index into candidates of the split in use (-1: none)

  /// Recomputed units per stage.
  std::vector<int> recomputed_per_stage() const;
  /// Names of the recomputed units of `stage`.
  std::vector<std::string> recomputed_units(int stage) const;
  /// "[6, 4], recompute {stage 0: vit_block_1, llm_block_0; stage 1: none}".
  std::string describe() const;
};

/// What plan_stages needs besides the cost table and the two config specs.
struct StagePlannerOptions {
  int stages = 1;               ///< P
  int micro_batches = 1;        ///< m
  int radius = 1;               ///< r of the balanced search
  int top_k = 3;                ///< K candidates kept
  double link_bandwidth = 10e9; ///< bytes/s between neighbouring stages
  MemoryOptions memory;         ///< bytes per parameter, dp, ZeRO-1, workspace
  double budget_bytes = 0;      ///< per device; 0 = no limit (adaptive then recomputes nothing)
  std::vector<std::string> unit_names;  ///< model unit names, chain order (size = table units)
};

/// Plans the partition and the recompute flags from `table` (one micro-batch at the run's pack
/// load) under `partition` and `recompute` (config specs). Throws omnibal::Error naming the
/// config key when a manual split or per-stage counts do not match the model, when no balanced
/// candidate fits the budget, or (adaptive, full, counts with a budget) when a stage does not
/// fit `budget_bytes` even with every block recomputed.
StagePlan plan_stages(const partition::UnitCostTable& table, const PartitionSpec& partition,
                      const RecomputeSpec& recompute, const StagePlannerOptions& options);

/// Recompute flags of `spec` for a fixed split (adaptive: the knapsack). Fills the plan's
/// recompute, recompute_source and the three per-stage memory predictions. Same errors as
/// plan_stages for the recompute half.
void plan_recompute_for(const partition::UnitCostTable& table, const RecomputeSpec& spec,
                        const StagePlannerOptions& options, StagePlan& plan);

/// Search inputs at the table's load: per unit forward + backward seconds plus the forward
/// again when `recompute[u]` (empty: no recomputation), output bytes, m, r, K, bandwidth.
partition::PartitionSearchInput search_input(const partition::UnitCostTable& table,
                                             const std::vector<bool>& recompute,
                                             const StagePlannerOptions& options);

/// JSON of a plan ("format": "omnibal.stage_plan.v1").
nlohmann::json stage_plan_json(const StagePlan& plan);
/// Inverse of stage_plan_json; throws omnibal::Error naming `origin` and the key at fault.
StagePlan parse_stage_plan(const nlohmann::json& j, const std::string& origin);
/// FNV-1a 64 of what training depends on: the split and the recompute flags.
uint64_t stage_plan_hash(const StagePlan& plan);

}  // namespace omnibal::memory
