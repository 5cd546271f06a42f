// EpochPlanner: the data plan of a training run, epoch by epoch, as the trainer walks it and
// the simulator replays it (one implementation for both, so `omnibal-plan simulate` runs the
// trainer's exact packs). A step is dp x m packs, planned as one rank of dp * m packs and dealt
// to the DP ranks in snake order, so the global batch of a step does not depend on the DP size
// (docs/conventions.md). Epoch e is planned with seed `options.seed + e` and the previous epoch's
// carried tail; ISF budgets left unset are searched once, in epoch 0, and reused. Global step g
// maps to (epoch, step in epoch) deterministically. Torch-free; it does not build tensors.
#pragma once

#include <cstdint>
#include <vector>

#include "balance/balance_metrics.h"
#include "balance/data_planner.h"
#include "balance/pack_time_model.h"
#include "balance/sample_table.h"

namespace omnibal::balance {

/// Where global step g lies.
struct DataPosition {
  int epoch = 0;
  int64_t step_in_epoch = 0;
};

/// Plans the epochs of one run over a sample table.
class EpochPlanner {
 public:
  /// `table` must outlive the planner. `options.dp` and `options.micro_batches` are the run's
  /// DP size and m. Throws omnibal::Error when dp or m < 1, explicit budgets exceed the token
  /// cap, or options.place_by is kTime (not supported here yet).
  EpochPlanner(const SampleTable& table, Method method, const PlannerOptions& options);

  /// (epoch, step in epoch) of 0-based global step `step`; plans epochs as needed. Throws
  /// omnibal::Error on a negative step or an epoch without a full step.
  DataPosition position(int64_t step);
  /// Table rows (sample indices of `table`) of the pack DP rank `dp_rank` runs as micro-batch
  /// `micro` at global step `step`, in pack order.
  std::vector<uint32_t> pack(int64_t step, int dp_rank, int micro);
  /// Index in [0, dp * m) of that pack in the step's global batch: snake order over DP ranks, so
  /// heavy and light packs of the load-sorted step alternate. The slot -> pack map does not
  /// depend on the DP size or m (the trainer's dropout masks key on the slot).
  int slot(int dp_rank, int micro) const {
    return micro * dp_ + (micro % 2 == 0 ? dp_rank : dp_ - 1 - dp_rank);
  }
  /// Steps in epoch e (plans it if needed).
  int64_t steps_in_epoch(int epoch);
  /// The plan of epoch e (packs, placement, metrics, budgets).
  const MethodResult& epoch_plan(int epoch);
  /// Hash of epoch 0's placed plan (plan_json.h's plan_hash); ranks compare it at start-up.
  uint64_t plan_hash();
  /// The plan of epoch e as the run deals it: dp ranks x m micro-batches per step, pack ids of
  /// epoch_plan(e).packing.packs (whose own plan is one planning rank of dp * m packs), the
  /// carried tail as planned.
  StepPlan dealt_plan(int epoch);
  /// Metrics of epoch e on the dealt plan (the Dist Ratios across the run's DP ranks; with
  /// `time`, the Cost Dist Ratios across ranks and across each rank's m micro-batches).
  BalanceMetrics dealt_metrics(int epoch, const PackTimeModel* time = nullptr);
  /// Predicted seconds of global step `step`: each DP rank's m packs under `time`, and the
  /// step's Cost Dist Ratios. The same on every rank (it reads only the plan).
  StepTime predicted_step(int64_t step, const PackTimeModel& time);

  int dp() const { return dp_; }
  int micro_batches() const { return micro_batches_; }

 private:
  void plan_next_epoch();
  const SampleTable& table_;
  Method method_;
  PlannerOptions options_;  ///< dp 1, m = dp * m: one planning "rank" per step
  int dp_ = 1, micro_batches_ = 1;
  std::vector<MethodResult> epochs_;
  std::vector<int64_t> first_step_;  ///< global step of each epoch's step 0
};

}  // namespace omnibal::balance
