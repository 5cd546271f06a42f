// The global loss normaliser of one training step (loss.reduction, models/loss_reduction.h):
//   loss = sum over the global batch of w_t * l_t  /  N,   N = sum over the global batch of w_t
// with w_t = 1 (token), 1 / n_i (sample) or 1 / sqrt(n_i) (square; InternVL's len2weight), n_i
// the label tokens of sample i. The weights depend only on the labels, so the last stage of each
// DP rank sums its micro-batches' loss_normaliser() before any forward and one all-reduce over the
// world makes N (and the label-token count) identical on every rank and stage. Each micro-batch
// then backpropagates weighted_sum / N, so loss and gradients do not depend on packing, m, DP or
// PP. Only the last stage contributes (it is the one holding labels), so summing over the world
// is the DP sum.
// Not here: the weights and the weighted sums themselves (models/loss_reduction.h).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "models/loss_reduction.h"
#include "models/pack_batch.h"
#include "models/unit_state.h"

namespace omnibal::train {

/// Label tokens and normaliser of a set of packs (one rank's, or the global batch's).
struct LossNormaliser {
  int64_t label_tokens = 0;  ///< positions with a loss term (label_targets())
  double normaliser = 0.0;   ///< N = sum_t w_t (== label_tokens for token)
};

/// The sum over `packs` (labels and cu_seqlens are read; CPU) of label tokens and
/// loss_normaliser(label_targets(labels, cu_seqlens).first, cu_seqlens, reduction).
LossNormaliser local_normaliser(const std::vector<models::PackBatch>& packs,
                                models::LossReduction reduction);

/// Sums `local` over every rank of `world` (one float64 all-reduce of two values; ranks without
/// labels pass zeros). Collective.
LossNormaliser global_normaliser(const LossNormaliser& local, comm::Communicator& world);

/// The differentiable term one micro-batch backpropagates before scaling by 1 / N:
/// reduce_loss(out.token_loss, out.label_positions, out.cu_seqlens, reduction).weighted_sum
/// ([] float32). `out` is the last unit's kLoss state.
torch::Tensor micro_batch_loss_term(const models::UnitState& out, models::LossReduction reduction);

}  // namespace omnibal::train
