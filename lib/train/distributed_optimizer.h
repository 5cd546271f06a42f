// DistributedOptimizer: AdamW over one pipeline stage's trainable parameters with mixed precision
// and, optionally, ZeRO-1 (Megatron's distributed optimizer, DeepSpeed ZeRO stage 1).
//
// Layout. The stage's trainable parameters are packed, in order, into contiguous buckets of at
// most `bucket_bytes` (of fp32 gradient; a larger tensor is a bucket of its own; names listed in
// `own_bucket` come first, each alone), every bucket padded to a multiple of the DP size.
//   - param buffer (train.precision's dtype): the model's parameters are views into it;
//   - main gradient (fp32, Megatron's main_grad): fp32 parameters' .grad are views into it, so
//     autograd accumulates the step's micro-batches in fp32 in place. bf16 parameters: a
//     post-accumulate-grad hook on each (models/accumulate_grad_hook.h, LibTorch >= 2.1) adds
//     the bf16 .grad autograd has just written (one backward's uses of the parameter, summed)
//     into it in fp32 and frees it; the deferred W of ZB-H1 runs the same hook
//     (WeightGradStore::run). No bf16 gradient outlives its own accumulation: 2 bytes per
//     parameter fewer at the end of a backward than folding after it. accumulate_grads(),
//     called after each backward, folds any .grad still defined: all of them on LibTorch < 2.1
//     or with OptimizerOptions::fold_in_backward off. Both paths add the same bf16 gradient per
//     parameter per backward, so they are bitwise equal, except where one backward reaches a
//     parameter through two AccumulateGrad calls (a reentrant recomputed unit sharing it with
//     the rest of the graph: the tied embedding at PP 1 with llm_embed recomputed); the hook
//     then adds the two parts in fp32 where folding after the backward added their bf16 sum;
//   - state: per bucket, this DP rank's part of it (all of it without ZeRO-1, block dp_rank of
//     dp with it): AdamW moments exp_avg / exp_avg_sq in fp32, and fp32 master weights (bf16:
//     a copy; fp32: the parameters themselves).
// Step. reduce_grads(): each bucket of main gradient is all-reduced (ZeRO-1: reduce-scattered)
// over DP, in comm.grad_reduce_dtype; grad_norm(): the global L2 norm over this rank's reduced
// part, summed over DP (ZeRO-1) and the pipeline; clip(); step(): AdamW on this rank's part, the
// master weights copied into the param buffer, and (ZeRO-1) each bucket all-gathered over DP;
// or, for a step whose loss or gradient norm is not finite (train/nonfinite_guard.h decides on
// every rank alike), skip_step(): nothing applied, nothing of the state changed.
// Overlap (comm.overlap, OptimizerOptions::overlap, DP > 1; Megatron's overlap_grad_reduce /
// overlap_param_gather, PyTorch DDP's reducer). The stage executor tells the optimizer when a
// chunk's last gradient-producing instructions run (begin/end_final_grads, computed from the
// program: pipeline::final_grad_marks). A post-accumulate-grad hook on every parameter marks it
// final when it receives a gradient inside such a window, and once all parameters of a bucket
// are final the bucket's all-reduce (ZeRO-1: reduce-scatter) is launched non-blocking; at the
// chunk's end its parameters no micro-batch reached are final too. Buckets are launched in one
// fixed order, the last first (the backward's order), on every DP rank, as MPI and NCCL need;
// a bucket waits for those after it. reduce_grads() launches what is left and waits for all.
// "Receives a gradient": fp32 .grad then are not views into the main gradient but folded into
// it by the same hook as bf16's (the same fp32 additions, bitwise), so a hook call that brings
// nothing (a linear weight during ZB-H1's B, whose dW comes in W) is told apart. Parameters
// that one backward may reach twice (OptimizerOptions::late: a tied embedding with its head on
// this stage) are final only when every chunk is. Hooks running on another thread than the
// optimizer's (CUDA autograd's device threads) only mark; the launch follows at the window's
// end on the owner thread (MPI_THREAD_FUNNELED). Under ZeRO-1, step() launches each bucket's
// parameter all-gather non-blocking and wait_params() waits for them: before a chunk's first
// forward, and before anything reads the parameters. Results equal overlap off within float
// reordering (at DP 2 the sums are the same additions).
// The update is AdamW's formula (adamw.h) per parameter segment. Every optimised parameter
// steps every step: one that no micro-batch reached has a zero gradient, and its weight decay
// and momentum still apply (as DP > 1 did before and Megatron does). ZeRO-1 sums the norm in
// another order, and at DP > 2 the reduce-scatter may add in another order than the
// all-reduce: equal to plain DP within float reordering (tested to 1e-6).
// Checkpoints: state_tensors() gathers every moment and master weight by parameter name,
// unsharded fp32 (collective over DP); load_state_tensors() takes them under any DP size,
// ZeRO-1 setting or precision.
#pragma once

#include <torch/torch.h>

#include <map>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "core/choices.h"
#include "train/adamw.h"
#include "train/stage_optimizer.h"

namespace omnibal::train {

/// Mixed-precision AdamW with optional ZeRO-1 over one stage (see the file comment).
class DistributedOptimizer : public StageOptimizer {
 public:
  using NamedParams = std::vector<std::pair<std::string, torch::Tensor>>;

  /// Takes the parameters with requires_grad of `params` (dtype must be `options.precision`'s,
  /// all on one device), moves them into the param buffer and allocates gradients and state.
  /// `dp` reduces and gathers; it may be null when shard.size == 1. Throws omnibal::Error on a
  /// dtype or device mismatch or a DP size that disagrees with `dp`.
  DistributedOptimizer(const NamedParams& params, OptimizerOptions options, comm::Communicator* dp,
                       DpShard shard);
  /// Removes the post-accumulate-grad hooks it set (the parameters stay views of its buffer).
  ~DistributedOptimizer() override;
  /// Not copyable or movable: the parameters' hooks point at this instance's main gradient.
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  /// Zeroes the main gradient (and drops bf16 .grad).
  void zero_grad() override;
  /// bf16: adds every parameter's .grad still defined into the main gradient in fp32 and frees
  /// it. Call after each micro-batch's backward; a no-op when the hooks fold in the backward
  /// (folds_in_backward()). fp32: nothing to do (autograd accumulates into the views).
  void accumulate_grads();
  /// True when bf16 gradients are folded by post-accumulate-grad hooks during the backward
  /// (bf16, OptimizerOptions::fold_in_backward and LibTorch >= 2.1).
  bool folds_in_backward() const { return folds_in_backward_; }
  /// Collective over DP: all-reduce (ZeRO-1: reduce-scatter) of the main gradient, bucket by
  /// bucket, in reduce_dtype. Afterwards only this rank's part (reduced_grad) is meaningful.
  /// With overlaps(): launches the buckets not launched yet, then waits for every one.
  void reduce_grads();

  /// True when the DP reductions overlap the backward (OptimizerOptions::overlap, DP > 1).
  bool overlaps() const { return overlap_; }
  /// Overlap: from now until end_final_grads(), every gradient a parameter of `chunk` receives
  /// is its last of the step (pipeline::FinalGrads). No-op without overlaps(). Throws
  /// omnibal::Error for a chunk outside [0, OptimizerOptions::chunks).
  void begin_final_grads(int chunk);
  /// Overlap: closes begin_final_grads()'s window; with `chunk_done`, every parameter of `chunk`
  /// is final (those no micro-batch reached too). Then launches, non-blocking and in the fixed
  /// order, every bucket whose parameters are all final. Collective over DP (the launches).
  void end_final_grads(int chunk, bool chunk_done);
  /// One bucket's reduction launch; steady-clock microseconds (pipeline::trace_clock_us's base).
  struct Launch {
    int bucket = 0;
    double start_us = 0, end_us = 0;
  };
  /// The launches since the last call (from the hooks and end_final_grads), for times and traces.
  std::vector<Launch> take_launches();
  /// Overlap under ZeRO-1: waits for step()'s all-gather of every bucket holding a parameter of
  /// `chunk` (of every bucket: -1). Call before anything reads the parameters: a chunk's
  /// forward, evaluation, a checkpoint, a parameter hash. No-op when none is in flight.
  void wait_params(int chunk = -1) override;
  /// This rank's reduced part of parameter `name`'s gradient, flat fp32, a view to edit in place
  /// (the whole gradient without ZeRO-1); undefined when this rank holds none of it or the name
  /// is not optimised. Both ends of a tied weight get the same range (own_bucket).
  torch::Tensor reduced_grad(const std::string& name);
  /// Collective over DP (ZeRO-1) and every group of `scope`: the L2 norm of the reduced
  /// gradient of the whole model (GradNormScope says which parameters this rank counts).
  double grad_norm(const GradNormScope& scope = {}) override;
  /// This rank's part of the last grad_norm()'s sum of squares, before the reductions over DP,
  /// the pipeline and TP: not finite exactly when this rank's counted reduced gradient holds a
  /// NaN / Inf (train/nonfinite_guard.h names the rank from it).
  double local_grad_sq() const override { return local_grad_sq_; }
  /// Scales this rank's reduced gradient by min(1, max_norm / (norm + 1e-6)); returns the
  /// factor. No-op when max_norm <= 0. Throws omnibal::Error on a NaN / Inf `norm` (the factor
  /// would be 1 or 0 and pass the non-finite gradient on): such a step must be skipped
  /// (skip_step) or stopped before, as train/nonfinite_guard.h does.
  double clip(double norm, double max_norm) override;
  /// Collective over DP under ZeRO-1: AdamW at learning rate `lr` on this rank's part, then the
  /// parameters updated everywhere (copy from the master weights, all-gather over DP; with
  /// overlaps() the all-gathers are launched non-blocking: wait_params()).
  void step(double lr) override;
  /// Instead of step(): drops the step's gradients (zero_grad) and applies nothing, so master
  /// weights, AdamW moments, parameters and the step counter (bias correction) stay exactly as
  /// they were. Not collective; every rank must skip the same step (the ZeRO-1 all-gather of
  /// step() is left out on all of them).
  void skip_step() override;

  /// Updates done so far (the bias-correction counter).
  int64_t steps() const override { return steps_; }
  void set_steps(int64_t steps) override { steps_ = steps; }
  /// Names of the optimised parameters, in layout order.
  std::vector<std::string> names() const;
  /// Collective over DP: full fp32 tensors by name: "<name>" the master weight, "<name>#exp_avg",
  /// "<name>#exp_avg_sq" the moments (gathered from the shards under ZeRO-1, one bucket at a
  /// time, onto the CPU). With `keep` false (DP ranks that do not write the checkpoint) the
  /// gathered buckets are dropped at once and the result is empty: no rank but the writer holds
  /// a full copy.
  std::map<std::string, torch::Tensor> state_tensors(bool keep = true) override;
  /// Names state_tensors() returns ("<name>", "#exp_avg", "#exp_avg_sq" of each parameter).
  std::vector<std::string> state_names() const override;
  /// Takes master weights and moments by name (any float dtype, full shape) into this rank's
  /// part and sets the parameters from the master weights. Throws omnibal::Error naming a
  /// missing name or a shape mismatch.
  void load_state_tensors(const std::map<std::string, torch::Tensor>& state) override;
  /// Bytes of optimizer state on this rank: moments, plus master weights when they are a copy
  /// (bf16). The main gradient (fp32, full) is not included.
  int64_t state_bytes() const override;
  /// Bytes of the fp32 main gradient buffer.
  int64_t main_grad_bytes() const override { return main_grad_.numel() * 4; }
  const OptimizerOptions& options() const override { return options_; }
  ShardMode shard_mode() const override {
    return options_.zero1 ? ShardMode::kOptimizer : ShardMode::kNone;
  }
  /// The parameters are views of the param buffer, always whole.
  bool params_resident() const override { return true; }

 private:
  /// One parameter's place in the flat buffers.
  struct Slot {
    std::string name;
    torch::Tensor param;
    int64_t offset = 0;  ///< into the flat buffers
    int64_t numel = 0;
    bool decay = false;  ///< dim >= 2: decoupled weight decay applies
  };
  /// A contiguous range of the flat buffers, [begin, begin + size); this rank holds
  /// [owned_begin, owned_begin + owned) of it, with state tensors of `owned` elements.
  struct Bucket {
    int64_t begin = 0, size = 0, owned_begin = 0, owned = 0;
    torch::Tensor master, exp_avg, exp_avg_sq;  ///< fp32 [owned]
  };
  /// The part of a slot inside a bucket's owned range.
  struct Segment {
    int slot = 0, bucket = 0;
    int64_t local = 0;   ///< offset into the bucket's state tensors
    int64_t global = 0;  ///< offset into the flat buffers
    int64_t length = 0;
  };

  /// The optimised parameters (trainable, non-empty) in layout order: own_bucket names first,
  /// then the rest in stage order. Throws omnibal::Error on a dtype or device mismatch.
  std::vector<std::pair<std::string, torch::Tensor>> layout_order(
      const std::vector<std::pair<std::string, torch::Tensor>>& params) const;
  /// Fills slots_ and buckets_ (at most bucket_bytes of fp32 gradient each, padded to a
  /// multiple of the DP size; an own_bucket name alone in one); returns each slot's bucket.
  std::vector<int> lay_out(const std::vector<std::pair<std::string, torch::Tensor>>& ordered);
  /// Allocates the flat buffers on `device`, points the parameters (and fp32 .grad) into them,
  /// makes this rank's master weights and moments and its segments.
  void bind_buffers(torch::Device device, const std::vector<int>& slot_bucket);
  torch::Tensor owned_grad(const Bucket& b) const;
  /// The main gradient of slot `s`, flat fp32 [numel].
  torch::Tensor main_grad_of(const Slot& s) const;
  /// Sets on every slot's parameter the post-accumulate-grad hook: with `fold` it folds .grad
  /// into the main gradient (bf16 fold_in_backward, fp32 under overlap), and under overlap it
  /// marks the parameter final inside a window (on_accumulated).
  void install_grad_hooks(bool fold);

  /// A bucket's DP reduction in flight (overlap): the request and its buffers.
  struct Reduction {
    int bucket = 0;
    comm::Request request;
    torch::Tensor wire;  ///< what is reduced: the bucket's main gradient or its bf16 copy
    torch::Tensor out;   ///< ZeRO-1: this rank's reduced block
  };
  /// Overlap: the hook's part; `produced` is whether the call brought a gradient.
  void on_accumulated(int slot, bool produced);
  void mark_final(int slot);
  /// Launches, in order (the last bucket first), every bucket whose parameters are all final.
  void launch_ready();
  void launch_reduction(int bucket);
  /// The reduced values into place once a reduction completed (as the blocking path does).
  void finish_reduction(Reduction& r);
  /// Advances the reductions in flight (MPI progresses only inside its calls).
  void progress();
  /// Overlap: a new step (zero_grad). Throws omnibal::Error when reductions are in flight.
  void reset_overlap();

  OptimizerOptions options_;
  comm::Communicator* dp_ = nullptr;
  DpShard shard_;
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  std::vector<Segment> segments_;
  torch::Tensor param_buffer_;  ///< parameters' dtype [total]
  torch::Tensor main_grad_;     ///< fp32 [total]
  int64_t steps_ = 0;
  double local_grad_sq_ = 0;        ///< see local_grad_sq()
  bool folds_in_backward_ = false;  ///< see folds_in_backward()
  bool hooks_set_ = false;          ///< post-accumulate-grad hooks set (removed at destruction)
  /// fp32 .grad are views into the main gradient (always, except when hooks mark under overlap)
  bool fp32_grad_views_ = false;
  // Overlap (see the file comment). Hooks on another thread than owner_ only mark slots; the
  // owner thread reads the marks after the backward returned (the engine's synchronisation).
  bool overlap_ = false;         ///< see overlaps()
  bool marks_in_hooks_ = false;  ///< the hooks mark parameters final (needs hooks that fold)
  std::thread::id owner_;        ///< the thread that launches (MPI_THREAD_FUNNELED)
  std::vector<int> slot_bucket_, slot_chunk_;  ///< per slot; chunk -1: late
  std::vector<std::set<int>> bucket_chunks_;   ///< chunks whose parameters each bucket holds
  std::vector<int> bucket_open_;               ///< per bucket: parameters not yet final
  std::vector<char> slot_final_, chunk_final_;
  int launched_ = 0;  ///< buckets launched this step (the last ones)
  int window_ = -1;   ///< chunk of the open begin_final_grads window, or -1
  std::vector<Reduction> reductions_;
  std::vector<Launch> launches_;
  std::vector<comm::Request> gathers_;  ///< ZeRO-1 all-gather per bucket (done when empty)
};

}  // namespace omnibal::train
