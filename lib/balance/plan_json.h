// The data plan file: what `omnibal-plan data --plan OUT` writes and the trainer reads.
//
// Format "omnibal.data_plan.v1" (JSON):
//   {"format": "omnibal.data_plan.v1", "method": "isf", "dp": 8, "micro_batches": 1,
//    "seed": 1024, "samples_per_pack": 4,
//    "budgets": {"q_vit": 20, "q_tok": 6656, "q_tok_thresh": 6528, "iterations": 50},
//    "datasets": [{"name": "ai2d_train_12k_wh", "path": "...", "records": 12413,
//                  "failed_stats": 0, "repeat_time": 1.0}, ...],
//    "plan_hash": "9f0c...16 hex digits",
//    "steps":   [ step: [ DP rank: [ micro-batch: [[dataset, index], ...] ] ] ],
//    "carried": [ pack: [[dataset, index], ...] ],   // epoch tail, run first next epoch
//    "skipped": [[dataset, index], ...],             // over budget (data.on_bad_sample: skip)
//    "metrics": {...}}
// A sample is the pair (dataset position in "datasets", element index in that dataset's
// length file). plan_hash covers dp, m and every pack's pairs in slot order then the carried
// packs, so every rank can recompute it from the file and compare (docs/conventions.md). Failed-
// statistics records (vit_num = -1) appear only as counts in "datasets".
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "balance/data_planner.h"
#include "balance/sample_table.h"

namespace omnibal::balance {

/// One sample as the trainer addresses it.
struct SampleRef {
  uint32_t dataset = 0;  ///< position in PlanFile::datasets
  uint32_t index = 0;    ///< element index in that dataset's length / annotation file
  bool operator==(const SampleRef& o) const { return dataset == o.dataset && index == o.index; }
};

/// The metrics of a plan as the JSON object of its file's "metrics" and of `omnibal-plan data
/// --json` (keys as BalanceMetrics' fields; cost_dist_ratio_dp, cost_dist_ratio_mb and
/// step_seconds only when the metrics were computed with a pack time model).
nlohmann::json metrics_json(const BalanceMetrics& m);

/// A data plan as read back from its file.
struct PlanFile {
  std::string method;
  int dp = 1;
  int micro_batches = 1;
  uint64_t seed = 0;
  int samples_per_pack = 0;
  IsfBudgets budgets;
  int iterations = 0;
  std::vector<DatasetInfo> datasets;
  std::vector<std::vector<SampleRef>> slots;    ///< [steps * dp * m] packs in slot order
  std::vector<std::vector<SampleRef>> carried;  ///< epoch-tail packs
  std::vector<SampleRef> skipped;
  uint64_t hash = 0;  ///< as stored (read_plan_json checks it against the content)

  size_t steps() const { return slots.size() / (static_cast<size_t>(dp) * micro_batches); }
  /// Members of the pack `rank` runs as micro-batch `micro` of `step`.
  const std::vector<SampleRef>& pack(size_t step, int rank, int micro) const {
    return slots[(step * dp + static_cast<size_t>(rank)) * micro_batches + micro];
  }
};

/// Hash of a placed plan (see the file comment).
uint64_t plan_hash(const SampleTable& table, const PackList& packs, const StepPlan& plan);
/// Hash of a plan read from a file; equals the hash of the plan it was written from.
uint64_t plan_hash(const PlanFile& plan);

/// Writes `result` (packs, placement, budgets, metrics) of `table` to `path`. Throws
/// omnibal::Error when the file cannot be written.
void write_plan_json(const std::string& path, const SampleTable& table, const MethodResult& result,
                     const PlannerOptions& options);

/// Reads a plan file; throws omnibal::Error naming the file and key when it is malformed or
/// its plan_hash does not match its content.
PlanFile read_plan_json(const std::string& path);

/// A hash as the 16 lowercase hex digits stored in plan files.
std::string format_hash(uint64_t hash);

}  // namespace omnibal::balance
