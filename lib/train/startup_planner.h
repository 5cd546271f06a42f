// The trainer's start-up planning of the pipeline layout (lib/train/README.md): `parallel.partition`
// and `memory.recompute` become one memory::StagePlan (split + per-unit recompute flags) before
// any stage is built. The decision is torch-free (memory/plan_sources.h), two questions:
//   where the split comes from      config (uniform | parameters over the preset's parameter
//                                   counts | manual; wins over a stored plan, logged) |
//                                   stored (checkpoint, else parallel.plan_from) | single
//                                   stage (pp 1) | search (balanced)
//   where the flags come from       config (none | full | per-stage counts) | stored |
//                                   planner (adaptive)
// 1. On resume, a plan stored in the checkpoint is reused as it is when it fits the run (model,
//    units, stage count, schedule and v; under parallel.schedule auto its schedule, which auto
//    picked then): a balanced split, and adaptive recomputation when m also matches. No new
//    search, so a resumed run keeps its split whatever the timings now say. Otherwise
//    parallel.plan_from's plan (an earlier run directory's stage_plan.json, or the file) serves
//    the same way, read only then and refused when it does not fit. Either: no profile, no
//    trials (unless adaptive recomputation must be planned for another m).
// 2. Otherwise, when the split is searched or the flags planned, the per-unit cost table comes
//    from `parallel.cost_table` (a file from `omnibal-plan profile`, scaled linearly to the run's
//    pack load) or from profiling the whole model on world rank 0 under one synthetic pack of
//    the largest epoch-0 pack's tiles and tokens (for ISF: the budgets Q_v / Q_t) with the mean
//    samples per pack; rank 0 broadcasts the table's JSON and every rank parses the same text.
//    Profiling on one rank keeps start-up simple and cheap for models that fit one device; a
//    model that does not fit must be profiled offline and given as parallel.cost_table.
// 3. Every rank runs the same deterministic planner (memory::plan_stages: one search loop,
//    shared with `omnibal-plan partition`) on the same table and budget (the smallest over
//    ranks), so all agree; a hash of the plan is compared across ranks and a mismatch is an
//    error. The search times stages on the table scaled to the mean epoch-0 pack (it models m
//    identical micro-batches: the typical one) and predicts memory on the largest pack's. On a
//    CPU device it adds each stage's host work per micro-batch to the stage's forward: the
//    loader builds packs on the rank's own cores, so each rank times building a few of its
//    epoch-0 packs (the parts its stage loads) and a stage takes its slowest rank's figure.
// 4. The judge of each search round's top K: the predicted 1F1B step time, or with
//    parallel.partition_trials > 0 (-1 = partition_top_k) timed trials of the best candidates
//    (partition_trials.h: real epoch-0 packs from a loader of their own,
//    parallel.partition_trial_rounds rounds of parallel.partition_trial_steps steps; each split
//    timed once); the predicted pick stands unless a t test over the rounds finds another faster.
//    The predicted pick is reproducible where the profile cannot separate the candidates: a
//    split replaces the preferred one only when its simulated step is faster by more than the
//    profile's repeat spread (StagePlannerOptions::pick_margin, partition/pick_margin.h; logged).
// A stop signal during the profile or the trials ends start-up on every rank with
// StartupStopped (startup_stop.h).
// Memory options follow the trainer (memory::trainer_memory_options): weights in the run's
// precision, the fp32 main gradient (4 bytes per parameter; bf16 gradients are folded into it
// as they are produced), fp32 master weights and AdamW moments divided over DP under ZeRO-1,
// activations at TP; no workspace on the CPU.
#pragma once

#include <optional>
#include <string>

#include <torch/torch.h>

#include "comm/parallel_comms.h"
#include "core/config.h"
#include "core/model_preset.h"
#include "memory/plan_file.h"
#include "memory/plan_sources.h"
#include "memory/stage_plan.h"
#include "partition/unit_cost_table.h"

namespace omnibal::train {

class TrainingData;

/// A plan stored in a checkpoint, with where it came from.
struct StoredPlan {
  memory::StagePlan plan;
  std::string checkpoint;  ///< checkpoint directory
  /// The cost table the plan was made with (TrainCounters::cost_table), when it had one.
  std::optional<partition::UnitCostTable> table;
};

/// What start-up planning reads.
struct StartupPlanContext {
  const Config* config = nullptr;
  const ModelPreset* preset = nullptr;
  comm::ParallelComms* comms = nullptr;
  TrainingData* data = nullptr;      ///< epoch 0's packs give the profiling load
  int64_t img_context_id = 0;        ///< the tokenizer's <IMG_CONTEXT>
  std::optional<StoredPlan> stored;  ///< from the checkpoint being resumed, if any
  /// The device this rank's stage computes on (the trainer's): the start-up profile, the TP
  /// link probe, the default memory budget and the host-cost rule follow it. No default, so a
  /// caller cannot leave a GPU run profiling on the CPU; unset is an error.
  std::optional<torch::Device> device;
};

/// The plan every rank trains with, and how long planning took on this rank (seconds).
struct StartupPlan {
  memory::StagePlan plan;
  double seconds = 0;
  /// The cost table the split search or the recompute planner read (the same on every rank),
  /// when one was needed; the trainer's pack time model scales it (pack_time_source.h).
  std::optional<partition::UnitCostTable> table;
  /// "start-up profile", "parallel.cost_table <path>" or "the checkpoint <dir>" (a resume that
  /// profiles nothing, its checkpoint's split kept, keeps the table that checkpoint stored)
  std::string table_origin;

  /// `table` as JSON (partition/unit_cost_table.h), null without one: TrainCounters::cost_table.
  nlohmann::json table_json() const;
};

/// The start-up decision's inputs of this run (memory/plan_sources.h): the preset's units and
/// parameter counts (the `parameters` rule), parallel.pp, m, parallel.partition,
/// memory.recompute, `stored` and `plan_from` (parallel.plan_from's plan; either may be null and
/// must outlive the request); `log` on rank 0.
memory::StagePlanRequest stage_plan_request(const Config& config, const ModelPreset& preset,
                                            const StoredPlan* stored, bool log,
                                            const memory::PlanFile* plan_from = nullptr);

/// Collective over comms->world(). Throws omnibal::Error when context.device is unset (before
/// anything collective), naming the key on a bad cost table
/// (unreadable, another preset, other units), a parallel.plan_from that cannot be read or does
/// not fit, a budget too small for adaptive, no balanced candidate that fits, or ranks that
/// disagree on the plan; StartupStopped on every rank after a stop signal (startup_stop.h).
StartupPlan plan_stages_at_startup(const StartupPlanContext& context);

/// Writes `plan` as JSON (memory::stage_plan_json) to `<run_dir>/stage_plan.json` and, when not
/// null, the cost table it was made with (StartupPlan::table_json) to `<run_dir>/cost_table.json`
/// (what `omnibal-plan simulate --cost-table-in` reads); throws omnibal::Error when it cannot
/// write.
void write_stage_plan_file(const std::string& run_dir, const memory::StagePlan& plan,
                           const nlohmann::json& cost_table = nullptr);

/// The plan stored in checkpoint `dir` (its rank state's "stage_plan"), or nullopt for a
/// checkpoint written before plans were stored. Throws omnibal::Error on a malformed plan.
std::optional<StoredPlan> stored_plan(const nlohmann::json& rank_state, const std::string& dir);

/// Epoch 0's packs as planning loads, from one pass over them.
struct EpochPackLoads {
  /// The profiling / memory load: most tiles, most (computed) tokens, and the mean samples per
  /// pack (rounded, >= 1, at most the tiles).
  partition::TableLoad largest;
  /// The search's timing load: mean tiles, mean (computed) tokens and mean samples per pack
  /// (each rounded, >= 1; samples at most the tiles).
  partition::TableLoad mean;
};

/// Both loads of EpochPackLoads. Throws omnibal::Error when epoch 0 has no packs.
EpochPackLoads epoch0_pack_loads(TrainingData& data);

/// Default per-rank memory budget in bytes: CPU 75% of physical memory divided by the ranks on
/// this node (OMPI_COMM_WORLD_LOCAL_SIZE, 1 when unset); CUDA the device's memory minus 8%
/// (memory::default_budget_bytes). Throws omnibal::Error when the size cannot be read.
double default_memory_budget_bytes(const torch::Device& device);

}  // namespace omnibal::train
