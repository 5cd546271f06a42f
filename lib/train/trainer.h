// Trainer: the training loop of one rank of a DP x PP job (OmniBal's three balances in use:
// the data plan from lib/balance, the stage layout from lib/partition / lib/memory, the 1F1B
// executor from lib/pipeline). One step:
//   1. at the step boundary, agree on SIGTERM (comm::should_stop) -> checkpoint, return;
//   2. take this rank's m packs of the step (first stage: pixels + ids, last stage: labels);
//   3. all-reduce the loss normaliser N of the whole global batch (loss.reduction token | sample
//      | square, loss_normaliser.h), so the loss is sum(w_t * cross-entropy_t) / N whatever the
//      packing, m, DP or PP;
//   4. run the 1F1B program; at ReduceGrads the DP all-reduce of gradients in buckets;
//   5. global gradient norm over all stages, clipping, AdamW at the warm-up + cosine LR;
//   6. metrics (rank 0 writes them), evaluation and checkpoints every N steps.
// Checkpoints hold parameters and AdamW moments per parameter name (one writer per tensor: DP
// rank 0 of each stage), the step and data position and the resolved config, so they load
// under any partition, PP or DP size. There is no generator state to save: the data order
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

namespace omnibal::train {

/// How a run ended.
struct TrainOutcome {
  int64_t steps_done = 0;   ///< global steps completed (including those before a resume)
  bool stopped = false;     ///< ended early (a checkpoint was written): see stop_reason
  /// "signal" (SIGTERM/SIGINT), "train.exit_after_steps N" or "train.exit_duration_min M";
  /// empty when the run reached train.steps.
  std::string stop_reason;
  double final_loss = 0;    ///< loss of the last step run
  std::optional<EvalResult> eval;  ///< last evaluation, if any
};

/// One rank's trainer. Collective: every rank of the job constructs and runs it together.
class Trainer {
 public:
  /// Builds this rank's stage, data plan and (rank 0) run directory; on a fresh run initialises
  /// the stage from model.init_from (init_weights.h), on a resume the checkpoint wins and
  /// init_from is ignored. Throws omnibal::Error with
  /// the key at fault on a bad config (preset, partition, data files), when the ranks' plans
  /// differ, or when `resume` ("", "auto" or a checkpoint directory) names a damaged or
  /// mismatched checkpoint.
  Trainer(const Config& config, comm::ParallelComms& comms,
          std::shared_ptr<comm::ErrorForwarder> errors, const std::string& resume);
  ~Trainer();
  /// Trains to train.steps, or until SIGTERM / train.exit_after_steps / train.exit_duration_min
  /// (then a checkpoint at that step boundary; `--resume auto` continues bitwise).
  TrainOutcome run();

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace omnibal::train
