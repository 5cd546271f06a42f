// StageExecutor: runs one pipeline stage of one DP replica by interpreting its instruction list
// of lib/schedule (1F1B, interleaved 1F1B, ZB-H1 or ZB-V: the same lists the simulator walks). For
// each micro-batch it
// runs the forward of this stage's units, sends the output activation with a header to the next
// stage, receives the activation gradient back and runs the backward, and sends the input
// gradient to the previous stage. Sends are non-blocking (paired isend/irecv through
// comm::TensorMessenger, so both neighbours can send large tensors at once); receives block
// under the comm.timeout_s watchdog. What goes over the wire is UnitState's hidden tensor plus
// its side tensor (ids, positions, labels, cu_seqlens, image flags), so only the first stage
// needs a materialised pack; the loss is computed on the last stage (the term a hook gives, by
// default the token cross-entropy sum) and scaled by a factor the trainer gives (1 / the global
// batch's loss normaliser, lib/train/loss_normaliser.h).
// Interleaved 1F1B: the stage holds v model chunks (virtual stages k = c * P + stage); chunk c's
// input comes from virtual stage k - 1 on rank (k - 1) % P and its output goes to k + 1, each
// message naming its chunk; a hand-over between two chunks of this rank (P == 1) stays local.
// ZB-V: two chunks in a V (schedule::ChunkLayout::kV: rank s holds virtual stages s and
// 2P - 1 - s), every peer found through schedule::stage_of_virtual; the hand-over P-1 -> P on
// rank P - 1 stays local, and the model's last chunk (the loss) is on rank 0 (is_last()).
// Received tensors are kept per (kind, chunk, micro-batch) until their compute, since a list may
// receive ahead of an earlier compute (NCCL's per-peer order, lib/schedule/README.md). Under
// ZB-V a recomputed unit's weight gradients are computed in its BackwardInput, not deferred
// (models/weight_grad_store.h, WeightGradStore::set_defer_recomputed).
// ZB-H1: Forward and BackwardInput run while the stage's WeightGradStore records
// (models/weight_grad_store.h), so BackwardInput computes the input gradient (and the non-linear
// parameters' gradients) and files each linear layer's (x, dy, W); BackwardWeight{mb} computes
// those dW. Between the two the micro-batch keeps each linear's input and output gradient; the
// rest of its graph is freed at BackwardInput.
// DP overlap (comm.overlap): from the program, final_grad_marks() finds each chunk's last
// gradient-producing instructions; StepHooks::final_grads is called around them, so the
// optimizer can reduce each gradient bucket as soon as its last gradient of the step exists
// (lib/train/distributed_optimizer.h), and StepHooks::before_chunk_forward before each chunk's
// first Forward (the ZeRO-1 parameter all-gather is waited for there).
// Not here: the optimizer, gradient clipping, data loading (lib/train); the DP all-reduce is a
// callback run at the ReduceGrads instruction.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <map>
#include <set>
#include <tuple>
#include <optional>
#include <vector>

#include "comm/tensor_message.h"
#include "core/choices.h"
#include "models/pipeline_unit.h"
#include "models/weight_grad_store.h"
#include "schedule/instruction.h"

namespace omnibal::pipeline {

/// Wall-clock seconds one stage spent in one step.
struct StageTimes {
  double forward_s = 0;   ///< forward of this stage's units (recomputation excluded)
  double backward_s = 0;  ///< backward (recomputed forwards and ZB's W included)
  double weight_s = 0;    ///< ZB-H1, ZB-V: of backward_s, the deferred weight gradients (W)
  double idle_s = 0;      ///< blocked in receives and in waiting for sends (pipeline bubble)
  /// DP communication: the ReduceGrads callback (DP all-reduce), and under comm.overlap the
  /// bucket launches of StepHooks::final_grads (taken out of backward_s / weight_s) and the
  /// waits of StepHooks::before_chunk_forward
  double reduce_s = 0;
};

/// One timed span of a step on this stage, for traces (train/step_trace.h): `name` is forward,
/// backward, backward_input, backward_weight, recv (blocked in a receive), send (posting),
/// send_wait (waiting for this step's sends) or dp_reduce (the ReduceGrads callback, and under
/// comm.overlap each bucket's launch in or after a backward); times in steady-clock
/// microseconds.
struct TraceSpan {
  const char* name = "";
  int micro_batch = -1;  ///< -1 for send_wait and dp_reduce
  int chunk = 0;
  double start_us = 0, end_us = 0;
};

/// The steady clock in microseconds (the time base of TraceSpan).
double trace_clock_us();

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
  std::vector<TraceSpan> spans;  ///< every instruction's span when StepHooks::trace is set
};

/// What one instruction of a program means to the DP gradient reduction (final_grad_marks()).
struct FinalGradMark {
  /// Every gradient this instruction produces is the step's last of its parameter: the last
  /// Backward / BackwardInput of its chunk when no Backward follows it (non-linear parameters,
  /// and linear weights unless deferred to a W), or the chunk's last Backward / BackwardWeight
  /// when no Backward / BackwardInput follows it (the linear weights).
  bool marks = false;
  /// The chunk's last gradient-producing instruction (Backward, BackwardInput, BackwardWeight):
  /// after it every parameter of the chunk has its gradient of the step.
  bool chunk_done = false;
};

/// Per instruction of `program` (one stage's list, any schedule), its FinalGradMark: 1F1B and
/// interleaved mark each chunk's last Backward (marks and chunk_done); ZB-H1 / ZB-V each chunk's last
/// BackwardInput (marks) and last BackwardWeight (marks and chunk_done).
std::vector<FinalGradMark> final_grad_marks(const std::vector<schedule::Instruction>& program);

/// StepHooks::final_grads's argument: where the stage is in one of a chunk's instructions with
/// a FinalGradMark.
struct FinalGrads {
  int chunk = 0;
  /// true: called before a `marks` instruction (every gradient produced until the call with
  /// begin false is the step's last of its parameter); false: after the instruction and its
  /// after_backward hook.
  bool begin = true;
  bool chunk_done = false;  ///< with begin false: FinalGradMark::chunk_done
};

/// An interval of DP communication (a bucket's launch), steady-clock microseconds.
struct CommInterval {
  double start_us = 0, end_us = 0;
};

/// Hooks of one step (all optional).
struct StepHooks {
  /// Called with (kForward, micro-batch) before each Forward and (kBackward, micro-batch) before
  /// each Backward and BackwardInput; throws to inject a failure (debug.fail_at).
  std::function<void(FailWhere where, int micro_batch)> before_op;
  /// Called after each Backward, BackwardInput and BackwardWeight (bf16: the optimizer folds any
  /// bf16 gradient its post-accumulate hooks have not already folded into the fp32 main gradient).
  std::function<void(int micro_batch)> after_backward;
  /// Runs at the ReduceGrads instruction (the DP gradient all-reduce).
  std::function<void()> reduce_grads;
  /// comm.overlap: called before (begin) each instruction whose FinalGradMark::marks is set and
  /// after (begin false) each with marks or chunk_done, so that the optimizer launches each
  /// bucket's reduction once its gradients are final. Returns the DP communication done since
  /// the previous call (in post-accumulate-grad hooks during the instruction, and in the call):
  /// counted in reduce_s instead of backward_s, traced as dp_reduce spans.
  std::function<std::vector<CommInterval>(const FinalGrads& at)> final_grads;
  /// Called before each chunk's first Forward of the step (after its RecvActivation): ZeRO-1
  /// with comm.overlap waits there for the all-gather of the chunk's parameters. Its time
  /// counts in reduce_s.
  std::function<void(int chunk)> before_chunk_forward;
  /// Last stage: the differentiable scalar a micro-batch backpropagates (times loss_scale), from
  /// its kLoss state, e.g. a loss.reduction's weighted sum; default: the state's loss_sum.
  std::function<torch::Tensor(const models::UnitState& out)> loss_term;
  /// Called at the end of each Forward, Backward, BackwardInput and BackwardWeight, before its
  /// time is read: runtime.sync_timers on CUDA waits there for the device
  /// (train::timer_sync), so forward_s, backward_s, weight_s, idle_s and the trace spans are
  /// device time rather than the time to queue kernels. Unset: the host runs ahead.
  std::function<void()> settle;
  /// Record a TraceSpan per instruction in StageStepResult::spans.
  bool trace = false;
};

/// Executes this rank's stage. Not thread-safe; one instance per rank.
class StageExecutor {
 public:
  /// `units` are this stage's units in model order; `pipe` talks to the neighbouring stages
  /// (peers are stage indices; may be null when stages == 1).
  StageExecutor(std::vector<models::UnitPtr> units, int stage, int stages,
                comm::TensorMessenger* pipe, torch::Device device = torch::kCPU);
  /// Several chunks: `chunks[c]` are the units of virtual stage
  /// schedule::virtual_stage(c, stage, stages, layout), in model order (kLoop: interleaved
  /// 1F1B's c * stages + stage; kV: ZB-V's stage and 2 * stages - 1 - stage).
  StageExecutor(std::vector<std::vector<models::UnitPtr>> chunks, int stage, int stages,
                comm::TensorMessenger* pipe, torch::Device device = torch::kCPU,
                schedule::ChunkLayout layout = schedule::ChunkLayout::kLoop);

  /// Runs `program` (this stage's list for m micro-batches, schedules.h) up to and including
  /// ReduceGrads; OptimizerStep is left to the caller. `packs` holds this rank's m packs on the
  /// first stage (ignored elsewhere). The last stage backpropagates loss_scale times
  /// hooks.loss_term (default loss_sum) of each micro-batch.
  /// Gradients accumulate into the units' parameters (the caller zeroes them).
  /// Throws omnibal::Error on a header mismatch, a timeout, or a program that is not a valid
  /// list (e.g. Backward before Forward, a chunk this stage does not hold, a BackwardWeight
  /// without its BackwardInput, deferred weight gradients left at ReduceGrads).
  StageStepResult run_step(const std::vector<schedule::Instruction>& program,
                           const std::vector<models::PackBatch>& packs, double loss_scale,
                           const StepHooks& hooks = {});

  /// Forward only, no autograd (evaluation) of micro-batch `index` through every chunk of this
  /// stage in turn: virtual stage 0 starts from `pack`, the others receive their input, and
  /// every chunk but the model's last sends its output on (each send waited for). Returns the
  /// last virtual stage's kLoss state, nullopt elsewhere.
  std::optional<models::UnitState> forward_only(int index, const models::PackBatch* pack);

  /// Holds the model's first virtual stage (its packs carry pixels and ids).
  bool is_first() const { return rank_of(0) == stage_; }
  /// Holds the model's last virtual stage (the loss): stage P - 1, or stage 0 under ZB-V's V.
  bool is_last() const { return rank_of(last_virtual()) == stage_; }
  /// Every unit of this stage, chunk after chunk.
  const std::vector<models::UnitPtr>& units() const { return all_units_; }
  int chunks() const { return static_cast<int>(chunks_.size()); }

 private:
  struct InFlight {
    torch::Tensor input;        ///< received hidden (leaf with requires_grad), not on stage 0
    models::UnitState output;   ///< this stage's output state (kLoss on the last stage)
    torch::Tensor output_grad;  ///< gradient of output.hidden from the next stage
    torch::Tensor input_grad;   ///< gradient to send to the previous stage
    torch::Tensor received, received_side;  ///< the activation received, until Forward
    bool forwarded = false, input_done = false;
  };
  int virtual_of(int chunk) const {
    return schedule::virtual_stage(chunk, stage_, stages_, layout_);
  }
  /// The pipeline rank holding virtual stage k.
  int rank_of(int k) const { return schedule::stage_of_virtual(k, stages_, layout_); }
  int last_virtual() const { return stages_ * chunks() - 1; }
  InFlight& slot(int chunk, int mb);
  models::UnitState input_state(int chunk, int mb, const models::PackBatch* pack, bool grad);
  void receive_activation(int chunk, int mb);
  void receive_grad(int chunk, int mb);
  void send(comm::MessageKind kind, int chunk, int mb, std::vector<torch::Tensor> tensors,
            int to_virtual);
  void forward(int chunk, int mb, const models::PackBatch* pack, StageStepResult& result,
               double scale, const StepHooks& hooks);
  void backward(int chunk, int mb);
  /// run_step's parts: the step's bookkeeping from its program, then one instruction each.
  void start_step(const std::vector<schedule::Instruction>& program, size_t packs);
  void execute(size_t index, const schedule::Instruction& ins,
               const std::vector<models::PackBatch>& packs, double loss_scale,
               const StepHooks& hooks, StageStepResult& result);
  /// StepHooks::final_grads around instruction `index` (when it has a FinalGradMark): begin
  /// before it, end after it, the returned launches moved from backward_s (and weight_s for a
  /// W) into reduce_s and traced.
  void begin_final(size_t index, int chunk, const StepHooks& hooks, StageTimes& times);
  void end_final(size_t index, int chunk, const StepHooks& hooks, StageTimes& times, bool weight);
  void count_comm(const std::vector<CommInterval>& work, int chunk, double inside_before_us,
                  StageTimes& times, bool weight);
  void send_activation(int chunk, int mb);
  void send_grad(int chunk, int mb);
  void backward_weight(int chunk, int mb, StageTimes& times, const StepHooks& hooks);
  void reduce_grads(StageTimes& times, const StepHooks& hooks, double start_us);
  comm::MessageHeader expected_activation(int chunk, int mb) const;
  int store_key(int chunk, int mb) const { return chunk * micro_batches_ + mb; }

  std::vector<std::vector<models::UnitPtr>> chunks_;
  std::vector<models::UnitPtr> all_units_;
  int stage_, stages_;
  comm::TensorMessenger* pipe_;
  torch::Device device_;
  schedule::ChunkLayout layout_ = schedule::ChunkLayout::kLoop;
  int micro_batches_ = 0;
  std::vector<std::vector<InFlight>> flight_;  ///< [chunk][micro-batch]
  /// Hand-overs between two chunks of this rank (P == 1): (kind, receiving chunk, mb) -> tensors.
  std::map<std::tuple<int, int, int>, std::vector<torch::Tensor>> local_;
  std::vector<comm::Request> sends_;
  c10::intrusive_ptr<models::WeightGradStore> store_;  ///< ZB's deferred weight gradients
  bool split_ = false;        ///< the program splits backwards (BackwardInput / BackwardWeight)
  std::set<int> split_keys_;  ///< store_key of every (chunk, mb) with a BackwardInput
  bool records(int chunk, int mb) const { return split_keys_.count(store_key(chunk, mb)) > 0; }
  std::vector<FinalGradMark> final_marks_;  ///< this step's program, per instruction
  std::vector<bool> first_forward_;         ///< per instruction: its chunk's first Forward
  double idle_s_ = 0;
  std::vector<TraceSpan>* spans_ = nullptr;  ///< this step's spans (StepHooks::trace), or null
  void span(const char* name, int mb, int chunk, double start_us) {
    if (spans_) spans_->push_back({name, mb, chunk, start_us, trace_clock_us()});
  }
};

}  // namespace omnibal::pipeline
