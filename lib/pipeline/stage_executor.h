// StageExecutor: runs one pipeline stage of one DP replica by interpreting the 1F1B instruction
// list of lib/schedule (the same lists the pipeline simulator walks). For each micro-batch it
// runs the forward of this stage's units, sends the output activation with a header to the next
// stage, receives the activation gradient back and runs the backward, and sends the input
// gradient to the previous stage. Sends are non-blocking (paired isend/irecv through
// comm::TensorMessenger, so both neighbours can send large tensors at once); receives block
// under the comm.timeout_s watchdog. What goes over the wire is UnitState's hidden tensor plus
// its side tensor (ids, positions, labels, cu_seqlens, image flags), so only the first stage
// needs a materialised pack; the loss is computed on the last stage (the term a hook gives, by
// default the token cross-entropy sum) and scaled by a factor the trainer gives (1 / the global
// batch's loss normaliser, lib/train/loss_normaliser.h).
// Not here: the optimizer, gradient clipping, data loading (lib/train); the DP all-reduce is a
// callback run at the ReduceGrads instruction.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <optional>
#include <vector>

#include "comm/tensor_message.h"
#include "models/pipeline_unit.h"
#include "schedule/instruction.h"

namespace omnibal::pipeline {

/// Wall-clock seconds one stage spent in one step.
struct StageTimes {
  double forward_s = 0;   ///< forward of this stage's units (recomputation excluded)
  double backward_s = 0;  ///< backward (recomputed forwards included)
  double idle_s = 0;      ///< blocked in receives and in waiting for sends (pipeline bubble)
  double reduce_s = 0;    ///< in the ReduceGrads callback (DP all-reduce)
};

/// What one step produced on this stage.
struct StageStepResult {
  StageTimes times;
  double loss_sum = 0;  ///< last stage: sum of token cross-entropies over its micro-batches
  /// last stage: sum over its micro-batches of the backpropagated term before loss_scale
  /// (StepHooks::loss_term; == loss_sum without one)
  double loss_term_sum = 0;
  int64_t label_count = 0;  ///< last stage: label tokens over its micro-batches
  /// Last stage: loss sum and label tokens of each micro-batch, in micro-batch order.
  std::vector<std::pair<double, int64_t>> micro_batches;
};

/// Hooks of one step (all optional).
struct StepHooks {
  /// Called with ("forward" | "backward", micro-batch) before each Forward / Backward; throws to
  /// inject a failure (debug.fail_at).
  std::function<void(const char* where, int micro_batch)> before_op;
  /// Called after each micro-batch's backward (bf16: the optimizer adds the parameters' bf16
  /// gradients into its fp32 main gradient).
  std::function<void(int micro_batch)> after_backward;
  /// Runs at the ReduceGrads instruction (the DP gradient all-reduce).
  std::function<void()> reduce_grads;
  /// Last stage: the differentiable scalar a micro-batch backpropagates (times loss_scale), from
  /// its kLoss state, e.g. a loss.reduction's weighted sum; default: the state's loss_sum.
  std::function<torch::Tensor(const models::UnitState& out)> loss_term;
};

/// Executes this rank's stage. Not thread-safe; one instance per rank.
class StageExecutor {
 public:
  /// `units` are this stage's units in model order; `pipe` talks to the neighbouring stages
  /// (peers are stage indices; may be null when stages == 1).
  StageExecutor(std::vector<models::UnitPtr> units, int stage, int stages,
                comm::TensorMessenger* pipe, torch::Device device = torch::kCPU);

  /// Runs `program` (this stage's 1F1B list for m micro-batches) up to and including
  /// ReduceGrads; OptimizerStep is left to the caller. `packs` holds this rank's m packs on the
  /// first stage (ignored elsewhere). The last stage backpropagates loss_scale times
  /// hooks.loss_term (default loss_sum) of each micro-batch.
  /// Gradients accumulate into the units' parameters (the caller zeroes them).
  /// Throws omnibal::Error on a header mismatch, a timeout, or a program that is not a valid
  /// 1F1B list (e.g. Backward before Forward).
  StageStepResult run_step(const std::vector<schedule::Instruction>& program,
                           const std::vector<models::PackBatch>& packs, double loss_scale,
                           const StepHooks& hooks = {});

  /// Forward only, no autograd (evaluation): stage 0 starts from `pack`, later stages receive
  /// micro-batch `index`'s activation, non-last stages send their output on (the send is
  /// waited for before returning). Returns the last stage's kLoss state, nullopt elsewhere.
  std::optional<models::UnitState> forward_only(int index, const models::PackBatch* pack);

  bool is_first() const { return stage_ == 0; }
  bool is_last() const { return stage_ == stages_ - 1; }
  const std::vector<models::UnitPtr>& units() const { return units_; }

 private:
  struct InFlight {
    torch::Tensor input;        ///< received hidden (leaf with requires_grad), not on stage 0
    models::UnitState output;   ///< this stage's output state (kLoss on the last stage)
    torch::Tensor output_grad;  ///< gradient of output.hidden from the next stage
    torch::Tensor input_grad;   ///< gradient to send to the previous stage
  };
  models::UnitState input_state(int mb, const models::PackBatch* pack, bool grad);
  torch::Tensor receive_activation(int mb);
  void send(comm::MessageKind kind, int mb, std::vector<torch::Tensor> tensors, int peer);
  void forward(int mb, const models::PackBatch* pack, StageStepResult& result, double scale,
               const StepHooks& hooks);
  void backward(int mb, double scale);
  comm::MessageHeader expected_activation(int mb) const;

  std::vector<models::UnitPtr> units_;
  int stage_, stages_;
  comm::TensorMessenger* pipe_;
  torch::Device device_;
  std::vector<InFlight> flight_;
  std::vector<torch::Tensor> received_;  ///< activation hidden/side per mb until Forward
  std::vector<torch::Tensor> received_side_;
  std::vector<comm::Request> sends_;
  double idle_s_ = 0;
};

}  // namespace omnibal::pipeline
