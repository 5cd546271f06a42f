#include "balance/step_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <numeric>

#include "balance/balance_metrics.h"
#include "core/error.h"
#include "core/rng.h"

namespace omnibal::balance {
namespace {

// Mixed into the seed of every placement's Rng (rank permutations, step order).
constexpr uint64_t kPlacementSeed = 0x5eed51ace0ULL;

void check_grid(int dp, int m) {
  OMNIBAL_CHECK(dp >= 1, "parallel.dp: expected >= 1 data-parallel ranks, got ", dp);
  OMNIBAL_CHECK(m >= 1, "parallel.micro_batches: expected m >= 1, got ", m);
}

// Sorts `ids` ascending by device cost, tiles first, then tokens, then id (a total order, so the
// result does not depend on the sort implementation). The key is packed into one 64-bit word
// (tiles in the top 20 bits, tokens in the low 44) and sorted with the id as a contiguous pair,
// which keeps the sort cache-friendly at 250k+ packs.
void sort_by_cost(const PackList& packs, std::vector<uint32_t>& ids) {
  static_assert(kLoadDims == 2, "sort_by_cost packs (tiles, tokens); extend the key for more");
  constexpr int64_t kTileLimit = int64_t{1} << 20, kTokenLimit = int64_t{1} << 44;
  std::vector<std::pair<uint64_t, uint32_t>> key(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t tiles = packs.cost(ids[i], kTiles), tokens = packs.cost(ids[i], kTokens);
    OMNIBAL_CHECK(tiles < kTileLimit && tokens < kTokenLimit, "placement: pack ", ids[i], " load (",
                  tiles, " tiles, ", tokens, " tokens) exceeds the sort key range");
    key[i] = {(static_cast<uint64_t>(tiles) << 44) | static_cast<uint64_t>(tokens), ids[i]};
  }
  std::sort(key.begin(), key.end());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = key[i].second;
}

// Appends the steps of one source (its packs sorted by cost) to `steps`; the tail goes to
// `carried`. Each step's packs are dealt in snake order over ranks, then ranks are permuted.
void cut_steps(const std::vector<uint32_t>& sorted, int dp, int m, Rng& rng,
               std::vector<std::vector<uint32_t>>& steps, std::vector<uint32_t>& carried) {
  const size_t per_step = static_cast<size_t>(dp) * m;
  const size_t tail = sorted.size() % per_step;
  carried.insert(carried.end(), sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(tail));
  std::vector<uint32_t> rank_order(dp);
  for (size_t b = tail; b < sorted.size(); b += per_step) {
    std::vector<uint32_t> step(per_step);
    std::iota(rank_order.begin(), rank_order.end(), 0u);
    rng.shuffle(rank_order);
    for (size_t k = 0; k < per_step; ++k) {
      const size_t micro = k / dp, pos = k % dp;
      const size_t rank = (micro % 2 == 0) ? pos : dp - 1 - pos;
      step[rank_order[rank] * m + micro] = sorted[b + k];
    }
    steps.push_back(std::move(step));
  }
}

StepPlan finish(std::vector<std::vector<uint32_t>>& steps, std::vector<uint32_t> carried, int dp,
                int m, Rng& rng) {
  std::vector<uint32_t> order(steps.size());
  std::iota(order.begin(), order.end(), 0u);
  rng.shuffle(order);  // no length curriculum: step order is independent of step load
  StepPlan plan;
  plan.dp = dp;
  plan.micro_batches = m;
  plan.slots.reserve(steps.size() * plan.packs_per_step());
  for (uint32_t s : order) plan.slots.insert(plan.slots.end(), steps[s].begin(), steps[s].end());
  plan.carried = std::move(carried);
  return plan;
}

// ---- placement by time ----

// Sorts `ids` ascending by (tile cost, first, second, id), where (first, second) is
// (predicted seconds, token cost) for time-cut steps and (token cost, predicted seconds) for
// count-cut ones. Tiles stay the first key in both, so every step holds the tile counts of
// sort_by_cost.
void sort_for_time(const PackList& packs, const std::vector<double>& seconds, bool time_first,
                   std::vector<uint32_t>& ids) {
  struct Key {
    int64_t tiles;
    double first, second;
    uint32_t id;
    bool operator<(const Key& o) const {
      if (tiles != o.tiles) return tiles < o.tiles;
      if (first != o.first) return first < o.first;
      if (second != o.second) return second < o.second;
      return id < o.id;
    }
  };
  std::vector<Key> key(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint32_t p = ids[i];
    const auto tokens = static_cast<double>(packs.cost(p, kTokens));
    key[i] = {packs.cost(p, kTiles), time_first ? seconds[p] : tokens,
              time_first ? tokens : seconds[p], p};
  }
  std::sort(key.begin(), key.end());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = key[i].id;
}

// Balances the per-rank sums of one step (laid out [rank][m]) in tiles, tokens and predicted
// seconds by swapping packs between ranks within a row (micro-batch k of every rank comes from
// the same dp consecutive packs, so a swap keeps every rank's micro-batches matched). Objective:
// sum over ranks and the three dimensions of the squared deviation of the rank sum from the
// mean, relative to the mean; first-improvement passes until none improves (at most 64).
void balance_rows(const PackList& packs, const std::vector<double>& seconds, int dp, int m,
                  std::vector<uint32_t>& step) {
  constexpr int kDims = 3, kMaxPasses = 64;
  auto value = [&](uint32_t p, int d) {
    return d == 2 ? seconds[p] : static_cast<double>(packs.cost(p, d));
  };
  std::vector<double> sum(static_cast<size_t>(dp) * kDims, 0.0);
  double mean[kDims] = {};
  for (int r = 0; r < dp; ++r)
    for (int k = 0; k < m; ++k)
      for (int d = 0; d < kDims; ++d) sum[r * kDims + d] += value(step[r * m + k], d);
  for (int d = 0; d < kDims; ++d) {
    for (int r = 0; r < dp; ++r) mean[d] += sum[r * kDims + d] / dp;
    if (mean[d] <= 0) mean[d] = 1;  // a dimension without load adds nothing to the objective
  }
  for (int pass = 0; pass < kMaxPasses; ++pass) {
    bool improved = false;
    for (int k = 0; k < m; ++k) {
      for (int a = 0; a < dp; ++a) {
        for (int b = a + 1; b < dp; ++b) {
          uint32_t& pa = step[a * m + k];
          uint32_t& pb = step[b * m + k];
          double change = 0, delta[kDims];
          for (int d = 0; d < kDims; ++d) {
            delta[d] = (value(pb, d) - value(pa, d)) / mean[d];
            const double ea = sum[a * kDims + d] / mean[d] - 1,
                         eb = sum[b * kDims + d] / mean[d] - 1;
            change += 2 * delta[d] * (ea - eb) + 2 * delta[d] * delta[d];
          }
          if (change >= -1e-15) continue;
          for (int d = 0; d < kDims; ++d) {
            sum[a * kDims + d] += delta[d] * mean[d];
            sum[b * kDims + d] -= delta[d] * mean[d];
          }
          std::swap(pa, pb);
          improved = true;
        }
      }
    }
    if (!improved) break;
  }
}

// Tiles, tokens and predicted seconds of one pack, the three dimensions placement by time
// balances.
using PackValues = std::array<double, 3>;

// Sum and largest value per dimension of one step of m = 1 (one pack per rank), and its Dist
// Ratio per dimension as balance_metrics.cpp computes it (counts: largest floored at 1).
struct StepStats {
  PackValues sum{}, max{}, dist{};
  double n = 0;
  void finish() {
    for (int d = 0; d < 3; ++d) {
      const double top = d < 2 ? std::max(max[d], 1.0) : max[d];
      dist[d] = top > 0 ? (max[d] * n - sum[d]) / (top * n) : 0.0;
    }
  }
};

StepStats step_stats(const std::vector<uint32_t>& step, const std::vector<PackValues>& value) {
  StepStats st;
  st.n = static_cast<double>(step.size());
  for (uint32_t p : step)
    for (int d = 0; d < 3; ++d) {
      st.sum[d] += value[p][d];
      st.max[d] = std::max(st.max[d], value[p][d]);
    }
  st.finish();
  return st;
}

// The stats of `step` with pack `out` replaced by `in` (O(1) unless `out` was a largest value).
StepStats replaced(const StepStats& st, const std::vector<uint32_t>& step, uint32_t out,
                   uint32_t in, const std::vector<PackValues>& value) {
  StepStats r = st;
  for (int d = 0; d < 3; ++d) {
    r.sum[d] += value[in][d] - value[out][d];
    if (value[in][d] >= st.max[d]) {
      r.max[d] = value[in][d];
    } else if (value[out][d] == st.max[d]) {  // the largest left: rescan the others
      r.max[d] = value[in][d];
      for (uint32_t p : step)
        if (p != out) r.max[d] = std::max(r.max[d], value[p][d]);
    }
  }
  r.finish();
  return r;
}

// m = 1: swaps a pack of step s with one of step s + 1 (steps [begin, end) in cut order) when
// that lowers the two steps' summed time Dist while the summed tile and token Dist Ratios of
// all steps stay at or below where they started (a swap that raises one spends what earlier
// swaps saved). First improvement, at most 16 passes. Moves between neighbours only, so steps
// stay narrow in tokens; they gain packs of matching attention cost.
void exchange_neighbours(const std::vector<PackValues>& value,
                         std::vector<std::vector<uint32_t>>& steps, size_t begin, size_t end) {
  if (end - begin < 2) return;
  std::vector<StepStats> st(end - begin);
  PackValues total{};
  for (size_t s = begin; s < end; ++s) {
    st[s - begin] = step_stats(steps[s], value);
    for (int d = 0; d < 3; ++d) total[d] += st[s - begin].dist[d];
  }
  const PackValues start = total;
  auto within = [&](int d, double change) {
    return change <= 0 || total[d] + change <= start[d] * (1 - 1e-9);
  };
  for (int pass = 0; pass < 16; ++pass) {
    bool improved = false;
    for (size_t s = begin; s + 1 < end; ++s) {
      auto& a = steps[s];
      auto& b = steps[s + 1];
      for (size_t i = 0; i < a.size(); ++i) {
        for (size_t j = 0; j < b.size(); ++j) {
          const StepStats na = replaced(st[s - begin], a, a[i], b[j], value);
          const StepStats nb = replaced(st[s + 1 - begin], b, b[j], a[i], value);
          PackValues change;
          for (int d = 0; d < 3; ++d)
            change[d] = na.dist[d] + nb.dist[d] - st[s - begin].dist[d] - st[s + 1 - begin].dist[d];
          if (change[2] >= -1e-12 || !within(0, change[0]) || !within(1, change[1])) continue;
          std::swap(a[i], b[j]);
          st[s - begin] = na;
          st[s + 1 - begin] = nb;
          for (int d = 0; d < 3; ++d) total[d] += change[d];
          improved = true;
        }
      }
    }
    if (!improved) break;
  }
}

// How a candidate of placement by time cuts its steps.
enum class Cut {
  kCount,      // sort_by_cost: placement by count itself
  kCountTime,  // (tiles, tokens, time): the same count multisets, ties broken by time
  kTime,       // (tiles, time, tokens)
};

// What a candidate of placement by time does after cutting: nothing, balance every step's rows
// (m > 1), or exchange packs between neighbouring steps (m = 1).
enum class Refine { kNone, kRows, kNeighbours };

// One candidate of placement by time: each source's packs sorted for `cut` and cut into steps,
// refined, then the step order shuffled as by count (same Rng draws).
StepPlan time_candidate(const PackList& packs, std::vector<std::vector<uint32_t>> by_source, int dp,
                        int m, uint64_t seed, const std::vector<double>& seconds, Cut cut,
                        Refine refine) {
  Rng rng(seed ^ kPlacementSeed);
  std::vector<std::vector<uint32_t>> steps;
  std::vector<uint32_t> carried;
  std::vector<PackValues> value;
  if (refine == Refine::kNeighbours) {
    value.resize(packs.size());
    for (size_t p = 0; p < packs.size(); ++p)
      value[p] = {static_cast<double>(packs.cost(p, kTiles)),
                  static_cast<double>(packs.cost(p, kTokens)), seconds[p]};
  }
  for (auto& ids : by_source) {
    if (cut == Cut::kCount) sort_by_cost(packs, ids);
    else sort_for_time(packs, seconds, cut == Cut::kTime, ids);
    const size_t first = steps.size();
    cut_steps(ids, dp, m, rng, steps, carried);
    if (refine == Refine::kNeighbours) exchange_neighbours(value, steps, first, steps.size());
  }
  if (refine == Refine::kRows)
    for (auto& step : steps) balance_rows(packs, seconds, dp, m, step);
  return finish(steps, std::move(carried), dp, m, rng);
}

// Placement by time (file comment of step_plan.h): the candidate with the smallest larger Cost
// Dist Ratio among those whose count Dist Ratios (ViT, LLM) are no worse than placement by
// count's, which is the first candidate; ties keep the earlier one.
StepPlan place_by_time(const PackList& packs, const std::vector<std::vector<uint32_t>>& by_source,
                       int dp, int m, uint64_t seed, const PackTimeModel& time, std::string* note) {
  time.validate("placement by time");
  const std::vector<double> seconds = pack_seconds(time, packs);
  struct Candidate {
    StepPlan plan;
    BalanceMetrics metrics;
    const char* name;
  };
  std::vector<Candidate> c;
  auto add = [&](Cut cut, Refine refine, const char* name) {
    StepPlan plan = time_candidate(packs, by_source, dp, m, seed, seconds, cut, refine);
    const BalanceMetrics metrics = compute_metrics(packs, plan, {0, 0}, 0, &time);
    c.push_back({std::move(plan), metrics, name});
  };
  add(Cut::kCount, Refine::kNone, "steps as by count");
  add(Cut::kCountTime, Refine::kNone, "count-cut steps, ties by time");
  if (m > 1) {
    add(Cut::kCountTime, Refine::kRows, "count-cut steps, rows balanced");
    add(Cut::kTime, Refine::kRows, "time-cut steps, rows balanced");
  } else {
    add(Cut::kCountTime, Refine::kNeighbours, "count-cut steps, neighbours exchanged");
    add(Cut::kTime, Refine::kNone, "time-cut steps");
  }
  auto worst = [](const BalanceMetrics& x) {
    return std::max(x.cost_dist_ratio_dp, x.cost_dist_ratio_mb);
  };
  const BalanceMetrics& ref = c[0].metrics;
  size_t best = 0;
  std::string refused;
  for (size_t i = 1; i < c.size(); ++i) {
    const BalanceMetrics& x = c[i].metrics;
    if (x.dist_ratio_vit > ref.dist_ratio_vit || x.dist_ratio_llm > ref.dist_ratio_llm) {
      refused +=
          fmt::format("; {}: Cost Dist {:.5f} but Dist ViT {:.5f} / LLM {:.5f} > {:.5f} / {:.5f}",
                      c[i].name, worst(x), x.dist_ratio_vit, x.dist_ratio_llm, ref.dist_ratio_vit,
                      ref.dist_ratio_llm);
      continue;
    }
    if (worst(x) < worst(c[best].metrics)) best = i;
  }
  if (note)
    *note = fmt::format("time: {} (Cost Dist {:.5f}, by count {:.5f}){}", c[best].name,
                        worst(c[best].metrics), worst(ref),
                        refused.empty() ? "" : "; refused" + refused);
  return std::move(c[best].plan);
}

}  // namespace

StepPlan place_in_order(size_t packs, int dp, int m) {
  check_grid(dp, m);
  StepPlan plan;
  plan.dp = dp;
  plan.micro_batches = m;
  const size_t full = packs - packs % plan.packs_per_step();
  plan.slots.resize(full);
  std::iota(plan.slots.begin(), plan.slots.end(), 0u);
  for (size_t p = full; p < packs; ++p) plan.carried.push_back(static_cast<uint32_t>(p));
  return plan;
}

StepPlan place_load_grouped(const PackList& packs, int dp, int m, uint64_t seed,
                            const PackTimeModel* time, std::string* note) {
  return place_by_source(packs, std::vector<uint32_t>(packs.size(), 0u), dp, m, seed, time, note);
}

StepPlan place_by_source(const PackList& packs, const std::vector<uint32_t>& pack_source, int dp,
                         int m, uint64_t seed, const PackTimeModel* time, std::string* note) {
  check_grid(dp, m);
  OMNIBAL_CHECK(pack_source.size() == packs.size(), "place_by_source: ", pack_source.size(),
                " source ids for ", packs.size(), " packs");
  uint32_t sources = 0;
  for (uint32_t s : pack_source) sources = std::max(sources, s + 1);
  std::vector<std::vector<uint32_t>> by_source(sources);
  for (uint32_t p = 0; p < packs.size(); ++p) by_source[pack_source[p]].push_back(p);
  if (time) return place_by_time(packs, by_source, dp, m, seed, *time, note);
  Rng rng(seed ^ kPlacementSeed);
  std::vector<std::vector<uint32_t>> steps;
  std::vector<uint32_t> carried;
  for (auto& ids : by_source) {
    sort_by_cost(packs, ids);
    cut_steps(ids, dp, m, rng, steps, carried);
  }
  if (note) *note = "count: steps cut by (tiles, tokens)";
  return finish(steps, std::move(carried), dp, m, rng);
}

}  // namespace omnibal::balance
