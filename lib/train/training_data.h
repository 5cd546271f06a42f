// TrainingData: the training set as the trainer walks it. Loads the meta file's datasets, gets
// every sample's (tiles, tokens) from the meta's token_lengths files or, when they are absent,
// by scanning the samples at start-up (lib/data's scan: image headers + tokenizer, no decoding),
// and plans each epoch with lib/balance (balance.method: ISF with budgets from the config or
// searched once in epoch 0, or a baseline). Epoch e uses seed balance.seed + e and carries the
// previous epoch's tail in, so nothing is dropped. The data position of a run is (epoch, step in
// epoch); global step g maps to it deterministically, so a resumed run (under any DP/PP) sees
// the same packs. Steps are planned as dp * m packs and dealt to DP ranks in snake order here,
// so the global batch of a step does not depend on the DP size. Every rank computes the same
// plan; the trainer compares plan_hash() across ranks at start-up.
// It also owns this rank's loader (data/pack_loader.h): at each epoch it enters, a loader over
// the rest of that epoch's packs of this DP rank builds what the rank's pipeline stage needs
// (data::PackParts::for_stage), and it counts the samples left out under
// data.on_bad_sample: skip (by the packer per epoch, by the loader per consumed pack).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "balance/data_planner.h"
#include "balance/epoch_planner.h"
#include "core/config.h"
#include "core/model_preset.h"
#include "data/conversation_dataset.h"
#include "data/pack_builder.h"
#include "data/pack_loader.h"
#include "data/sample_processor.h"
#include "data/tokenizer.h"

namespace omnibal::train {

/// Where a rank stands in the job, for the packs it loads.
struct DataRank {
  int dp_rank = 0;  ///< DP index: which of the step's packs are this rank's
  int stage = 0;    ///< pipeline stage: what the packs hold (data::PackParts::for_stage)
  int stages = 1;   ///< pipeline stages
};

/// Where global step g lies (epoch, step in epoch).
using DataPosition = balance::DataPosition;

/// A meta file's samples with their lengths, as a planner table and a pack builder.
struct LoadedSet {
  std::unique_ptr<data::ConversationDataset> dataset;
  std::unique_ptr<data::SampleProcessor> processor;
  std::unique_ptr<data::PackBuilder> builder;
  /// Sample s is global sample global_id(s) of `dataset`. repeat_time is expanded
  /// (balance/repeat_time.h, seeded by balance.seed as in `omnibal-plan data`), so one global
  /// sample may fill several rows.
  balance::SampleTable table;
  std::vector<data::SampleLengths> lengths;  ///< by global sample id
  int64_t bad_samples = 0;                   ///< skipped by the scan (on_bad_sample: skip)
  int64_t max_seq_len = 0;  ///< the preset's llm.max_seq_len: no pack may hold more tokens
  std::string preset_name;  ///< model.preset, for messages about max_seq_len
  int64_t global_id(uint32_t s) const {
    return dataset->offset(static_cast<int>(table.dataset[s])) + table.index[s];
  }
};

/// Loads `meta_path` with the tokenizer and options of `config` (scan with `threads` when the
/// meta has no token_lengths); the table repeats each dataset per its repeat_time with seed
/// balance.seed. Throws omnibal::Error / data::BadSampleError on bad input, before any
/// training: a tokenizer larger than the preset's vocabulary, a dataset without a usable sample
/// (a warning under data.allow_empty_datasets), a bad sample under on_bad_sample: error
/// (data/input_checks.h).
/// `repeat` false reads every sample once whatever the meta's repeat_time (evaluation sets).
LoadedSet load_set(const std::string& meta_path, const Config& config, const ModelPreset& preset,
                   const data::Tokenizer& tokenizer, int threads, bool repeat = true);

/// The epoch plans of a training set (balance::EpochPlanner over the set's table) and the loader
/// of one rank's packs.
class TrainingData {
 public:
  /// Plans with balance.*, parallel.dp/m and the set's max_seq_len as token cap; next_packs()
  /// loads for `rank` with data.workers threads. Throws omnibal::Error when the set is empty or
  /// balance.q_tok exceeds the preset's llm.max_seq_len.
  TrainingData(LoadedSet set, const Config& config, DataRank rank = {});
  ~TrainingData();
  TrainingData(const TrainingData&) = delete;  // the planner refers to set_.table
  TrainingData& operator=(const TrainingData&) = delete;

  /// This rank's m packs of 0-based global step `step`, in micro-batch order, holding what its
  /// stage needs (first stage: pixels, ids and labels; last stage: labels; a middle stage loads
  /// nothing and gets none: everything arrives with the activation). Steps are taken in order;
  /// entering an epoch logs the packer's skips (rank 0) and starts a loader over the rest of the
  /// epoch, reporting the previous loader's skipped samples. Rethrows a loader thread's error
  /// (a bad sample under on_bad_sample: error) when its pack is reached.
  std::vector<models::PackBatch> next_packs(int64_t step);
  /// Ends loading after the last step: logs the loader's skipped-sample report (every first-stage
  /// rank, one per DP replica) and stops its threads.
  void stop_loading();
  /// Whether this rank's stage loads packs (the first and the last stage).
  bool loads_packs() const;
  /// CPU seconds (this thread's clock) that building one of this rank's packs takes, holding
  /// what its stage needs: the median over the `packs` packs (>= 1) that follow the first of
  /// epoch 0 (built untimed, to warm the file cache). This is the loader's work per micro-batch,
  /// taken from the rank's cores when the loader shares them. 0 when the stage loads nothing.
  /// Does not move the data position. Throws what building a pack throws.
  double pack_build_seconds(int packs);
  /// A loader over this rank's packs of the first `steps` steps of epoch 0 (wrapping around a
  /// shorter epoch) with the training loader's options (data.workers, prefetch, the stage's
  /// parts), for timed trials at start-up; independent of the training loader. Null when the
  /// stage loads nothing.
  std::unique_ptr<data::PackLoader> trial_loader(int64_t steps);
  /// Samples left out of the packs this rank consumed (on_bad_sample: skip), counted on the first
  /// stage only (every loading stage skips the same ones); sum over ranks for the job's count.
  int64_t skipped_in_packs() const { return skipped_in_packs_; }
  /// Samples the packer left out of the epochs this run entered (on_bad_sample: skip), the same
  /// on every rank.
  int64_t skipped_by_packer() const { return skipped_by_packer_; }

  /// (epoch, step in epoch) of 0-based global step `step`; plans epochs as needed.
  DataPosition position(int64_t step);
  /// Global sample ids of the pack `dp_rank` runs as micro-batch `micro` at global step `step`.
  std::vector<int64_t> pack(int64_t step, int dp_rank, int micro);
  /// Index in [0, dp * m) of that pack in the step's global batch (snake order over DP ranks):
  /// the same pack has the same slot whatever the DP size and m (dropout masks key on it).
  int slot(int dp_rank, int micro) const { return planner_->slot(dp_rank, micro); }
  /// Steps in epoch e (plans it if needed).
  int64_t steps_in_epoch(int epoch);
  /// Hash of epoch 0's placed plan (balance/plan_json.h's plan_hash).
  uint64_t plan_hash();
  /// The plan of epoch e (metrics, budgets).
  const balance::MethodResult& epoch_plan(int epoch);
  /// Metrics of epoch e as dealt to the run's dp ranks x m micro-batches, with the Cost Dist
  /// Ratios under `time` when not null (balance::EpochPlanner::dealt_metrics).
  balance::BalanceMetrics dealt_metrics(int epoch, const balance::PackTimeModel* time) {
    return planner_->dealt_metrics(epoch, time);
  }
  /// Predicted seconds of each DP rank's packs of global step `step` under `time`, and the
  /// step's Cost Dist Ratios; the same on every rank.
  balance::StepTime predicted_step(int64_t step, const balance::PackTimeModel& time) {
    return planner_->predicted_step(step, time);
  }

  const LoadedSet& set() const { return set_; }
  /// Logs (call on rank 0) the data plan: samples, balance.method `method`, packs, steps per
  /// epoch of `dp` x m, the budgets and plan hash, and epoch 0's Dist Ratios as dealt, by
  /// counts and by predicted cost under `time` (`time_description` names its source).
  void log_plan(BalanceMethod method, int dp, const balance::PackTimeModel& time,
                const std::string& time_description);
  data::PackBuilder& builder() { return *set_.builder; }

 private:
  void count_packer_skips(int epoch);
  void start_loader(int64_t step, const DataPosition& pos);
  data::LoaderOptions loader_options() const;
  void report_loader_skips() const;

  LoadedSet set_;
  std::unique_ptr<balance::EpochPlanner> planner_;  ///< refers to set_.table
  DataRank rank_;
  int micro_batches_ = 1;
  int workers_ = 1;
  bool pin_memory_ = false;  ///< runtime.device: cuda (data::LoaderOptions::pin_memory)
  std::unique_ptr<data::PackLoader> loader_;  ///< over the rest of epoch loader_epoch_
  int loader_epoch_ = -1;
  int packer_epoch_ = -1;  ///< the last epoch whose packer skips were counted
  int64_t skipped_in_packs_ = 0;
  int64_t skipped_by_packer_ = 0;
};

}  // namespace omnibal::train
