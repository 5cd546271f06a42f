// How per-token losses become the training loss (loss.reduction, InternVL's len2weight in
// internvl_chat_finetune.py): every label token t of sample i gets a weight w_t, and
//   loss = sum_t w_t * l_t / sum_t w_t        (sums over the whole global batch)
//   token:  w_t = 1               -> the mean over all label tokens of the global batch
//   sample: w_t = 1 / n_i         -> each sample's mean, averaged over the global batch's samples
//   square: w_t = 1 / sqrt(n_i)   -> sum_i (sum_{t in i} l_t) / sqrt(n_i) / sum_i sqrt(n_i)
// where n_i is sample i's label-token count (samples without labels get weight 0 and do not
// count). The weights depend only on the labels, so the normaliser sum_t w_t of the whole global
// batch is known before any forward: the trainer sums loss_normaliser() over its micro-batches,
// all-reduces it over the DP group (as InternVL's loss_reduction_all_gather does), and divides
// each micro-batch's weighted_sum by it before backward. Because a sample is never split
// across packs, packing does not change any w_t, so packed and per-sample runs give the same
// loss and gradients under every reduction.
// Not here: the cross-entropy itself (llm_head computes token_loss at label_positions).
#pragma once

#include <torch/torch.h>

#include <string>

#include "core/choices.h"

namespace omnibal::models {

/// loss.reduction (core/choices.h).
using ::omnibal::LossReduction;

/// "token" | "sample" | "square"; throws omnibal::Error naming `key` otherwise.
inline LossReduction parse_loss_reduction(const std::string& name,
                                          const std::string& key = "loss.reduction") {
  return parse_choice<LossReduction>(name, key);
}
inline std::string loss_reduction_name(LossReduction reduction) { return choice_name(reduction); }

/// Per-label-token weights w_t [K] float32 for label positions `label_positions` [K] int64
/// (ascending pack positions, as label_targets() / UnitState::label_positions give them) of a
/// pack whose samples are delimited by `cu_seqlens` [n + 1] (CPU, int64 or int32).
/// Throws omnibal::Error on a position outside the pack.
torch::Tensor token_weights(const torch::Tensor& label_positions, const torch::Tensor& cu_seqlens,
                            LossReduction reduction);

/// This pack's contribution to the global normaliser: sum_t w_t (double, on the CPU). For
/// token, the label-token count; for sample, the number of samples with labels.
double loss_normaliser(const torch::Tensor& label_positions, const torch::Tensor& cu_seqlens,
                       LossReduction reduction);

/// A pack's share of the loss before global normalisation.
struct ReducedLoss {
  torch::Tensor weighted_sum;  ///< [] float32, sum_t w_t * l_t, differentiable
  double normaliser = 0.0;     ///< sum_t w_t (loss_normaliser())
};

/// token_loss [K] (per-token cross-entropy at `label_positions`, llm_head's token_loss) reduced
/// with `reduction`. The global loss is the sum of weighted_sum over every micro-batch of every
/// DP rank divided by the all-reduced sum of normaliser.
ReducedLoss reduce_loss(const torch::Tensor& token_loss, const torch::Tensor& label_positions,
                        const torch::Tensor& cu_seqlens, LossReduction reduction);

}  // namespace omnibal::models
