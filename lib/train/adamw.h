// AdamW (Loshchilov & Hutter, "Decoupled Weight Decay Regularization") as one in-place update of
// a parameter slice from its gradient and moments; DistributedOptimizer (distributed_optimizer.h)
// applies it to each parameter's part of its state. Decoupled weight decay applies only to
// matrices and embeddings (dim >= 2); norms, biases and layer scales are not decayed.
// Own implementation rather than torch::optim::AdamW: that keys state by tensor identity (whose
// access differs between LibTorch versions) and cannot update a shard; the formula is the same
// (tests/train/adamw_test.cpp compares the two).
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace omnibal::train {

/// Hyper-parameters (train.* keys).
struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.05;
};

/// One AdamW update of step `step` (1-based, for the bias corrections) at learning rate `lr`, in
/// place on `param`, `exp_avg` and `exp_avg_sq` (fp32, same shape as `grad`); `decay` turns the
/// decoupled weight decay on (parameters of dim >= 2):
///   p *= 1 - lr * wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
///   p -= lr / (1 - b1^t) * m / (sqrt(v / (1 - b2^t)) + eps).
void adamw_update(torch::Tensor param, const torch::Tensor& grad, torch::Tensor exp_avg,
                  torch::Tensor exp_avg_sq, double lr, int64_t step, bool decay,
                  const AdamWOptions& options);

}  // namespace omnibal::train
