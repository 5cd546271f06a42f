#include "memory/recompute_planner.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "memory/stage_rules.h"
#include "schedule/one_f_one_b.h"

namespace omnibal::memory {
namespace {

bool candidate(const partition::UnitCost& u) { return u.recomputable() && u.trainable; }

/// Fills memory, fits, counts and time for `flags`.
RecomputePlan finish(const partition::UnitCostTable& table, const partition::Partition& p,
                     std::vector<bool> flags, const RecomputeOptions& o) {
  RecomputePlan plan;
  plan.recompute = std::move(flags);
  for (int s = 0; s < p.stages(); ++s) {
    plan.memory.push_back(stage_memory(table, p, s, o.micro_batches, plan.recompute, o.memory));
    plan.fits.push_back(o.budget_bytes <= 0 || plan.memory.back().total() <= o.budget_bytes);
    int count = 0;
    for (int u = p.begin(s); u < p.end(s); ++u)
      if (plan.recompute[u] && candidate(table.units[u])) {
        ++count;
        plan.recompute_s += table.units[u].forward_s;
      }
    plan.recomputed_units.push_back(count);
  }
  return plan;
}

/// 0/1 knapsack: maximise the summed value of chosen items with summed weight <= capacity
/// (integers). Returns the chosen flags.
std::vector<bool> knapsack(const std::vector<long>& weight, const std::vector<double>& value,
                           long capacity, double* best_value) {
  const size_t n = weight.size();
  long total = 0;
  for (long w : weight) total += w;
  capacity = std::min(capacity, total);
  std::vector<double> best(capacity + 1, 0.0);
  std::vector<std::vector<bool>> take(n, std::vector<bool>(capacity + 1, false));
  for (size_t i = 0; i < n; ++i)
    for (long c = capacity; c >= weight[i]; --c)
      if (best[c - weight[i]] + value[i] > best[c]) {
        best[c] = best[c - weight[i]] + value[i];
        take[i][c] = true;
      }
  std::vector<bool> chosen(n, false);
  long c = capacity;
  for (size_t i = n; i-- > 0;)
    if (take[i][c]) {
      chosen[i] = true;
      c -= weight[i];
    }
  *best_value = best[capacity];
  return chosen;
}

/// Adaptive flags for one stage; returns false when it cannot fit even fully recomputed.
bool adaptive_stage(const partition::UnitCostTable& table, const partition::Partition& p, int s,
                    const RecomputeOptions& o, std::vector<bool>& flags) {
  std::vector<int> items;
  for (int u = p.begin(s); u < p.end(s); ++u)
    if (candidate(table.units[u])) items.push_back(u);
  for (int u : items) flags[u] = true;
  const StageMemory all = stage_memory(table, p, s, o.micro_batches, flags, o.memory);
  const double fixed = all.total() - all.transient;  // everything recomputed, no transient
  const int in_flight = schedule::in_flight_micro_batches(s, p.stages(), o.micro_batches);
  // Candidate transients: none (nothing recomputed) or the activations of one recomputed item.
  std::vector<double> transients = {0.0};
  for (int u : items) transients.push_back(table.units[u].activation_bytes);
  std::sort(transients.begin(), transients.end());
  transients.erase(std::unique(transients.begin(), transients.end()), transients.end());
  double best_value = -1;
  std::vector<bool> best_flags = flags;
  for (double d : transients) {
    // Items larger than d must be kept (not recomputed); with d == 0 every item is kept.
    double base = fixed + d, forced_value = 0;
    std::vector<long> weight;
    std::vector<double> value;
    std::vector<int> optional;
    for (int u : items) {
      const auto& unit = table.units[u];
      const double extra = in_flight * (unit.activation_bytes - table.checkpoint_bytes(u));
      if (d == 0 || unit.activation_bytes > d) {
        base += extra;
        forced_value += unit.forward_s;
      } else {
        optional.push_back(u);
        weight.push_back(static_cast<long>(std::ceil(std::max(0.0, extra) / o.granularity_bytes)));
        value.push_back(unit.forward_s);
      }
    }
    if (base > o.budget_bytes) continue;
    const long capacity =
        static_cast<long>(std::floor((o.budget_bytes - base) / o.granularity_bytes));
    double v = 0;
    const auto keep = knapsack(weight, value, capacity, &v);
    if (forced_value + v > best_value) {
      best_value = forced_value + v;
      for (int u : items) best_flags[u] = !(d == 0 || table.units[u].activation_bytes > d);
      for (size_t i = 0; i < optional.size(); ++i) best_flags[optional[i]] = !keep[i];
    }
  }
  if (best_value < 0) return false;  // flags stay "all recomputed"
  flags = best_flags;
  return true;
}

}  // namespace

bool RecomputePlan::all_fit() const {
  return std::all_of(fits.begin(), fits.end(), [](bool f) { return f; });
}

RecomputePlan plan_no_recompute(const partition::UnitCostTable& table,
                                const partition::Partition& partition, const RecomputeOptions& o) {
  return finish(table, partition, std::vector<bool>(table.units.size(), false), o);
}

RecomputePlan plan_with_flags(const partition::UnitCostTable& table,
                              const partition::Partition& partition, std::vector<bool> flags,
                              const RecomputeOptions& o) {
  OMNIBAL_CHECK(flags.size() == table.units.size(), "recompute plan: ", flags.size(),
                " flags for a cost table of ", table.units.size(), " units");
  return finish(table, partition, std::move(flags), o);
}

RecomputePlan plan_full_recompute(const partition::UnitCostTable& table,
                                  const partition::Partition& partition,
                                  const RecomputeOptions& o) {
  RecomputeSpec full;
  full.mode = RecomputeMode::kFull;
  return finish(table, partition, fixed_recompute(full, partition, block_units(table)).per_unit, o);
}

RecomputePlan plan_recompute_counts(const partition::UnitCostTable& table,
                                    const partition::Partition& partition,
                                    const std::vector<int>& counts, const RecomputeOptions& o) {
  RecomputeSpec spec;
  spec.mode = RecomputeMode::kPerStage;
  spec.per_stage = counts;
  return finish(table, partition, fixed_recompute(spec, partition, block_units(table)).per_unit, o);
}

RecomputePlan plan_adaptive_recompute(const partition::UnitCostTable& table,
                                      const partition::Partition& partition,
                                      const RecomputeOptions& o) {
  OMNIBAL_CHECK(o.budget_bytes > 0, "adaptive recompute: the memory budget must be > 0 bytes");
  OMNIBAL_CHECK(o.granularity_bytes > 0, "adaptive recompute: granularity must be > 0");
  std::vector<bool> flags(table.units.size(), false);
  for (int s = 0; s < partition.stages(); ++s) adaptive_stage(table, partition, s, o, flags);
  return finish(table, partition, flags, o);
}

}  // namespace omnibal::memory
