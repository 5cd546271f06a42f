// Timed partition trials (OmniBal §3.2, BMP's last step, `parallel.partition_trials`):
// the balanced search's best candidates run for real before training, and the simulator's pick
// is replaced only when a trial beats it by more than the measured noise. Each trial builds the
// candidate's stage on every rank (fresh units, initialised from train.seed by parameter name
// like the trainer's, so the trainer's own parameters are never touched), then runs `warmup`
// untimed and `steps_per_repeat` timed full 1F1B steps (forward + backward of m micro-batches,
// no DP all-reduce, no optimizer step); a repeat's time is the mean of its timed steps. The
// repeats are interleaved over the candidates (round r times every candidate once), so a
// change in the machine's load during the trials hits every candidate alike. Packs: with
// `loader` set, the rank's real epoch-0 packs from a loader of their own (the trainer's loader
// options, so building packs takes the rank's cores during the steps as it does in training; the
// trainer's data position does not move); otherwise m copies of a fixed synthetic pack of the
// run's largest pack load (profile/profiling_pack.h). Every candidate and round runs the same
// packs. The CPU default generator's state is saved before and restored after the trials. A
// repeat's time is the slowest rank's (all-reduced max).
// Decision: noise = the larger spread (max - min over repeats) of the two candidates compared;
// candidate i replaces the pick (candidate 0) when median_i < median_0 - noise; among several
// the lowest median wins. Not here: which candidates to try (memory/stage_plan.h).
#pragma once

#include "core/choices.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/parallel_comms.h"
#include "data/pack_loader.h"
#include "core/model_preset.h"
#include "models/pack_batch.h"
#include "partition/stage_partition.h"

namespace omnibal::train {

/// What the trials need.
struct TrialSetup {
  ModelPreset preset;
  uint64_t init_seed = 0;         ///< train.seed
  int64_t img_context_id = 0;     ///< the tokenizer's <IMG_CONTEXT>
  std::vector<UnitGroup> freeze;  ///< train.freeze groups
  int micro_batches = 1;          ///< m
  models::PackBatch pack;         ///< the fixed profiling pack (when `loader` is unset)
  /// A loader of this rank's real packs for `steps` steps (TrainingData::trial_loader; null on a
  /// stage that loads none); unset: every micro-batch is `pack`.
  std::function<std::unique_ptr<data::PackLoader>(int64_t steps)> loader;
  int warmup = 1;                 ///< untimed steps before each repeat
  int repeats = 3;                ///< timed repeats per candidate (>= 3)
  int steps_per_repeat = 1;       ///< steps per repeat (>= 1); the repeat's time is their mean
  torch::Dtype dtype = torch::kFloat32;  ///< parameters and activations (train.precision)
  /// Recompute flags (per unit) to run a candidate with (its own recompute plan).
  std::function<std::vector<bool>(const partition::Partition&)> recompute_for;
};

/// Measured step times and the decision.
struct TrialOutcome {
  std::vector<std::vector<double>> seconds;  ///< per candidate, per timed repeat (mean step s)
  std::vector<double> median_s;              ///< per candidate
  std::vector<double> spread_s;              ///< per candidate: max - min
  int chosen = 0;                            ///< index of the winner (0 = simulator's pick)
  std::string summary;                       ///< one log line per candidate and the decision
};

/// Applies the decision rule of the file comment to measured repeats (pure; tested alone).
/// Throws omnibal::Error when a candidate has no repeat.
TrialOutcome decide_trials(std::vector<std::vector<double>> seconds);

/// Fills o.summary: one entry per candidate (median, spread) and the decision. Throws
/// omnibal::Error when `candidates` and `o` differ in size.
void summarise_trials(const std::vector<partition::Partition>& candidates, TrialOutcome& o);

/// Collective over comms.world(): runs every candidate (all ranks in the same order, repeats
/// interleaved) and decides. Throws omnibal::Error when repeats < 3, steps_per_repeat < 1, the
/// loader runs out of packs or a step fails.
TrialOutcome run_partition_trials(const std::vector<partition::Partition>& candidates,
                                  const TrialSetup& setup, comm::ParallelComms& comms);

}  // namespace omnibal::train
