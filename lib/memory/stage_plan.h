// StagePlan: the pipeline layout a training run uses, as one torch-free value — which units
// each stage holds (model balance, OmniBal §3.2, docs/paper.md) and which blocks recompute their
// activations (memory balance, §3.3) — plus where each half came from, the search's
// candidates and the predicted memory per stage. It is the only stage-layout type: the trainer
// builds its stage from it, logs it, writes it to the run directory and stores it in every
// checkpoint (metadata: parameters are saved per unit, so any plan can load any checkpoint).
//
// plan_stages() is the planning itself, deterministic for a given cost table, options and
// judge, so every rank computes the same plan:
//   partition  the fixed rules of stage_rules.h (uniform | parameters over the table's parameter
//              bytes | manual), or balanced (BMP: partition_search.h around the exact, greedy
//              and refined anchors, candidates within radius r that fit the budget, the top K by
//              the predicted 1F1B step time pipeline_s; with a pick margin (the profile's
//              spread, partition/pick_margin.h) the preferred split within the margin of the
//              fastest goes first; a judge picks among those K, candidate 0 unless it measures)
//   recompute  the fixed rules (none | full | per-stage counts), or adaptive (the knapsack of
//              recompute_planner.h per stage, min(m, P - s) micro-batches in flight)
// Balanced + adaptive depend on each other (recomputed blocks add their recompute cost, and the
// recompute plan depends on the split), so the search is repeated with the previous pick's
// recompute flags, at most 3 rounds, stopping when the pick repeats: the memory-aware search.
// A later round is not always the better: where the rounds picked different splits, the judge
// decides among those picks, each timed under its own recomputation.
// Its first round assumes full recomputation (kFirstRoundRecompute below). The one loop serves
// the trainer (judge: pipeline_s, or timed trials, lib/train/partition_trials.h) and the
// ablation of `omnibal-plan partition` (judge: simulated steps of the run's packs).
// Schedules (parallel.schedule, schedule/schedules.h): the plan records its schedule and v; its
// partition has P x v chunks in virtual-stage order (chunk k on pipeline rank k % P, or ZB-V's V:
// schedule::chunk_layout; v = 1 for 1F1B and ZB-H1, 2 for ZB-V), searched, ranked (pipeline_s
// under that schedule) and memory-planned (per rank, memory_model.h) under it. `auto` plans 1F1B,
// ZB-H1 and interleaved (v = virtual_stages if >= 2, else 2; only where m % P == 0 and P v <=
// units), and ZB-V where StagePlannerOptions::auto_zb_v says so, and keeps the fastest predicted pipeline_s that
// fits the budget (with a pick margin: the first of that order within the margin of the
// fastest); the plan names the schedule picked and the source lists every one compared.
// Not here: obtaining the cost table (profiling, lib/profile), running trials, LibTorch, MPI.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "memory/recompute_planner.h"
#include "memory/stage_rules.h"
#include "partition/partition_search.h"
#include "partition/tensor_parallel.h"
#include "partition/unit_cost_table.h"

namespace omnibal::memory {

/// One candidate split of a balanced search.
struct PlanCandidate {
  partition::Partition partition;  ///< P x v chunks
  double pipeline_s = 0;           ///< simulated step time under `schedule` at the table's load, s
  std::vector<double> trial_s;     ///< measured step times of the timed trials (empty: not timed)
  PipelineSchedule schedule = PipelineSchedule::k1F1B;  ///< the schedule it was ranked under
  int virtual_stages = 1;                               ///< its v (1 unless interleaved)
};

/// The layout a run trains with (see the file comment).
struct StagePlan {
  std::string model;                                    ///< preset name
  int micro_batches = 1;                                ///< m the recompute plan was made for
  PipelineSchedule schedule = PipelineSchedule::k1F1B;  ///< never kAuto (auto records its pick)
  int virtual_stages = 1;               ///< v chunks per rank (1 unless interleaved)
  partition::Partition partition;       ///< units per chunk (virtual stage), P x v parts
  std::vector<std::string> unit_names;  ///< every unit, chain order
  RecomputeFlags recompute;             ///< per unit: rerun its forward inside the backward
  std::string partition_source;         ///< e.g. "balanced: search on profiled:cpu, top 3"
  std::string recompute_source;         ///< e.g. "adaptive: budget 0.50 GiB"
  double budget_bytes = 0;              ///< memory budget per device (0 = none)
  std::vector<double> predicted_bytes;  ///< per rank, under `recompute` (empty: no table)
  std::vector<double> none_bytes;       ///< per rank without recomputation
  std::vector<double> full_bytes;       ///< per rank with every block recomputed
  /// Step time of m identical table-load micro-batches under `schedule` with this split and
  /// these flags (partition_search.h pipeline_s), seconds; 0: not predicted (no table).
  double pipeline_s = 0;
  /// balanced: the last round's top K by pipeline_s, or the rounds' different picks (plan_stages)
  std::vector<PlanCandidate> candidates;
  int chosen = -1;  ///< index into candidates of the split in use (-1: none)

  /// Pipeline ranks P = chunks() / virtual_stages.
  int stages() const { return partition.stages() / virtual_stages; }
  /// Model chunks (virtual stages) P x v = partition.stages().
  int chunks() const { return partition.stages(); }
  /// First unit of virtual stage k (chunk k in virtual-stage order; k = stage without
  /// interleaving).
  int begin(int k) const { return partition.begin(k); }
  /// One past the last unit of virtual stage k.
  int end(int k) const { return partition.end(k); }
  /// The virtual stages pipeline rank `rank` holds, in chunk order: {rank, rank + P, ...}.
  std::vector<int> chunks_of(int rank) const;

  /// Recomputed units per virtual stage.
  std::vector<int> recomputed_per_stage() const;
  /// Names of the recomputed units of virtual stage k.
  std::vector<std::string> recomputed_units(int k) const;
  /// "[6, 4], recompute {stage 0: vit_block_1, llm_block_0; stage 1: none}".
  std::string describe() const;
  /// "stage 0: vit_embed..projector (7 units, 2 recomputed), stage 1: ...".
  std::string describe_stages() const;
};

/// Picks one of a round's top-K candidates (at least one; candidate 0 is the planner's pick:
/// the best pipeline_s, or under StagePlannerOptions::pick_margin the preferred split within
/// the margin; the rest by pipeline_s) and returns its index. It may record what it measured in
/// each candidate's trial_s. It must decide the same on every rank (a collective judge runs on
/// all ranks in the same order).
using CandidateJudge = std::function<int(std::vector<PlanCandidate>& candidates)>;

/// The default judge: the best predicted 1F1B step time, i.e. candidate 0.
int judge_by_pipeline_time(std::vector<PlanCandidate>& candidates);

/// The recompute flags the first round of the memory-aware search (balanced + adaptive)
/// assumes: every block recomputed. Why full and not none: OmniBal's memory balance starts from
/// full recomputation (OmniBal §3.3, docs/paper.md: train with every layer recomputed, then switch layers
/// off), the candidate filter already admits a split only when full recomputation fits, and the
/// first round is then exactly the balanced search under full recomputation (the ablation's
/// "+ balanced partition" row), which later rounds refine with the adaptive flags.
RecomputeFlags first_round_recompute(const partition::UnitCostTable& table);

/// What plan_stages needs besides the cost table and the two config specs.
struct StagePlannerOptions {
  int stages = 1;  ///< P pipeline ranks
  /// parallel.schedule; kAuto compares the schedules (file comment).
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  int virtual_stages = 1;        ///< parallel.virtual_stages (v; used by interleaved and auto)
  int micro_batches = 1;         ///< m
  int radius = 1;                ///< r of the balanced search
  int top_k = 3;                 ///< K candidates kept
  double link_bandwidth = 10e9;  ///< bytes/s between neighbouring stages
  /// The TP all-reduce link (partition/tensor_parallel.h; tp_link(device, tp) on a GPU, measured
  /// on a host). Stage times add each unit's TP all-reduces on it when the table's tp > 1; no
  /// bandwidth: they are left out of the search (only when nothing better is known).
  partition::TpLink tp_link;
  /// Per pipeline rank (empty, or `stages` entries): host seconds per micro-batch outside the
  /// cost table, added to the rank's Forward in pipeline_s (partition_search.h
  /// rank_micro_batch_s); the trainer measures its loader's pack building on CPU ranks.
  std::vector<double> host_micro_batch_s;
  MemoryOptions memory;     ///< bytes per parameter, dp, tp, ZeRO-1, workspace
  double budget_bytes = 0;  ///< per device; 0 = no limit (adaptive then recomputes nothing)
  std::vector<std::string> unit_names;  ///< model unit names, chain order (size = table units)
  /// The table memory is predicted from (e.g. the heaviest pack) when it differs from the one
  /// stage times are taken from (e.g. the mean pack); unset: the same table.
  std::optional<partition::UnitCostTable> memory_table;
  /// Relative margin of the reproducible pick (partition/pick_margin.h), e.g. 0.03: among a
  /// balanced round's top K, and among auto's schedules, the preferred one is kept unless
  /// another's pipeline_s is lower by more than this fraction (splits: fewest parameter bytes on
  /// the fullest rank first, then the split; schedules: 1F1B, ZB-H1, interleaved). The trainer
  /// sets the start-up profile's repeat spread; 0: the fastest predicted (a table read from a
  /// file, the same at every launch).
  double pick_margin = 0;
  /// Whether auto compares ZB-V too (auto_schedule_choices). Off by default: the trainer's
  /// executor does not walk ZB-V's lists yet; omnibal-plan turns it on.
  bool auto_zb_v = false;
};

/// The (schedule, v) pairs parallel.schedule auto plans for P `stages`, m `micro_batches`,
/// parallel.virtual_stages and a model of `units` units, in its order of preference: 1F1B,
/// ZB-H1, then interleaved at v = virtual_stages if >= 2, else 2 (only where P > 1,
/// m % P == 0 and P v <= units), then, with `zb_v`, ZB-V at v 2 (only where P > 1 and 2P <=
/// units).
std::vector<std::pair<PipelineSchedule, int>> auto_schedule_choices(int stages, int micro_batches,
                                                                    int virtual_stages, int units,
                                                                    bool zb_v = false);

/// Plans the partition and the recompute flags from `table` (one micro-batch at the run's pack
/// load: seconds and bytes per unit) under `partition` and `recompute` (config specs). Under
/// balanced, each round's top K go to `judge` (empty: judge_by_pipeline_time), whose pick is
/// the round's pick; `candidates` and `chosen` are the last round's, or, when the adaptive
/// rounds picked different splits, those picks judged again (each under its own recompute
/// plan), whose winner is the plan's split. Throws omnibal::Error
/// naming the config key when a manual split or per-stage counts do not match the model, when
/// no balanced candidate fits the budget, or (adaptive) when a stage does not fit
/// `budget_bytes` even with every block recomputed.
/// `last_search`, when given, receives the last round's search in full (anchors, counts, scores
/// of the top K) for reports; untouched unless balanced. Interleaved: throws naming
/// parallel.virtual_stages when the model has fewer units than P x v and parallel.micro_batches
/// when m % P != 0. Auto: throws when no schedule fits, naming each one's error.
StagePlan plan_stages(const partition::UnitCostTable& table, const PartitionSpec& partition,
                      const RecomputeSpec& recompute, const StagePlannerOptions& options,
                      const CandidateJudge& judge = {},
                      partition::PartitionSearchResult* last_search = nullptr);

/// Recompute flags of `spec` for the plan's split (fixed rules: stage_rules.h; adaptive: the
/// knapsack on options.memory_table or `table`, nothing recomputed without a budget). Fills the
/// plan's recompute, recompute_source, budget_bytes and the three per-stage memory predictions.
/// Same errors as plan_stages for the recompute half.
void plan_recompute_for(const partition::UnitCostTable& table, const RecomputeSpec& spec,
                        const StagePlannerOptions& options, StagePlan& plan);

/// Search inputs at the table's load: per unit forward + backward seconds plus the forward
/// again when `recompute[u]` (for trainable blocks), each with its TP all-reduces on
/// options.tp_link (when it has a bandwidth), W seconds (UnitCost::weight_backward_s), output
/// bytes, m, r, K, bandwidth, the host costs per micro-batch, the schedule and v of options
/// (not kAuto); no memory filter
/// (plan_stages adds it). Throws omnibal::Error when the flags do not cover the
/// table's units.
partition::PartitionSearchInput search_input(const partition::UnitCostTable& table,
                                             const RecomputeFlags& recompute,
                                             const StagePlannerOptions& options);

/// JSON of a plan ("format": "omnibal.stage_plan.v1"; "schedule", "virtual_stages" and
/// "pipeline_s" are optional on read: 1f1b, 1, 0 for plans written before schedules).
nlohmann::json stage_plan_json(const StagePlan& plan);
/// Inverse of stage_plan_json; throws omnibal::Error naming `origin` and the key at fault.
StagePlan parse_stage_plan(const nlohmann::json& j, const std::string& origin);
/// FNV-1a 64 of what training depends on: the split and the recompute flags, and the schedule
/// and v when they are not 1F1B / 1 (so plans from before schedules keep their hash).
uint64_t stage_plan_hash(const StagePlan& plan);

}  // namespace omnibal::memory
