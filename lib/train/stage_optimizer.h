// StageOptimizer: what the trainer, checkpoints and evaluation ask of one stage's optimizer,
// whatever train.shard holds the state: DistributedOptimizer (none: everything on every DP rank;
// optimizer: ZeRO-1) or FullShard (full: ZeRO-3 / FSDP, parameters sharded too). The step is
//   zero_grad(); <the executor's step: gradients accumulate, reduced over DP>;
//   norm = grad_norm(scope); clip(norm, max); step(lr)   (or skip_step())
// How gradients reach the optimizer during the backward (hooks, buckets, reduce-scatters) is each
// implementation's own; StageRuntime wires it into the executor's hooks.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/choices.h"
#include "train/adamw.h"

namespace omnibal::train {

/// Precision, sharding and bucketing of a stage's optimizer.
struct OptimizerOptions {
  AdamWOptions adam;
  Precision precision = Precision::kFp32;     ///< dtype of the parameters (train.precision)
  Precision reduce_dtype = Precision::kFp32;  ///< DP reduction dtype (comm.grad_reduce_dtype)
  bool zero1 = false;                         ///< shard state over DP (train.shard optimizer)
  int64_t bucket_bytes = 8 << 20;             ///< fp32 gradient bytes per bucket
  /// Parameters placed first, each in a bucket of its own (the tied embedding, so that both of
  /// its stages reduce it alike and hold the same shard of it).
  std::vector<std::string> own_bucket;
  /// bf16: fold each parameter's gradient into the main gradient from a post-accumulate-grad
  /// hook as autograd produces it (distributed_optimizer.h); false, or on LibTorch < 2.1:
  /// accumulate_grads() folds them after each backward.
  bool fold_in_backward = true;
  /// comm.overlap (effective at DP > 1): launch each bucket's reduction non-blocking once its
  /// gradients are final, wait in reduce_grads(); ZeRO-1's all-gather waited in wait_params().
  bool overlap = false;
  /// Overlap: number of model chunks of the stage (interleaved: virtual stages of this rank).
  int chunks = 1;
  /// Overlap: the chunk of each parameter by name, in [0, chunks); a name not listed: chunk 0.
  std::map<std::string, int> chunk_of;
  /// Overlap: parameters final only once every chunk is (one backward may reach them through
  /// two AccumulateGrad calls, or two chunks use them: a tied embedding with its head here).
  std::set<std::string> late;
};

/// This rank's place in its DP group (the layout needs only these; the group is used to reduce).
struct DpShard {
  int rank = 0;
  int size = 1;
};

/// The parameter and activation dtype of train.precision: float32 or bfloat16.
torch::Dtype precision_dtype(Precision precision);

/// The factor min(1, max_norm / (norm + 1e-6)) that clips a gradient of global L2 norm `norm`
/// (1 when max_norm <= 0). Throws omnibal::Error naming `who` on a NaN / Inf norm: the factor
/// would be 1 or 0 and pass the non-finite gradient on, so such a step must be skipped or
/// stopped before (train/nonfinite_guard.h).
double clip_coefficient(double norm, double max_norm, const char* who);

/// Bytes of model state one rank holds between computations, counted from the tensors.
struct ShardBytes {
  int64_t params = 0;     ///< parameters (ZeRO-3: the shards, plus full buffers gathered now)
  int64_t grads = 0;      ///< fp32 gradient accumulators (main gradient)
  int64_t optimizer = 0;  ///< fp32 master weights (when a copy) and AdamW moments
};

/// Where the model's gradient lies beyond this DP group, for its global norm: the groups the
/// norm's sum of squares is summed over after DP (the pipeline, then TP; only groups of size
/// > 1), and the parameters this rank leaves out so that each counts once (a tied head's second
/// copy; on TP ranks > 0, the parameters whole on every TP rank).
struct GradNormScope {
  std::vector<comm::Communicator*> groups;  ///< summed over in this order; never null
  std::set<std::string> exclude;            ///< parameter names this rank does not count
};

/// One stage's optimizer as the trainer drives it (see the file comment).
class StageOptimizer {
 public:
  virtual ~StageOptimizer() = default;

  /// train.shard this optimizer implements.
  virtual ShardMode shard_mode() const = 0;
  virtual const OptimizerOptions& options() const = 0;

  /// Drops the step's gradients: call before each step's first backward.
  virtual void zero_grad() = 0;
  /// Collective over DP and every group of `scope`: the L2 norm of the step's reduced gradient
  /// of the whole model (GradNormScope says which parameters this rank counts).
  virtual double grad_norm(const GradNormScope& scope) = 0;
  /// This rank's part of the last grad_norm()'s sum of squares, before the reductions: not
  /// finite exactly when this rank's counted gradient holds a NaN / Inf.
  virtual double local_grad_sq() const = 0;
  /// Scales the reduced gradient by min(1, max_norm / (norm + 1e-6)); returns the factor.
  /// No-op when max_norm <= 0. Throws omnibal::Error on a NaN / Inf norm.
  virtual double clip(double norm, double max_norm) = 0;
  /// AdamW at learning rate `lr` (adamw.h), then the parameters updated on every rank that uses
  /// them. Collective over DP when the state is sharded.
  virtual void step(double lr) = 0;
  /// Instead of step(): the gradients dropped, nothing applied, no counter advanced. Every rank
  /// must skip the same step.
  virtual void skip_step() = 0;
  /// Updates done so far (AdamW's bias-correction counter).
  virtual int64_t steps() const = 0;
  virtual void set_steps(int64_t steps) = 0;

  /// Waits for parameter updates still in flight (ZeRO-1's overlapped all-gather) of `chunk`
  /// (-1: every chunk): call before anything reads the parameters. No-op when none is.
  virtual void wait_params(int chunk = -1) = 0;
  /// Whether the stage's parameter tensors hold their values between computations (false under
  /// ZeRO-3: they are views of memory gathered only around a unit's compute).
  virtual bool params_resident() const = 0;

  /// Collective over DP: whole fp32 tensors by name: "<name>" the master weight (frozen
  /// parameters' values, where the optimizer holds them: params_resident() false),
  /// "<name>#exp_avg", "<name>#exp_avg_sq" the moments. With `keep` false the result is empty
  /// (DP ranks that do not write a checkpoint join the gathers only).
  virtual std::map<std::string, torch::Tensor> state_tensors(bool keep = true) = 0;
  /// The names state_tensors() returns.
  virtual std::vector<std::string> state_names() const = 0;
  /// Takes master weights and moments by name (any float dtype, whole shapes) into this rank's
  /// part, and the parameters from the master weights (and, when !params_resident(), frozen
  /// parameters by their plain name). Throws omnibal::Error naming a missing name or a size
  /// mismatch.
  virtual void load_state_tensors(const std::map<std::string, torch::Tensor>& state) = 0;

  /// Bytes of optimizer state on this rank: moments, plus master weights when they are a copy.
  virtual int64_t state_bytes() const = 0;
  /// Bytes of this rank's fp32 gradient accumulator.
  virtual int64_t main_grad_bytes() const = 0;
};

}  // namespace omnibal::train
