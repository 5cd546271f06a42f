#include "memory/recompute_planner.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "memory/stage_rules.h"
#include "schedule/one_f_one_b.h"

namespace omnibal::memory {
namespace {

bool candidate(const partition::UnitCost& u) { return u.recomputable() && u.trainable; }

ScheduleLayout layout_of(const partition::Partition& p, const RecomputeOptions& o) {
  return ScheduleLayout::of(o.schedule, o.virtual_stages, p.stages(), o.micro_batches);
}

/// Fills memory, fits, counts and time for `flags`.
RecomputePlan finish(const partition::UnitCostTable& table, const partition::Partition& p,
                     std::vector<bool> flags, const RecomputeOptions& o) {
  RecomputePlan plan;
  plan.recompute = std::move(flags);
  const ScheduleLayout layout = layout_of(p, o);
  const auto states = in_flight_states(layout);
  for (int r = 0; r < layout.ranks; ++r) {
    plan.memory.push_back(rank_memory(table, p, r, layout, states[r], plan.recompute, o.memory));
    plan.fits.push_back(o.budget_bytes <= 0 || plan.memory.back().total() <= o.budget_bytes);
  }
  for (int s = 0; s < p.stages(); ++s) {
    int count = 0;
    for (int u = p.begin(s); u < p.end(s); ++u)
      if (plan.recompute[u] && candidate(table.units[u])) {
        ++count;
        plan.recompute_s += table.units[u].recompute_cost();
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

/// Adaptive flags for pipeline rank `r` (all its chunks); returns false when it cannot fit even
/// fully recomputed. Memory = static + transient + max over states i of
/// sum_c (graphs_ic K_c + deferred_ic Wk_c), K_c the kept bytes of chunk c. One chunk: every
/// state bounds K (scaled to the largest graph count g*: g* K <= g* / g_i (room_i - g_i K0)), an
/// exact single constraint. Several chunks: each chunk's own peak count G_c, one linear bound.
bool adaptive_rank(const partition::UnitCostTable& table, const partition::Partition& p, int r,
                   const ScheduleLayout& layout, const std::vector<InFlightState>& states,
                   const RecomputeOptions& o, std::vector<bool>& flags) {
  const int v = layout.chunks_per_rank();
  std::vector<int> items, chunk_of_unit(table.units.size(), -1);
  for (int c = 0; c < v; ++c) {
    const int k = c * layout.ranks + r;
    for (int u = p.begin(k); u < p.end(k); ++u) {
      chunk_of_unit[u] = c;
      if (candidate(table.units[u])) items.push_back(u);
    }
  }
  for (int u : items) flags[u] = true;
  const StageMemory all = rank_memory(table, p, r, layout, states, flags, o.memory);
  const double fixed = all.static_bytes();
  std::vector<double> kept0(v, 0.0), weight_kept(v, 0.0);  // everything recomputed
  for (int c = 0; c < v; ++c) {
    const int k = c * layout.ranks + r;
    kept0[c] = kept_activation_bytes(table, p.begin(k), p.end(k), flags);
    weight_kept[c] = deferred_weight_bytes(table, p.begin(k), p.end(k));
  }
  const InFlightState peak = peak_per_chunk(states);
  // Item weight multipliers: g* (one chunk) or each chunk's peak graphs.
  std::vector<double> mult(v);
  for (int c = 0; c < v; ++c) mult[c] = peak.graphs[c];
  // Room for the kept extras (in mult-scaled bytes) given the transient d and the kept bytes K0.
  auto capacity = [&](double d, const std::vector<double>& k0) {
    const double room = o.budget_bytes - fixed - d;
    double cap = 0;
    if (v == 1) {
      cap = std::numeric_limits<double>::infinity();
      for (const auto& st : states) {
        const double left = room - st.deferred[0] * weight_kept[0] - st.graphs[0] * k0[0];
        if (st.graphs[0] == 0) {
          if (left < 0) return -1.0;
          continue;
        }
        cap = std::min(cap, left * mult[0] / st.graphs[0]);
      }
      if (cap == std::numeric_limits<double>::infinity()) cap = room;
    } else {
      double deferred = 0;
      for (const auto& st : states) {
        double x = 0;
        for (int c = 0; c < v; ++c) x += st.deferred[c] * weight_kept[c];
        deferred = std::max(deferred, x);
      }
      cap = room - deferred;
      for (int c = 0; c < v; ++c) cap -= peak.graphs[c] * k0[c];
    }
    return cap;
  };
  // Candidate transients: none (nothing recomputed) or the activations of one recomputed item.
  std::vector<double> transients = {0.0};
  for (int u : items) transients.push_back(table.units[u].activation_bytes);
  std::sort(transients.begin(), transients.end());
  transients.erase(std::unique(transients.begin(), transients.end()), transients.end());
  double best_value = -1;
  std::vector<bool> best_flags = flags;
  for (double d : transients) {
    // Items larger than d must be kept (not recomputed); with d == 0 every item is kept.
    std::vector<double> k0 = kept0;
    double forced_value = 0;
    std::vector<long> weight;
    std::vector<double> value;
    std::vector<int> optional;
    for (int u : items) {
      const auto& unit = table.units[u];
      const int c = chunk_of_unit[u];
      const double extra = unit.activation_bytes - table.checkpoint_bytes(u);
      if (d == 0 || unit.activation_bytes > d) {
        k0[c] += extra;
        forced_value += unit.recompute_cost();
      } else {
        optional.push_back(u);
        weight.push_back(
            static_cast<long>(std::ceil(std::max(0.0, mult[c] * extra) / o.granularity_bytes)));
        value.push_back(unit.recompute_cost());
      }
    }
    const double cap = capacity(d, k0);
    if (cap < 0) continue;
    const long cap_units = static_cast<long>(std::floor(cap / o.granularity_bytes));
    double val = 0;
    const auto keep = knapsack(weight, value, cap_units, &val);
    if (forced_value + val > best_value) {
      best_value = forced_value + val;
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
  const ScheduleLayout layout = layout_of(partition, o);
  const auto states = in_flight_states(layout);
  for (int r = 0; r < layout.ranks; ++r)
    adaptive_rank(table, partition, r, layout, states[r], o, flags);
  return finish(table, partition, flags, o);
}

}  // namespace omnibal::memory
