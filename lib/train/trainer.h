// Trainer: the training loop of one rank of a TP x PP x DP job, OmniBal's three balances in
// use: the data plan from lib/balance (ISF packs, train/training_data.h), the stage layout and
// recomputation from lib/partition / lib/memory (train/startup_planner.h), and a pipeline
// schedule from lib/schedule (1F1B, interleaved 1F1B or ZB-H1) walked by lib/pipeline's executor.
// run() is a loop over train_step(step), between a stop check at each step boundary and the
// periodic evaluation and checkpoint (each component owns its cadence: core/cadence.h):
//   1. at the step boundary, agree on SIGTERM and the train.exit_* slots (run_stop.h) ->
//      checkpoint, return;
//   2. take this rank's m packs of the step (its loader builds what the stage needs: first stage
//      pixels, ids and labels, last stage labels, middle stages nothing);
//   3. all-reduce the loss normaliser N of the whole global batch (loss.reduction token | sample
//      | square, loss_normaliser.h): the loss is sum(w_t * cross-entropy_t) / N whatever the
//      packing, m, DP, PP or TP;
//   4. run the stage's instruction list (bf16: each parameter's gradient folded into the fp32
//      main gradient as it is produced); at ReduceGrads StageRuntime::finalize_grads (the DP
//      all-reduce or ZeRO-1 reduce-scatter in buckets, the tied head's sum);
//   5. the global gradient norm, train.on_nonfinite's verdict, clipping, AdamW at the warm-up +
//      cosine LR on the fp32 master weights (train/distributed_optimizer.h);
//   6. one all-reduce of the step's metrics (step_metrics.h); rank 0 writes them; traced steps
//      (runtime.trace_steps) write a timeline (step_trace.h).
// The config comes resolved from main (run_config.h: every `auto` settled) and is never changed;
// it is what the run directory and every checkpoint hold. main also loads the inputs
// (run_inputs.h) and refuses an incompatible resume before the trainer exists.
// Checkpoints hold fp32 master weights and AdamW moments per parameter name, unsharded, with the
// step, data position and resolved config, so they load under any partition, PP, DP or TP
// size, precision and zero1 setting (train_checkpoint.h). There is no generator state to save:
// the data order derives from (balance.seed, epoch) and dropout masks from (train.seed, step,
// the pack's slot in the global batch, unit, site) (models/dropout.h), so resuming is exact.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "comm/error_forwarder.h"
#include "comm/parallel_comms.h"
#include "core/config.h"
#include "train/evaluator.h"
#include "train/run_config.h"
#include "train/run_inputs.h"

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
  /// Plans the stages at start-up (train/startup_planner.h; on a resume the checkpoint's plan
  /// where it fits), builds this rank's stage (stage_runtime.h) and gives it its starting
  /// weights: the checkpoint's when `resume` continues one (refuse_incompatible_resume has
  /// passed), otherwise the seeded initialisation and model.init_from. `config` is resolved
  /// (run_config.h; copied, never changed), `inputs` come from load_run_inputs. Throws
  /// omnibal::Error with the key at fault (model.hf_style still auto, a bad partition or
  /// checkpoint).
  Trainer(const Config& config, comm::ParallelComms& comms,
          std::shared_ptr<comm::ErrorForwarder> errors, const ResumePoint& resume,
          RunInputs inputs);
  ~Trainer();
  /// Trains to train.steps, or until SIGTERM / train.exit_after_steps / train.exit_duration_min
  /// (then a checkpoint at that step boundary; `--resume auto` continues bitwise).
  TrainOutcome run();

 private:
  /// Collective: steps 2-6 above for 0-based global step `step`; returns its reduced loss.
  double train_step(int64_t step);
  /// Evaluation and checkpoint after `step` when they fall due (not after the last step:
  /// finish() does both).
  void after_step(int64_t step);
  /// Collective: the skipped-sample report, the last checkpoint and evaluation, summary.json.
  void finish(TrainOutcome& out, int64_t first);

  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace omnibal::train
