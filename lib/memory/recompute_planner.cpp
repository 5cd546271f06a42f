#include "memory/recompute_planner.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "memory/multi_state_knapsack.h"
#include "memory/stage_rules.h"
#include "schedule/one_f_one_b.h"

namespace omnibal::memory {
namespace {

bool candidate(const partition::UnitCost& u) { return u.checkpointed(true); }

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

/// What bounds the kept activations of pipeline rank r (all its chunks) with every candidate
/// recomputed: the candidates, the static bytes and, per chunk, the kept bytes K0, the bytes a
/// deferred W keeps and the item weight multiplier.
struct RankBound {
  int chunks = 1;                   ///< v: chunks per rank
  std::vector<int> items;           ///< the rank's recompute candidates (unit indices)
  std::vector<int> chunk_of_unit;   ///< [unit] the rank's chunk holding it, -1 for other ranks'
  double fixed = 0;                 ///< static bytes
  std::vector<double> kept0;        ///< [chunk] kept bytes, everything recomputed
  std::vector<double> weight_kept;  ///< [chunk] bytes one deferred W keeps
  /// [chunk] item weight multipliers: g* (one chunk) or each chunk's peak graph count (the
  /// linear knapsack; ZB-V's is multi_state_knapsack.h and leaves them unused).
  std::vector<double> mult;
};

/// The recompute candidates of rank r and their chunks (RankBound's chunks, items and
/// chunk_of_unit; the rest is filled by bound_all_recomputed).
RankBound rank_items(const partition::UnitCostTable& table, const partition::Partition& p, int r,
                     const ScheduleLayout& layout) {
  RankBound b;
  b.chunks = layout.chunks_per_rank();
  b.chunk_of_unit.assign(table.units.size(), -1);
  for (int c = 0; c < b.chunks; ++c) {
    const int k = layout.virtual_stage(c, r);
    for (int u = p.begin(k); u < p.end(k); ++u) {
      b.chunk_of_unit[u] = c;
      if (candidate(table.units[u])) b.items.push_back(u);
    }
  }
  return b;
}

/// Fills the memory terms of `b` for rank r under `flags` (its items all recomputed).
void bound_all_recomputed(const partition::UnitCostTable& table, const partition::Partition& p,
                          int r, const ScheduleLayout& layout,
                          const std::vector<InFlightState>& states, const RecomputeOptions& o,
                          const std::vector<bool>& flags, RankBound& b) {
  const int v = b.chunks;
  b.fixed = rank_memory(table, p, r, layout, states, flags, o.memory).static_bytes();
  b.kept0.assign(v, 0.0);
  b.weight_kept.assign(v, 0.0);
  const bool w_in_b = layout.schedule == PipelineSchedule::kZbV;  // memory_model.h
  for (int c = 0; c < v; ++c) {
    const int k = layout.virtual_stage(c, r);
    b.kept0[c] = kept_activation_bytes(table, p.begin(k), p.end(k), flags);
    b.weight_kept[c] = deferred_weight_bytes(table, p.begin(k), p.end(k));
    if (w_in_b)  // only the units kept with every candidate recomputed defer their W
      for (int u = p.begin(k); u < p.end(k); ++u)
        if (table.units[u].checkpointed(flags[u]))
          b.weight_kept[c] -= table.units[u].deferred_weight_bytes();
  }
  const InFlightState peak = peak_per_chunk(states);
  b.mult.resize(v);
  for (int c = 0; c < v; ++c) b.mult[c] = peak.graphs[c];
}

/// Room for the kept extras (in mult-scaled bytes) given the transient d and the kept bytes K0
/// per chunk; negative when a state with no graph in flight is already over the budget.
double kept_capacity(const RankBound& b, const std::vector<InFlightState>& states, double budget,
                     double d, const std::vector<double>& k0) {
  const double room = budget - b.fixed - d;
  double cap = 0;
  if (b.chunks == 1) {
    cap = std::numeric_limits<double>::infinity();
    for (const auto& st : states) {
      const double left = room - st.deferred[0] * b.weight_kept[0] - st.graphs[0] * k0[0];
      if (st.graphs[0] == 0) {
        if (left < 0) return -1.0;
        continue;
      }
      cap = std::min(cap, left * b.mult[0] / st.graphs[0]);
    }
    if (cap == std::numeric_limits<double>::infinity()) cap = room;
  } else {
    double deferred = 0;
    for (const auto& st : states) {
      double x = 0;
      for (int c = 0; c < b.chunks; ++c) x += st.deferred[c] * b.weight_kept[c];
      deferred = std::max(deferred, x);
    }
    cap = room - deferred;
    for (int c = 0; c < b.chunks; ++c) cap -= b.mult[c] * k0[c];
  }
  return cap;
}

/// The items at one candidate transient d: those larger than d must be kept (all of them when
/// d == 0), the rest are the knapsack's optional items.
struct TransientChoice {
  std::vector<double> k0;     ///< [chunk] kept bytes with the forced items kept
  double forced_value = 0;    ///< recompute seconds the forced items save
  std::vector<int> optional;  ///< units the knapsack may keep
  std::vector<long> weight;   ///< [optional] extra kept bytes x mult, in granules
  std::vector<double> value;  ///< [optional] recompute seconds saved
};

/// Splits b's items at the candidate transient d (see TransientChoice).
TransientChoice split_at_transient(const partition::UnitCostTable& table, const RankBound& b,
                                   double d, double granularity_bytes) {
  TransientChoice t;
  t.k0 = b.kept0;
  for (int u : b.items) {
    const auto& unit = table.units[u];
    const int c = b.chunk_of_unit[u];
    const double extra = unit.activation_bytes - table.checkpoint_bytes(u);
    if (d == 0 || unit.activation_bytes > d) {
      t.k0[c] += extra;
      t.forced_value += unit.recompute_cost();
    } else {
      t.optional.push_back(u);
      t.weight.push_back(
          static_cast<long>(std::ceil(std::max(0.0, b.mult[c] * extra) / granularity_bytes)));
      t.value.push_back(unit.recompute_cost());
    }
  }
  return t;
}

/// Candidate transients: none (nothing recomputed) or the activations of one recomputed item;
/// ascending, distinct.
std::vector<double> candidate_transients(const partition::UnitCostTable& table,
                                         const std::vector<int>& items) {
  std::vector<double> transients = {0.0};
  for (int u : items) transients.push_back(table.units[u].activation_bytes);
  std::sort(transients.begin(), transients.end());
  transients.erase(std::unique(transients.begin(), transients.end()), transients.end());
  return transients;
}

/// Adaptive flags for ZB-V's pipeline rank `r` (adaptive_rank's contract), bounded at every
/// moment of `states` (multi_state_knapsack.h: the largest sum at one moment, exact): per
/// candidate transient d, each block either recomputes (its W in B: it keeps its checkpoint, in
/// K0, until B and nothing after) or keeps its activations (extra bytes per graph alive) and
/// defers its W (deferred_weight_bytes per W pending); blocks larger than d must keep.
bool adaptive_rank_zb_v(const partition::UnitCostTable& table, const partition::Partition& p, int r,
                        const ScheduleLayout& layout, const std::vector<InFlightState>& states,
                        const RecomputeOptions& o, std::vector<bool>& flags) {
  RankBound b = rank_items(table, p, r, layout);
  for (int u : b.items) flags[u] = true;
  bound_all_recomputed(table, p, r, layout, states, o, flags, b);
  double best_value = -1;
  std::vector<bool> best_flags = flags;
  for (double d : candidate_transients(table, b.items)) {
    std::vector<KnapsackItem> items;
    for (int u : b.items) {
      const auto& unit = table.units[u];
      const KnapsackOption keep{unit.activation_bytes - table.checkpoint_bytes(u),
                                unit.deferred_weight_bytes(), unit.recompute_cost()};
      const bool may_recompute = d > 0 && unit.activation_bytes <= d;
      items.push_back({b.chunk_of_unit[u], {keep}});
      if (may_recompute)
        items.back().options.insert(items.back().options.begin(), KnapsackOption{});
    }
    std::vector<double> room;
    for (const auto& st : states) {
      double held = 0;
      for (int c = 0; c < b.chunks; ++c)
        held += st.graphs[c] * b.kept0[c] + st.deferred[c] * b.weight_kept[c];
      room.push_back(o.budget_bytes - b.fixed - d - held);
    }
    const auto solved = solve_multi_state_knapsack(items, states, room, o.granularity_bytes);
    if (!solved.feasible || solved.value <= best_value) continue;
    best_value = solved.value;
    for (size_t j = 0; j < b.items.size(); ++j)  // option 0 of an optional item: recompute
      best_flags[b.items[j]] = items[j].options.size() == 2 && solved.option[j] == 0;
  }
  if (best_value < 0) return false;  // flags stay "all recomputed"
  flags = best_flags;
  return true;
}

/// Adaptive flags for pipeline rank `r` (all its chunks); returns false when it cannot fit even
/// fully recomputed. Memory = static + transient + max over states i of
/// sum_c (graphs_ic K_c + deferred_ic Wk_c), K_c the kept bytes of chunk c. One chunk: every
/// state bounds K (scaled to the largest graph count g*: g* K <= g* / g_i (room_i - g_i K0)), an
/// exact single constraint. Several chunks: each chunk's own peak count G_c, one linear bound.
/// For each candidate transient, the items the knapsack keeps maximise the recompute time saved.
bool adaptive_rank(const partition::UnitCostTable& table, const partition::Partition& p, int r,
                   const ScheduleLayout& layout, const std::vector<InFlightState>& states,
                   const RecomputeOptions& o, std::vector<bool>& flags) {
  if (layout.schedule == PipelineSchedule::kZbV)
    return adaptive_rank_zb_v(table, p, r, layout, states, o, flags);
  RankBound b = rank_items(table, p, r, layout);
  for (int u : b.items) flags[u] = true;
  bound_all_recomputed(table, p, r, layout, states, o, flags, b);
  double best_value = -1;
  std::vector<bool> best_flags = flags;
  for (double d : candidate_transients(table, b.items)) {
    const TransientChoice t = split_at_transient(table, b, d, o.granularity_bytes);
    const double cap = kept_capacity(b, states, o.budget_bytes, d, t.k0);
    if (cap < 0) continue;
    const long cap_units = static_cast<long>(std::floor(cap / o.granularity_bytes));
    double val = 0;
    const auto keep = knapsack(t.weight, t.value, cap_units, &val);
    if (t.forced_value + val > best_value) {
      best_value = t.forced_value + val;
      for (int u : b.items) best_flags[u] = !(d == 0 || table.units[u].activation_bytes > d);
      for (size_t i = 0; i < t.optional.size(); ++i) best_flags[t.optional[i]] = !keep[i];
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
