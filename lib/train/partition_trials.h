// Timed partition trials (OmniBal §3.2, BMP's last step, `parallel.partition_trials`):
// the balanced search's best candidates run for real before training, and the simulator's pick
// is replaced only when a candidate is faster by a t test over paired rounds. Each trial builds the
// candidate's stage on every rank (fresh units, initialised from train.seed by parameter name
// like the trainer's, so the trainer's own parameters are never touched), then runs `warmup`
// untimed and `steps_per_repeat` timed full 1F1B steps (forward + backward of m micro-batches,
// no DP all-reduce, no optimizer step); a repeat's time is the mean of its timed steps. The
// repeats are interleaved over the candidates in rounds (round r times every candidate once, in
// order for even r and in reverse for odd r, so a steady drift of the machine's speed hits every
// candidate alike). Packs: with
// `loader` set, the rank's real epoch-0 packs from a loader of their own (the trainer's loader
// options, so building packs takes the rank's cores during the steps as it does in training; the
// trainer's data position does not move); otherwise m copies of a fixed synthetic pack of the
// run's largest pack load (profile/profiling_pack.h). Every candidate and round runs the same
// packs. The CPU default generator's state is saved before and restored after the trials. A
// repeat's time is the slowest rank's (all-reduced max).
// Decision, paired by round: per round r, d_r = ln(candidate i's time / the pick's time)
// (candidate 0, the simulator's pick). Candidate i replaces the pick when the mean of d_r is
// below zero by a one-sided Student t test at the 1-in-8 level: mean / (sd / sqrt(n)) <
// -trial_t_critical(n) over the n rounds; among several, the lowest mean wins. Measured on a
// shared 2-core host, a round's log ratio varies by about 17 % / sqrt(timed steps) and the rounds
// vary independently (pairing removes slow drift, not this), so 6 rounds of 8 steps separate
// splits 5 % apart about 4 times in 5. Not here: which
// candidates to try (memory/stage_plan.h).
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
  int warmup = 1;            ///< untimed steps before each repeat
  int repeats = 3;           ///< timed repeats per candidate (>= 3)
  int steps_per_repeat = 1;  ///< steps per repeat (>= 1); the repeat's time is their mean
  torch::Dtype dtype = torch::kFloat32;  ///< parameters and activations (train.precision)
  torch::Device device = torch::kCPU;    ///< where the candidates run (runtime.device)
  /// Recompute flags (per unit) to run a candidate with (its own recompute plan).
  std::function<std::vector<bool>(const partition::Partition&)> recompute_for;
};

/// Measured step times and the decision.
struct TrialOutcome {
  std::vector<std::vector<double>> seconds;  ///< per candidate, per round (mean step s)
  std::vector<double> median_s;              ///< per candidate
  std::vector<double> spread_s;              ///< per candidate: max - min
  std::vector<double> ratio;                 ///< per candidate: exp(mean of d_r), its time
                                             ///< over the pick's (1 for the pick)
  std::vector<double> t_stat;                ///< per candidate: mean / (sd / sqrt(n)) of d_r
                                             ///< (0 for the pick; -inf when all d_r
                                             ///< agree up to rounding and are < 0)
  std::vector<int> wins;                     ///< per candidate: rounds it beat the pick in
  int rounds = 0;                            ///< n: rounds paired (every candidate's repeats)
  double t_critical = 0;                     ///< trial_t_critical(n); 0: n < 2, no decision
  int chosen = 0;                            ///< index of the winner (0 = simulator's pick)
  std::string summary;                       ///< one log line per candidate and the decision
};

/// The 87.5 % quantile of Student's t with n - 1 degrees of freedom: a candidate no faster than
/// the pick passes the trials' test at most 1 time in 8. 2.414 (1 + sqrt 2) for n = 2, 1.604
/// for 3, 1.273 for 7, towards 1.150 (the normal's) for large n. Throws omnibal::Error when
/// n < 2.
double trial_t_critical(int rounds);

/// Applies the decision rule of the file comment to measured repeats (pure; tested alone):
/// seconds[i][r] is candidate i's time in round r. Throws omnibal::Error when a candidate has no
/// repeat or the candidates have different numbers of rounds.
TrialOutcome decide_trials(std::vector<std::vector<double>> seconds);

/// Fills o.summary: one entry per candidate (median, spread) and the decision. Throws
/// omnibal::Error when `candidates` and `o` differ in size.
void summarise_trials(const std::vector<partition::Partition>& candidates, TrialOutcome& o);

/// Collective over comms.world(): runs every candidate (all ranks in the same order, rounds
/// alternating forward and reverse) and decides. Throws omnibal::Error when repeats < 3, steps_per_repeat < 1, the
/// loader runs out of packs or a step fails; StartupStopped (startup_stop.h) on every rank when
/// any rank got a stop signal, agreed before and after each repeat's timed steps.
TrialOutcome run_partition_trials(const std::vector<partition::Partition>& candidates,
                                  const TrialSetup& setup, comm::ParallelComms& comms);

}  // namespace omnibal::train
