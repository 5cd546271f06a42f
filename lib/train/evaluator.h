// Evaluation on the held-out split under teacher forcing: the loss (nats per label token) and
// the answer exact-match accuracy (a sample counts as correct when the argmax of the logits is
// the label at every one of its answer tokens), per task type (= per dataset of the eval meta
// file) and overall, with each task's majority-class rate (share of its samples whose whole
// answer equals the most frequent answer) as the floor to beat. Eval packs hold consecutive
// samples (up to samples_per_pack, within the preset's max_seq_len); pack i runs on DP replica
// i % dp through the same pipeline stages, forward only. Each sample is scored once: an eval
// meta file's repeat_time does not weight the score.
#pragma once

#include <string>
#include <vector>

#include "comm/parallel_comms.h"
#include "core/cadence.h"
#include "pipeline/stage_executor.h"
#include "train/training_data.h"

namespace omnibal::train {

/// Scores of one task type.
struct TaskScore {
  std::string task;  ///< dataset name in the eval meta file
  int64_t samples = 0;
  int64_t correct = 0;  ///< exact-match samples
  double loss_sum = 0;  ///< nats over all label tokens
  int64_t label_tokens = 0;
  double majority_rate = 0;  ///< share of samples whose answer is the most frequent one
  double accuracy() const { return samples ? static_cast<double>(correct) / samples : 0.0; }
  double loss() const { return label_tokens ? loss_sum / label_tokens : 0.0; }
};

/// Scores of one evaluation.
struct EvalResult {
  std::vector<TaskScore> tasks;
  TaskScore overall;
};

/// Runs the held-out split through the pipeline.
class Evaluator {
 public:
  /// `set` is the eval split; packs hold at most `samples_per_pack` samples and `max_tokens`;
  /// `every`: train.eval_every (<= 0: only at the end of the run).
  Evaluator(LoadedSet set, int samples_per_pack, int64_t max_tokens, int every = 0);
  /// Whether a periodic evaluation falls due after `steps_done` steps (core/cadence.h).
  bool due(int64_t steps_done) const { return omnibal::due(every_, steps_done); }
  /// Collective over the world: every rank calls it with its stage executor. Returns the same
  /// result on every rank. DP rank r scores packs r, r + dp, ...; with `lockstep` (ZeRO-3, whose
  /// per-unit gathers pair over DP by order) every DP rank runs the same number of forwards, a
  /// rank short of one running a copy of the first pack whose scores are not counted.
  EvalResult run(pipeline::StageExecutor& stage, comm::ParallelComms& comms, bool lockstep = false);
  size_t packs() const { return packs_.size(); }

 private:
  LoadedSet set_;
  std::vector<std::vector<int64_t>> packs_;
  std::vector<double> majority_;  ///< per dataset
  int every_ = 0;
};

/// Per-sample exact match of a kLoss state: for each sample of the pack, whether every label
/// token's argmax is right ([n] bool), plus its loss sum and label count.
struct SampleMatch {
  std::vector<bool> correct;
  std::vector<double> loss_sum;
  std::vector<int64_t> labels;
};
SampleMatch match_samples(const models::UnitState& out);

}  // namespace omnibal::train
