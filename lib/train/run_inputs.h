// RunInputs: what a launch reads before it builds a stage: the model preset, the tokenizer, the
// training data with its plan (train/training_data.h) and the evaluation split. omnibal-train's
// main loads them, refuses an incompatible resume (train/run_config.h) and hands them to the
// Trainer, so a resume on another architecture or data plan is refused before any start-up
// planning or model building.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "comm/parallel_comms.h"
#include "core/config.h"
#include "core/model_preset.h"
#include "data/tokenizer.h"
#include "train/evaluator.h"
#include "train/training_data.h"

namespace omnibal::train {

/// A launch's inputs, loaded once on every rank.
struct RunInputs {
  /// When loading began: the launch's start, from which train.exit_duration_min counts.
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  ModelPreset preset;                          ///< model.preset
  std::string architecture_yaml;               ///< preset_architecture_yaml(preset)
  std::unique_ptr<data::Tokenizer> tokenizer;  ///< data.tokenizer
  std::unique_ptr<TrainingData> data;          ///< data.meta, planned; this rank's loader
  std::unique_ptr<Evaluator> evaluator;        ///< data.eval_meta; null when unset
  /// TrainingData::plan_hash(), checked equal on every rank.
  uint64_t plan_hash() const { return data->plan_hash(); }
};

/// Collective over the world: loads model.preset (checked against parallel.tp), the tokenizer,
/// data.meta (planned for this rank's DP index and stage) and data.eval_meta, then checks that
/// every rank planned the same data. `config` is resolved (train/run_config.h). Throws
/// omnibal::Error naming the key at fault (an empty data.meta / data.tokenizer, a bad preset,
/// bad data: training_data.h) or, on every rank, when the ranks' data plans differ.
RunInputs load_run_inputs(const Config& config, comm::ParallelComms& comms);

}  // namespace omnibal::train
