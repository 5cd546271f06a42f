// AdamW (Loshchilov & Hutter) over named parameters, with the state kept per parameter *name*
// so that a checkpoint written under one pipeline partition loads under any other (each stage
// saves and loads the moments of the parameters it holds). Decoupled weight decay applies only
// to matrices and embeddings (dim >= 2); norms, biases and layer scales are not decayed.
// Own implementation rather than torch::optim::AdamW because that keys its state by tensor
// identity, whose access differs between LibTorch versions; the update is the same formula.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

namespace omnibal::train {

/// Hyper-parameters (train.* keys).
struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.05;
};

/// AdamW over a fixed list of named parameters (only those with requires_grad).
class AdamW {
 public:
  AdamW(std::vector<std::pair<std::string, torch::Tensor>> params, AdamWOptions options);

  /// One update at learning rate `lr` (step counter += 1). Parameters without a gradient are
  /// skipped (their moments stay as they are).
  void step(double lr);
  /// Sets every gradient to zero (keeps the buffers).
  void zero_grad();

  /// Updates done so far (the bias-correction counter).
  int64_t steps() const { return steps_; }
  void set_steps(int64_t steps) { steps_ = steps; }
  /// Trainable parameters by name.
  const std::vector<std::pair<std::string, torch::Tensor>>& params() const { return params_; }
  /// Moments "<name>#exp_avg" and "<name>#exp_avg_sq" of every parameter (zeros before step 1).
  std::map<std::string, torch::Tensor> state_tensors() const;
  /// Names state_tensors() uses.
  std::vector<std::string> state_names() const;
  /// Copies moments in by name; throws omnibal::Error naming a missing name or a shape mismatch.
  void load_state_tensors(const std::map<std::string, torch::Tensor>& state);

 private:
  std::vector<std::pair<std::string, torch::Tensor>> params_;
  std::vector<torch::Tensor> exp_avg_, exp_avg_sq_;
  AdamWOptions options_;
  int64_t steps_ = 0;
};

}  // namespace omnibal::train
