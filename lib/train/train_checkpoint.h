// The trainer's side of checkpoints (storage is lib/checkpoint's CheckpointStore): what one
// rank puts in its shard and how it takes its part back. Parameters are stored under
// "<unit>.<param>" in fp32 (trained ones: the optimizer's fp32 master weights; frozen ones:
// their values) and AdamW moments under "<name>#exp_avg" / "#exp_avg_sq" in fp32, unsharded
// (ZeRO-1 shards are gathered at save), written by DP rank 0 of each stage only (one writer per
// tensor); the state JSON carries the step, the data position, the optimizer step and the
// precision and zero1 setting the checkpoint was made with. Loading reads exactly the names this
// rank's stage holds, so a checkpoint loads under any partition, PP or DP size, precision and
// zero1 setting. Under TP the tensors are gathered over the TP group at save (TP rank 0 of DP
// rank 0 writes them whole) and each TP rank takes its shard at load, so the files are the
// same whatever parallel.tp wrote them and load under any other.
#pragma once

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "core/cadence.h"
#include "train/stage_optimizer.h"
#include "train/tp_group.h"

namespace omnibal::train {

/// Counters saved with a checkpoint (rank 0's copy is authoritative).
struct TrainCounters {
  int64_t step = 0;  ///< global steps completed
  int epoch = 0;     ///< data position of the next step
  int64_t step_in_epoch = 0;
  int64_t samples = 0;        ///< samples seen so far
  int64_t tokens = 0;         ///< LLM tokens seen so far
  uint64_t plan_hash = 0;     ///< epoch 0's plan hash
  nlohmann::json stage_plan;  ///< the stage plan in use (memory/stage_plan.h JSON; metadata)
  /// The start-up cost table the plan was made with (partition/unit_cost_table.h JSON), null
  /// when none: a resume that keeps the plan keeps it too (ZB-V's per-step lists, pack times).
  nlohmann::json cost_table;
  std::string model_architecture;  ///< preset_architecture_yaml of the run (resume refuses another)
  /// Steps not applied under train.on_nonfinite skip, over the run's launches (0 when absent).
  int64_t nonfinite_skipped_steps = 0;
  nlohmann::json to_json() const;
  static TrainCounters from_json(const nlohmann::json& j);
};

/// One rank's stage as a checkpoint sees it: its parameters (frozen included) with their
/// optimizer, their TP shard layout, and whether this rank writes them.
struct CheckpointedStage {
  const std::vector<std::pair<std::string, torch::Tensor>>& params;
  StageOptimizer& optimizer;  ///< its state_tensors() hold ZeRO-3's frozen parameters too
  const TpLayout& tp;         ///< collective over TP when active; only TP rank 0 stores
  /// DP rank 0 of each stage: its tensors are stored (one writer per tensor).
  bool writer = false;
  /// Names this rank leaves out, with their AdamW moments (a tied head's copy, stored by the
  /// embedding's stage).
  std::vector<std::string> not_written;
};

/// Saves and restores one rank's part through a CheckpointStore under `root`, every
/// train.checkpoint_every steps (due).
class TrainCheckpoint {
 public:
  /// `every`: train.checkpoint_every (<= 0: only at the end and on a stop).
  TrainCheckpoint(std::string root, int keep_last, int every, comm::Communicator& world);
  ~TrainCheckpoint();
  /// Whether a periodic checkpoint falls due after `steps_done` steps (core/cadence.h).
  bool due(int64_t steps_done) const { return omnibal::due(every_, steps_done); }
  /// Collective (the optimizer gathers its ZeRO-1 shards over DP; see CheckpointedStage for
  /// TP): stores `stage` with `counters` and the resolved config `config_yaml`.
  void save(const TrainCounters& counters, const CheckpointedStage& stage,
            const std::string& config_yaml);
  // Which checkpoint to resume (--resume auto | PATH) is found before the trainer is built:
  // find_resume_point (run_config.h).
  /// Loads this rank's parameters, master weights and AdamW state from `dir` (cast to this
  /// run's precision; each TP rank keeps its shard of the stored whole tensors); returns rank
  /// 0's counters. Throws omnibal::Error listing missing names or shape mismatches.
  TrainCounters load(const std::string& dir, const CheckpointedStage& stage) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int every_ = 0;
};

}  // namespace omnibal::train
