#include "balance/epoch_planner.h"

#include <array>
#include <vector>

#include "balance/plan_json.h"
#include "core/error.h"

namespace omnibal::balance {

EpochPlanner::EpochPlanner(const SampleTable& table, Method method, const PlannerOptions& options)
    : table_(table),
      method_(method),
      options_(options),
      dp_(options.dp),
      micro_batches_(options.micro_batches) {
  OMNIBAL_CHECK(dp_ >= 1 && micro_batches_ >= 1, "EpochPlanner: dp and m must be >= 1, got dp ",
                dp_, " and m ", micro_batches_);
  check_token_cap(options);  // refuse at start-up, before any epoch is planned
  // Placement by time chooses its candidate on the Dist Ratios of the real dp x m grid; planned
  // here as one rank of dp * m packs it would choose on the wrong grid. And the trainer's pack
  // time model (train/pack_time_source.h) scales the start-up cost table, which is profiled
  // under the largest pack of this plan.
  OMNIBAL_CHECK(options.place_by == PlaceBy::kCount,
                "balance.place_by: time is not supported by the trainer yet (its pack time model ",
                "comes from the start-up cost table, made after the data plan, and its epoch ",
                "planner plans a step as one rank of dp * m packs); use count, or omnibal-plan ",
                "data --place-by time");
  options_.dp = 1;
  options_.micro_batches = dp_ * micro_batches_;
}

void EpochPlanner::plan_next_epoch() {
  const int e = static_cast<int>(epochs_.size());
  PlannerOptions o = options_;
  o.seed = options_.seed + static_cast<uint64_t>(e);
  PackList carry;
  if (e > 0) carry = carried_packs(epochs_.back());
  MethodResult r = plan_method(table_, method_, o, e > 0 ? &carry : nullptr);
  // Budgets are searched once: later epochs reuse epoch 0's.
  if (e == 0 && budgets_unset(options_.budgets) &&
      (method_ == Method::kIsf || method_ == Method::kIsfRandomPlacement))
    options_.budgets = r.budgets;
  OMNIBAL_CHECK(r.plan.steps() > 0, "epoch ", e, " of balance.method ", method_name(method_),
                " has no full step (", r.packing.packs.size(),
                " packs for dp * m = ", r.plan.packs_per_step(),
                "); use fewer ranks, micro-batches or samples per pack");
  first_step_.push_back(
      e == 0 ? 0 : first_step_.back() + static_cast<int64_t>(epochs_.back().plan.steps()));
  epochs_.push_back(std::move(r));
}

DataPosition EpochPlanner::position(int64_t step) {
  OMNIBAL_CHECK(step >= 0, "EpochPlanner: negative step ", step);
  if (epochs_.empty()) plan_next_epoch();
  while (step >= first_step_.back() + static_cast<int64_t>(epochs_.back().plan.steps()))
    plan_next_epoch();
  int e = static_cast<int>(epochs_.size()) - 1;
  while (first_step_[e] > step) --e;
  return {e, step - first_step_[e]};
}

std::vector<uint32_t> EpochPlanner::pack(int64_t step, int dp_rank, int micro) {
  OMNIBAL_CHECK(dp_rank >= 0 && dp_rank < dp_ && micro >= 0 && micro < micro_batches_,
                "EpochPlanner: DP rank ", dp_rank, " / micro-batch ", micro, " outside dp ", dp_,
                " x m ", micro_batches_);
  const DataPosition pos = position(step);
  const auto& r = epochs_[pos.epoch];
  const uint32_t p = r.plan.pack(static_cast<size_t>(pos.step_in_epoch), 0, slot(dp_rank, micro));
  return {r.packing.packs.begin(p), r.packing.packs.end(p)};
}

int64_t EpochPlanner::steps_in_epoch(int epoch) {
  while (static_cast<int>(epochs_.size()) <= epoch) plan_next_epoch();
  return static_cast<int64_t>(epochs_[epoch].plan.steps());
}

const MethodResult& EpochPlanner::epoch_plan(int epoch) {
  steps_in_epoch(epoch);
  return epochs_[epoch];
}

uint64_t EpochPlanner::plan_hash() {
  const auto& r = epoch_plan(0);
  return balance::plan_hash(table_, r.packing.packs, r.plan);
}

StepPlan EpochPlanner::dealt_plan(int epoch) {
  const auto& r = epoch_plan(epoch);
  StepPlan out;
  out.dp = dp_;
  out.micro_batches = micro_batches_;
  out.slots.reserve(r.plan.slots.size());
  for (size_t s = 0; s < r.plan.steps(); ++s)
    for (int rank = 0; rank < dp_; ++rank)
      for (int k = 0; k < micro_batches_; ++k)
        out.slots.push_back(r.plan.pack(s, 0, slot(rank, k)));
  out.carried = r.plan.carried;
  return out;
}

BalanceMetrics EpochPlanner::dealt_metrics(int epoch, const PackTimeModel* time) {
  const StepPlan dealt = dealt_plan(epoch);
  const auto& r = epochs_[epoch];
  std::array<int64_t, kLoadDims> budget{r.budgets.q_vit, r.budgets.q_tok};
  if (method_ == Method::kMultiSource) budget = {0, 0};  // as plan_method: per-source budgets
  return compute_metrics(r.packing.packs, dealt, budget, r.metrics.skipped, time);
}

StepTime EpochPlanner::predicted_step(int64_t step, const PackTimeModel& time) {
  const DataPosition pos = position(step);
  const auto& r = epochs_[pos.epoch];
  std::vector<double> pack_s(static_cast<size_t>(dp_) * micro_batches_);
  for (int rank = 0; rank < dp_; ++rank)
    for (int k = 0; k < micro_batches_; ++k)
      pack_s[static_cast<size_t>(rank) * micro_batches_ + k] =
          time.pack_seconds(r.packing.packs,
                            r.plan.pack(static_cast<size_t>(pos.step_in_epoch), 0, slot(rank, k)));
  return step_time(pack_s.data(), dp_, micro_batches_);
}

}  // namespace omnibal::balance
