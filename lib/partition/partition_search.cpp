#include "partition/partition_search.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "core/error.h"

namespace omnibal::partition {

std::vector<std::vector<int>> neighbourhood_cuts(const Partition& anchor, int radius) {
  OMNIBAL_CHECK(radius >= 0, "partition search: radius must be >= 0, got ", radius);
  const std::vector<int> base = anchor.boundaries();
  const size_t k = base.size();
  std::vector<int> offset(k, 0);  // odometer over {0, -1, +1, -2, +2, ...} so the anchor is first
  auto delta = [](int i) { return i % 2 ? -(i + 1) / 2 : i / 2; };
  std::vector<std::vector<int>> out;
  for (;;) {
    std::vector<int> cuts(k);
    for (size_t i = 0; i < k; ++i) cuts[i] = base[i] + delta(offset[i]);
    out.push_back(cuts);
    size_t i = 0;
    while (i < k && ++offset[i] == 2 * radius + 1) offset[i++] = 0;
    if (i == k) break;
  }
  return out;
}

ScoredPartition score_partition(const Partition& partition, const PartitionSearchInput& input) {
  ScoredPartition sp;
  sp.partition = partition;
  const auto times = stage_sums(partition, input.unit_seconds);
  double mean = 0;
  for (double t : times) mean += t / times.size();
  double var = 0;
  for (double t : times) var += (t - mean) * (t - mean) / times.size();
  sp.stage_std_s = std::sqrt(var);
  sp.max_stage_s = *std::max_element(times.begin(), times.end());
  for (int cut : partition.boundaries()) sp.comm_bytes += input.output_bytes[cut - 1];
  sp.score = sp.stage_std_s + 2 * sp.comm_bytes / input.link_bandwidth;
  return sp;
}

PartitionSearchResult search_partitions(const PartitionSearchInput& input) {
  const int n = static_cast<int>(input.unit_seconds.size());
  OMNIBAL_CHECK(static_cast<int>(input.output_bytes.size()) == n, "partition search: ",
                input.output_bytes.size(), " output sizes for ", n, " units");
  OMNIBAL_CHECK(input.link_bandwidth > 0, "partition search: link bandwidth must be > 0");
  OMNIBAL_CHECK(input.top_k >= 1, "partition search: top_k must be >= 1, got ", input.top_k);
  PartitionSearchResult r;
  r.exact_anchor = min_max_partition(input.unit_seconds, input.stages);
  r.greedy_anchor = greedy_anchor_partition(input.unit_seconds, input.stages);
  std::set<std::vector<int>> seen;
  std::vector<ScoredPartition> fitting;
  double smallest_over = 0;
  Partition smallest_over_partition;
  for (const auto* anchor : {&r.exact_anchor, &r.greedy_anchor}) {
    for (const auto& cuts : neighbourhood_cuts(*anchor, input.radius)) {
      ++r.generated;
      bool valid = true;
      for (size_t i = 0; i < cuts.size(); ++i)
        valid = valid && cuts[i] > (i ? cuts[i - 1] : 0) && cuts[i] < n;
      if (!valid || !seen.insert(cuts).second) continue;
      ++r.non_empty;
      const Partition p = Partition::from_boundaries(cuts, n);
      if (input.fits && !input.fits(p)) {
        const double worst = score_partition(p, input).max_stage_s;
        if (smallest_over == 0 || worst < smallest_over) {
          smallest_over = worst;
          smallest_over_partition = p;
        }
        continue;
      }
      fitting.push_back(score_partition(p, input));
    }
  }
  r.fitting = static_cast<int>(fitting.size());
  OMNIBAL_CHECK(!fitting.empty(), "partition search: no candidate within radius ", input.radius,
                " fits the memory budget (e.g. ", smallest_over_partition.to_string(),
                "); raise memory.budget_gb, enable recomputation or add pipeline stages");
  std::stable_sort(fitting.begin(), fitting.end(),
                   [](const ScoredPartition& a, const ScoredPartition& b) { return a.score < b.score; });
  fitting.resize(std::min<size_t>(fitting.size(), input.top_k));
  r.top = std::move(fitting);
  return r;
}

}  // namespace omnibal::partition
