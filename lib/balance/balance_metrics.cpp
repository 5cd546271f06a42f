#include "balance/balance_metrics.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace omnibal::balance {

double dist_ratio(const int64_t* loads, size_t n) {
  if (n == 0) return 0.0;
  int64_t mx = 0, sum = 0;
  for (size_t j = 0; j < n; ++j) {
    mx = std::max(mx, loads[j]);
    sum += loads[j];
  }
  const double top = static_cast<double>(std::max<int64_t>(mx, 1));
  return (static_cast<double>(mx) * static_cast<double>(n) - static_cast<double>(sum)) /
         (top * static_cast<double>(n));
}

double time_dist_ratio(const double* seconds, size_t n) {
  if (n == 0) return 0.0;
  double mx = seconds[0], sum = 0;
  for (size_t j = 0; j < n; ++j) {
    mx = std::max(mx, seconds[j]);
    sum += seconds[j];
  }
  if (mx <= 0) return 0.0;
  return (mx * static_cast<double>(n) - sum) / (mx * static_cast<double>(n));
}

StepTime step_time(const double* pack_s, int dp, int m) {
  OMNIBAL_CHECK(dp >= 1 && m >= 1, "step_time: dp and m must be >= 1, got dp ", dp, " and m ", m);
  StepTime out;
  out.rank_s.resize(dp);
  double mb_sum = 0;
  for (int r = 0; r < dp; ++r) {
    const double* row = pack_s + static_cast<size_t>(r) * m;
    out.rank_s[r] = std::accumulate(row, row + m, 0.0);
    mb_sum += time_dist_ratio(row, static_cast<size_t>(m));
  }
  out.dist_dp = time_dist_ratio(out.rank_s.data(), out.rank_s.size());
  out.dist_mb = mb_sum / dp;
  return out;
}

namespace {

// The Cost Dist Ratios and the mean slowest-rank seconds of the plan's full steps.
void time_dist(const PackList& packs, const StepPlan& plan, const PackTimeModel& time,
               BalanceMetrics& out) {
  const std::vector<double> t = pack_seconds(time, packs);
  const size_t steps = plan.steps();
  const int m = plan.micro_batches;
  std::vector<double> step_pack_s(plan.packs_per_step());
  double dp_sum = 0, mb_sum = 0, step_sum = 0;
  for (size_t s = 0; s < steps; ++s) {
    for (int r = 0; r < plan.dp; ++r)
      for (int k = 0; k < m; ++k)
        step_pack_s[static_cast<size_t>(r) * m + k] = t[plan.pack(s, r, k)];
    const StepTime st = step_time(step_pack_s.data(), plan.dp, m);
    dp_sum += st.dist_dp;
    mb_sum += st.dist_mb;
    step_sum += *std::max_element(st.rank_s.begin(), st.rank_s.end());
  }
  out.has_time = true;
  if (steps == 0) return;
  out.cost_dist_ratio_dp = dp_sum / static_cast<double>(steps);
  out.cost_dist_ratio_mb = mb_sum / static_cast<double>(steps);
  out.step_seconds = step_sum / static_cast<double>(steps);
}

// Mean Dist Ratio over the plan's full steps, per dimension.
std::array<double, kLoadDims> mean_dist(const PackList& packs, const StepPlan& plan) {
  std::array<double, kLoadDims> total{};
  const size_t steps = plan.steps();
  std::vector<int64_t> rank_load(plan.dp);
  for (int d = 0; d < kLoadDims; ++d) {
    for (size_t s = 0; s < steps; ++s) {
      for (int r = 0; r < plan.dp; ++r) {
        int64_t load = 0;
        for (int k = 0; k < plan.micro_batches; ++k) load += packs.cost(plan.pack(s, r, k), d);
        rank_load[r] = load;
      }
      total[d] += dist_ratio(rank_load.data(), rank_load.size());
    }
    if (steps > 0) total[d] /= static_cast<double>(steps);
  }
  return total;
}

}  // namespace

BalanceMetrics compute_metrics(const PackList& packs, const StepPlan& plan,
                               const std::array<int64_t, kLoadDims>& budget, int64_t skipped,
                               const PackTimeModel* time) {
  OMNIBAL_CHECK(plan.slots.size() + plan.carried.size() == packs.size(), "compute_metrics: plan ",
                "places ", plan.slots.size() + plan.carried.size(), " packs, the list has ",
                packs.size());
  BalanceMetrics m;
  m.packs = static_cast<int64_t>(packs.size());
  m.samples = static_cast<int64_t>(packs.samples());
  m.skipped = skipped;
  m.steps = static_cast<int64_t>(plan.steps());
  m.carried_packs = static_cast<int64_t>(plan.carried.size());
  for (uint32_t p : plan.carried) m.carried_samples += packs.load(p).count;
  std::array<double, kLoadDims> sum{};
  double pad = 0, padded_total = 0;
  for (size_t p = 0; p < packs.size(); ++p) {
    for (int d = 0; d < kLoadDims; ++d) sum[d] += static_cast<double>(packs.load(p).sum[d]);
    pad += static_cast<double>(packs.pad_tokens(p));
    padded_total += static_cast<double>(packs.cost(p, kTokens));
    m.max_tiles = std::max(m.max_tiles, packs.cost(p, kTiles));
    m.max_tokens = std::max(m.max_tokens, packs.cost(p, kTokens));
  }
  m.has_time = time != nullptr;
  if (packs.size() == 0) return m;
  m.samples_per_pack = static_cast<double>(m.samples) / static_cast<double>(m.packs);
  m.pad_ratio = padded_total > 0 ? pad / padded_total : 0.0;
  const auto dist = mean_dist(packs, plan);
  m.dist_ratio_vit = dist[kTiles];
  m.dist_ratio_llm = dist[kTokens];
  const std::array<int64_t, kLoadDims> largest = {m.max_tiles, m.max_tokens};
  std::array<double, kLoadDims> fill{};
  for (int d = 0; d < kLoadDims; ++d) {
    const int64_t cap = budget[d] > 0 ? budget[d] : largest[d];
    fill[d] = cap > 0 ? sum[d] / static_cast<double>(packs.size()) / static_cast<double>(cap) : 0;
  }
  m.tile_fill = fill[kTiles];
  m.token_fill = fill[kTokens];
  if (time) time_dist(packs, plan, *time, m);
  return m;
}

}  // namespace omnibal::balance
