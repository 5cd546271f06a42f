// Trainer: the training loop of one rank of a DP x PP job (OmniBal's three balances in use:
// the data plan from lib/balance, the stage layout from lib/partition / lib/memory, the 1F1B
// executor from lib/pipeline). run() is a loop over train_step(step), between a stop check at
// each step boundary and the periodic evaluation and checkpoint:
//   1. stop_reason: at the step boundary, agree on SIGTERM (comm::should_stop) and the
//      train.exit_* slots -> checkpoint, return;
//   2. take this rank's m packs of the step from TrainingData (its loader builds what the stage
//      needs: first stage pixels, ids and labels, last stage labels, middle stages nothing);
//   3. all-reduce the loss normaliser N of the whole global batch (loss.reduction token | sample
//      | square, loss_normaliser.h), so the loss is sum(w_t * cross-entropy_t) / N whatever the
//      packing, m, DP or PP;
//   4. run the 1F1B program (bf16: each micro-batch's gradients folded into the fp32 main
//      gradient); at ReduceGrads the DP all-reduce (train.zero1: reduce-scatter) in buckets;
//   5. global gradient norm over all stages, clipping, AdamW at the warm-up + cosine LR on the
//      fp32 master weights (ZeRO-1: this DP rank's shard, then the all-gather of parameters):
//      train/distributed_optimizer.h;
//   6. one all-reduce of the step's StepMetrics (step_metrics.h); rank 0 writes them;
//   after_step: evaluation and checkpoints every N steps.
// The config comes resolved from main (run_config.h: every `auto` settled) and is never changed;
// it is what the run directory and every checkpoint hold.
// Checkpoints hold fp32 master weights and AdamW moments per parameter name, unsharded (one
// writer per tensor: DP rank 0 of each stage), the step and data position and the resolved
// config, so they load under any partition, PP or DP size, precision and zero1 setting. There is no generator state to save: the data order
// derives from (balance.seed, epoch) and dropout masks (model.dropout) from (train.seed, step,
// the pack's slot in the global batch, unit, site) (models/dropout.h), so resuming is exact.
// A tied LM head split over two stages is kept in sync by train/tied_head.h.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "comm/error_forwarder.h"
#include "comm/parallel_comms.h"
#include "core/config.h"
#include "train/evaluator.h"
#include "train/run_config.h"

namespace omnibal::train {

/// How a run ended.
struct TrainOutcome {
  int64_t steps_done = 0;  ///< global steps completed (including those before a resume)
  bool stopped = false;    ///< ended early (a checkpoint was written): see stop_reason
  /// "signal" (SIGTERM/SIGINT), "train.exit_after_steps N" or "train.exit_duration_min M";
  /// empty when the run reached train.steps.
  std::string stop_reason;
  double final_loss = 0;           ///< loss of the last step run
  std::optional<EvalResult> eval;  ///< last evaluation, if any
};

/// One rank's trainer. Collective: every rank of the job constructs and runs it together.
class Trainer {
 public:
  /// Builds this rank's stage, data plan and (rank 0) run directory from `config` as
  /// resolve_run_config returned it (copied; never changed). On a fresh start initialises the
  /// stage from model.init_from (init_weights.h); when `resume` continues a checkpoint (found by
  /// find_resume_point) its weights win and init_from is ignored. Throws omnibal::Error with
  /// the key at fault on a bad config (preset, partition, data files), when model.hf_style is
  /// still auto, when the ranks' plans differ, or when the checkpoint was made on another data
  /// plan.
  Trainer(const Config& config, comm::ParallelComms& comms,
          std::shared_ptr<comm::ErrorForwarder> errors, const ResumePoint& resume);
  ~Trainer();
  /// Trains to train.steps, or until SIGTERM / train.exit_after_steps / train.exit_duration_min
  /// (then a checkpoint at that step boundary; `--resume auto` continues bitwise).
  TrainOutcome run();

 private:
  /// Collective: why the run stops at the boundary before `step` ("signal", "train.exit_...")
  /// or nothing; the exit slots allow at least one step after `first`, this launch's first.
  std::optional<std::string> stop_reason(int64_t step, int64_t first);
  /// Collective: steps 2-6 above for 0-based global step `step`; returns its reduced loss.
  double train_step(int64_t step);
  /// Evaluation and checkpoint after `step` when train.eval_every / checkpoint_every fall due
  /// (not after the last step: finish() does both).
  void after_step(int64_t step);
  /// Collective: the skipped-sample report, the last checkpoint and evaluation, summary.json.
  void finish(TrainOutcome& out, int64_t first);

  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace omnibal::train
