// NonFiniteGuard: the trainer's check for a NaN / Inf loss or gradient norm before the optimizer
// step (Megatron's check of the loss and the gradient norm, `train.on_nonfinite`). Every rank
// reports what it sees of the step - the last stage its loss, every rank whether its part of the
// reduced gradient (the sum of squares it adds to the norm, DistributedOptimizer::local_grad_sq)
// is finite - and ONE world all-reduce (min over two int64) tells every rank the lowest world
// rank that saw a non-finite loss and the lowest that saw non-finite gradients, so all ranks take
// the same decision at the same step:
//   - stop (default): throw an omnibal::Error naming the step, what was not finite and where
//     ("step 2 (progress line 3/3): the gradient norm is nan (non-finite gradients first on
//     stage 1, dp rank 0, tp rank 0, world rank 1); nothing of the step was applied ...");
//   - skip: the step is not applied (DistributedOptimizer::skip_step: master weights, moments,
//     parameters and AdamW's step counter stay as they were); at most `train.max_nonfinite_skips`
//     steps in a row, the next non-finite one stops the run with an error saying so; a finite
//     step resets the run of skips.
// The decision (decide) is pure and tested without processes; check() adds the all-reduce.
// Not here: what the trainer does with the verdict (train/trainer.cpp calls skip_step or clip +
// step), the checkpoint's own refusal of non-finite tensors (checkpoint/tensor_finiteness.h).
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "comm/communicator.h"
#include "comm/process_grid.h"
#include "core/choices.h"

namespace omnibal::train {

/// How a scalar is not finite; kFinite for an ordinary number.
enum class Finiteness : int64_t { kFinite = 0, kNan = 1, kPosInf = 2, kNegInf = 3 };

/// The class of `v`.
Finiteness finiteness(double v);
/// "nan", "inf", "-inf" or "finite".
const char* finiteness_name(Finiteness f);

/// What this rank saw of one step, before the optimizer step.
struct StepObservation {
  bool has_loss = false;     ///< the rank computes the loss (a last-stage rank)
  double loss = 0;           ///< its part of the loss (sum of w_t * l_t over its micro-batches)
  double local_grad_sq = 0;  ///< its part of the gradient norm's sum of squares (before reducing)
  double grad_norm = 0;      ///< the global gradient norm (the same on every rank)
};

/// The world's agreement about one step: the lowest world rank that saw each problem and what it
/// saw (rank -1: none did), and the global gradient norm.
struct StepFindings {
  int loss_rank = -1;
  Finiteness loss = Finiteness::kFinite;
  int grad_rank = -1;
  Finiteness grad = Finiteness::kFinite;
  double grad_norm = 0;
  /// True when the loss or the gradient norm is not finite anywhere.
  bool nonfinite() const {
    return loss_rank >= 0 || grad_rank >= 0 || finiteness(grad_norm) != Finiteness::kFinite;
  }
};

/// The two int64 this rank contributes to the min all-reduce: rank * 4 + class for a non-finite
/// loss / gradient part, world_size * 4 (larger than any rank's) when finite.
std::array<int64_t, 2> encode_observation(const StepObservation& mine, int world_rank,
                                          int world_size);
/// The findings from the all-reduced (min) pair of encode_observation and the global norm.
StepFindings decode_findings(const std::array<int64_t, 2>& reduced, int world_size,
                             double grad_norm);

/// What the trainer does with a step.
enum class StepVerdict { kApply, kSkip };

/// Decides, step by step, whether the optimizer applies a step (see the file comment).
class NonFiniteGuard {
 public:
  /// `policy` train.on_nonfinite, `max_skips` train.max_nonfinite_skips (>= 1), `total_steps`
  /// train.steps (for the progress-line step in messages), `grid` names a world rank's stage /
  /// dp / tp coordinates in messages.
  NonFiniteGuard(OnNonFinite policy, int max_skips, int64_t total_steps, comm::ProcessGrid grid);

  /// Pure: kApply for a finite step (resets the run of skips), kSkip under skip within the limit.
  /// Throws omnibal::Error naming the step, the quantity, the value and the rank under stop, or
  /// when a skip would make more than max_skips in a row.
  StepVerdict decide(int64_t step, const StepFindings& findings);
  /// Collective over `world` (every rank of the job, once per step, before the optimizer
  /// step): one all-reduce of this rank's observation, then decide(). Rank 0 logs each skip.
  StepVerdict check(int64_t step, const StepObservation& mine, comm::Communicator& world);

  /// Steps skipped in a row up to the last decided one.
  int consecutive_skips() const { return consecutive_; }
  /// Steps skipped since the guard was made (this launch).
  int64_t skipped() const { return skipped_; }
  /// "the gradient norm is nan (non-finite gradients first on stage 1, ...)" for `findings`.
  std::string describe(const StepFindings& findings) const;

 private:
  std::string place(int world_rank) const;

  OnNonFinite policy_;
  int max_skips_;
  int64_t total_steps_;
  comm::ProcessGrid grid_;
  int consecutive_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace omnibal::train
