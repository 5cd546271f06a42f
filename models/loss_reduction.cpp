#include "models/loss_reduction.h"

#include "core/error.h"

#include <cmath>

namespace omnibal::models {

torch::Tensor token_weights(const torch::Tensor& label_positions, const torch::Tensor& cu_seqlens,
                            LossReduction reduction) {
  const torch::Tensor cu = cu_seqlens.to(torch::kCPU, torch::kLong).contiguous();
  const torch::Tensor pos = label_positions.to(torch::kCPU, torch::kLong).contiguous();
  const int64_t samples = cu.numel() - 1;
  OMNIBAL_CHECK(samples >= 0, "cu_seqlens: expected at least one entry");
  const int64_t total = cu[samples].item<int64_t>();
  OMNIBAL_CHECK(pos.numel() == 0 ||
                    (pos.min().item<int64_t>() >= 0 && pos.max().item<int64_t>() < total),
                "label_positions: expected positions in [0, ", total, ") of the pack");
  // Sample of each label token, and label tokens per sample.
  const torch::Tensor sample =
      torch::searchsorted(cu, pos, /*out_int32=*/false, /*right=*/true) - 1;
  const torch::Tensor counts =
      torch::zeros({std::max<int64_t>(samples, 1)}, torch::kDouble)
          .index_add_(0, sample, torch::ones({pos.numel()}, torch::kDouble));
  const torch::Tensor n = counts.index_select(0, sample);
  switch (reduction) {
    case LossReduction::kToken: return torch::ones({pos.numel()}, torch::kFloat);
    case LossReduction::kSample: return (1.0 / n).to(torch::kFloat);
    case LossReduction::kSquare: return torch::rsqrt(n).to(torch::kFloat);
  }
  OMNIBAL_FAIL("unreachable");
}

double loss_normaliser(const torch::Tensor& label_positions, const torch::Tensor& cu_seqlens,
                       LossReduction reduction) {
  return token_weights(label_positions, cu_seqlens, reduction)
      .to(torch::kDouble)
      .sum()
      .item<double>();
}

ReducedLoss reduce_loss(const torch::Tensor& token_loss, const torch::Tensor& label_positions,
                        const torch::Tensor& cu_seqlens, LossReduction reduction) {
  OMNIBAL_CHECK(token_loss.dim() == 1 && token_loss.numel() == label_positions.numel(),
                "reduce_loss: token_loss [", token_loss.numel(), "] must match label_positions [",
                label_positions.numel(), "]");
  const torch::Tensor w = token_weights(label_positions, cu_seqlens, reduction);
  ReducedLoss out;
  out.weighted_sum = (token_loss.to(torch::kFloat) * w.to(token_loss.device())).sum();
  out.normaliser = w.to(torch::kDouble).sum().item<double>();
  return out;
}

}  // namespace omnibal::models
