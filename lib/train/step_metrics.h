// StepMetrics: the numbers of one training step, which the ranks of a DP x PP job hold in
// pieces (the loss on the last stages, samples and tokens on the first, each stage's times on its
// DP rank 0), as named fields. pack() lays them out in one float64 tensor so that a single world
// all-reduce (sum) gathers the whole job's step; unpack() names them again, and
// metrics_record() makes rank 0's line of metrics.jsonl. Each field is filled by exactly the
// ranks its comment names and left 0 on the others, so the sum is the job's value.
// gather_step_metrics() fills a rank's part from its stage's result and packs and runs that
// all-reduce. Not here: the loss normaliser N (loss_normaliser.h, its own all-reduce before the forward).
#pragma once

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "balance/balance_metrics.h"
#include "comm/communicator.h"
#include "models/pack_batch.h"
#include "pipeline/stage_executor.h"
#include "train/stage_coord.h"

namespace omnibal::train {

/// Seconds one pipeline stage spent in the step (pipeline::StageTimes of its DP rank 0).
struct StageSeconds {
  double forward_s = 0;   ///< Forward of the stage's units, all micro-batches
  double backward_s = 0;  ///< Backward
  double idle_s = 0;      ///< waiting for activations and gradients (the bubble)
  double reduce_s = 0;    ///< the DP all-reduce of gradients (ReduceGrads)
};

/// What one DP rank's m packs held (filled by its first stage), and how long its pipeline
/// computed on them.
struct DpRankLoad {
  double tiles = 0;   ///< ViT tiles
  double tokens = 0;  ///< LLM tokens
  /// Measured forward + backward seconds of the rank's m packs, summed over its pipeline stages
  /// (each stage adds its own; no idle or gradient-reduction time): the measured counterpart of
  /// the predicted seconds of the rank's packs.
  double busy_s = 0;
};

/// One step's metrics of the whole job, summed over ranks (see the file comment).
struct StepMetrics {
  double loss_term_sum = 0;  ///< Σ w_t·l_t of the global batch under loss.reduction (last stages)
  double samples = 0;        ///< samples trained in the global batch (first stages)
  double tokens = 0;         ///< LLM tokens of the global batch (first stages)
  std::vector<StageSeconds> stages;  ///< by pipeline stage (DP rank 0 of each stage)
  std::vector<DpRankLoad> dp_ranks;  ///< by DP rank (the first stage of each)
  /// Σ over micro-batches of each one's token-mean loss, and their number (last stages): what
  /// averaging per micro-batch instead of per global batch would have reported.
  double micro_batch_mean_loss_sum = 0;
  double micro_batches = 0;

  /// All fields zero, with `stages` pipeline stages and `dp` DP ranks (both >= 1).
  StepMetrics(int stages, int dp);

  /// Elements of pack(): 3 + 4 * stages + 3 * dp + 2.
  int64_t packed_size() const;
  /// [packed_size()] float64, CPU: loss_term_sum, samples, tokens, then (forward_s, backward_s,
  /// idle_s, reduce_s) per stage, (tiles, tokens, busy_s) per DP rank, micro_batch_mean_loss_sum,
  /// micro_batches.
  torch::Tensor pack() const;
  /// The fields of a pack()ed tensor of `stages` stages and `dp` DP ranks (summed or not).
  /// Throws omnibal::Error when its size or dtype does not match.
  static StepMetrics unpack(const torch::Tensor& packed, int stages, int dp);

  /// The reduced loss Σ w_t·l_t / N (0 when N = 0: no label in the global batch).
  double loss(double normaliser) const { return normaliser > 0 ? loss_term_sum / normaliser : 0.0; }
};

/// The scalars of a step that are not summed over ranks (every rank has them).
struct StepScalars {
  int64_t step = 0;          ///< 0-based global step
  double lr = 0;             ///< learning rate of the step
  double grad_norm = 0;      ///< global gradient norm before clipping
  int64_t label_tokens = 0;  ///< label tokens of the global batch (loss_normaliser.h)
  double normaliser = 0;     ///< N of the global batch
  double seconds = 0;        ///< wall time of the step
  int epoch = 0;             ///< data epoch of the step
  /// Predicted seconds of each DP rank's m packs and the step's Cost Dist Ratios, from the
  /// shared data plan and the trainer's pack time model (pack_time_source.h); empty rank_s:
  /// not recorded.
  balance::StepTime predicted;
  /// The step's loss or gradient norm was not finite and train.on_nonfinite skip left it out
  /// (nonfinite_guard.h): no parameter changed.
  bool nonfinite_skipped = false;
};

/// The metrics.jsonl object of a step: step, loss, lr, grad_norm, samples, tokens, label_tokens,
/// loss_normaliser, tokens_per_s, samples_per_s, step_seconds, dp_wait_s (the slowest stage's
/// gradient all-reduce), bubble_fraction (mean idle share of the stages), epoch,
/// micro_batch_mean_loss, stages: [{forward_s, backward_s, idle_s}], dp_ranks: [{tiles, tokens,
/// busy_s}], and with scalars.predicted: predicted_rank_s (by DP rank), cost_dist_dp,
/// cost_dist_mb; on a step skipped as non-finite "nonfinite_skipped": true (absent otherwise).
/// A NaN / Inf loss or gradient norm is written as null (JSON has no NaN).
nlohmann::json metrics_record(const StepMetrics& metrics, const StepScalars& scalars);

/// Collective over `world`: the step's metrics of the whole job. This rank contributes (TP rank
/// 0 of each stage only; the TP ranks hold the same): the last stage its loss terms and
/// micro-batch losses, the first stage the samples, tokens and tiles of its `packs`, every stage
/// its forward + backward seconds into its DP rank's busy_s, DP rank 0 of each stage its times.
StepMetrics gather_step_metrics(const pipeline::StageStepResult& r,
                                const std::vector<models::PackBatch>& packs, const StageCoord& at,
                                comm::Communicator& world);

}  // namespace omnibal::train
