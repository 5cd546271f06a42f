// Gradient synchronisation of one pipeline stage: the DP all-reduce in buckets (flattened
// groups of gradients, so a stage with many small tensors makes few collective calls), and the
// global gradient norm across every stage (sum of squares all-reduced over the pipeline after the
// DP reduce, so each parameter counts once) with clipping.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "comm/communicator.h"

namespace omnibal::train {

/// Sums the gradients of `params` over `dp_group` in place, in buckets of at most
/// `bucket_bytes` (a single larger tensor is its own bucket). Parameters without a gradient get
/// a zero gradient first so every DP rank reduces the same buckets. No-op for one rank.
void all_reduce_gradients(const std::vector<torch::Tensor>& params, comm::Communicator& dp_group,
                          int64_t bucket_bytes = 8 << 20);

/// L2 norm of all gradients of the whole model: local sum of squares all-reduced over
/// `pipeline` (after the DP reduce every DP rank holds the same stage gradients).
double global_grad_norm(const std::vector<torch::Tensor>& params, comm::Communicator* pipeline);

/// Scales gradients by min(1, max_norm / (norm + 1e-6)); returns the factor. No-op when
/// max_norm <= 0.
double clip_gradients(const std::vector<torch::Tensor>& params, double norm, double max_norm);

}  // namespace omnibal::train
